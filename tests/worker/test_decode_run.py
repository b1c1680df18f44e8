"""DECODE (``fleetgui.worker.decode_run``): a worker holding the whole model chains a stream's
decode steps itself.

The codec checks every field; on a real worker process the chained run gives the text the
step-by-step ring and the local pipeline give (greedy and seeded sampling), a stop string ends it
with the worker's stream freed, and two streams on one copy interleave with exact texts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fleet_support import WorkerProcess
from runtime_support import EXACT, pipeline

from fleetgui.assembler import aopen
from fleetgui.fleet.ring.route import RingRoute, RouteConfig
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.replicas import ReplicatedPipeline
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.decode_codec import (
    MAX_DECODE_STEPS,
    DecodeSteps,
    decode_steps_from_message,
    encode_decode,
)
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import Message, Op, ProtocolError, decode
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.pass_scheduler import PassScheduler
from fleetgui.runtime.stage import GreedyHead, SampleHead

PROMPT = "The old lighthouse keeper said"
GREEDY = GenerationConfig(max_new_tokens=40)
SAMPLED = GenerationConfig(max_new_tokens=40, temperature=0.9, top_k=40, top_p=0.95, seed=7)


def test_a_decode_message_round_trips_and_every_field_is_checked() -> None:
    heads = (
        GreedyHead(),
        SampleHead(GenerationConfig(temperature=0.7, top_k=5, top_p=0.9, seed=3), 0.25),
    )
    steps = DecodeSteps(4, 17, heads, frozenset({2, 0}))
    assert decode_steps_from_message(decode(encode_decode(steps, request_id=9))) == steps

    def message(**meta: object) -> Message:
        good = {"token": 1, "heads": [{"kind": "greedy"}], "stop_ids": []}
        return Message(Op.DECODE, 1, 2, meta={**good, **meta})

    bad = [
        message(heads=[]),
        message(heads=[{"kind": "greedy"}] * (MAX_DECODE_STEPS + 1)),
        message(heads=[{"kind": "verify_greedy", "drafts": [1]}]),  # not a plain step
        message(heads=[{"kind": "logits"}]),
        message(token=-1),
        message(stop_ids=[1.5]),
        replace(message(), tensors=(np.zeros((1, 1), np.int64),)),
    ]
    for wrong in bad:
        with pytest.raises(ProtocolError):
            decode_steps_from_message(wrong)


@pytest.fixture(scope="module")
def worker(start_workers: Callable[..., list[WorkerProcess]]) -> WorkerProcess:
    (started,) = start_workers("a")
    return started


def _config(worker_decode: bool) -> CoordinatorConfig:
    return CoordinatorConfig(
        local=EXACT,
        worker_precision="f32",
        worker_threads=1,
        route=RouteConfig(worker_decode=worker_decode),
    )


def _route(copy: ReplicatedPipeline) -> RingRoute:
    route = copy.replicas[0].session.route
    assert route is not None
    return route


async def _on_one_copy(
    export_dir: Path,
    worker: WorkerProcess,
    identity: KeyPair,
    worker_decode: bool,
    run: Callable[[ReplicatedPipeline], object],
    *,
    kv_reuse: bool = True,
) -> tuple[object, int]:
    """``run(copy)``'s outcome on a copy of the model on ``worker``, and the DECODE segments
    its route sent."""
    llm = await aopen(
        export_dir,
        workers=[worker.endpoint],
        layout="replicas",
        identity=identity,
        coordinator=_config(worker_decode),
        kv_reuse=kv_reuse,
    )
    copy = llm.runtime
    assert isinstance(copy, ReplicatedPipeline)
    try:
        outcome = await run(copy)  # type: ignore[misc]
        return outcome, _route(copy).decode_segments
    finally:
        await llm.aclose()


@pytest.mark.slow
def test_the_worker_chained_run_gives_the_step_by_step_text(
    tiny_export: Callable[..., Path], worker: WorkerProcess, identity: KeyPair
) -> None:
    local = pipeline(tiny_export(2))

    async def reference() -> list[GenerationResult]:
        try:
            return [await local.complete(PROMPT, o) for o in (GREEDY, SAMPLED)]
        finally:
            await local.close()

    async def both(copy: ReplicatedPipeline) -> list[GenerationResult]:
        return [await copy.complete(PROMPT, o) for o in (GREEDY, SAMPLED)]

    want = asyncio.run(reference())
    chained, segments = asyncio.run(_on_one_copy(tiny_export(2), worker, identity, True, both))
    stepwise, none = asyncio.run(_on_one_copy(tiny_export(2), worker, identity, False, both))
    assert segments >= 2 and none == 0  # one run a reply, or more
    for got in (chained, stepwise):
        assert [r.token_ids for r in got] == [r.token_ids for r in want]  # type: ignore[attr-defined]
    assert len(want[0].token_ids) == GREEDY.max_new_tokens
    assert want[0].token_ids != want[1].token_ids  # the sampled one really sampled


@pytest.mark.slow
@pytest.mark.parametrize("kv_reuse", [False, True], ids=["freed", "resident"])
def test_a_stop_string_ends_the_run_and_frees_the_stream_on_the_worker(
    tiny_export: Callable[..., Path], worker: WorkerProcess, identity: KeyPair, kv_reuse: bool
) -> None:
    """Without reuse the stream is freed; with it the stream stays, and the next request,
    which continues it past the steps the worker ran ahead of the stop, is exact too."""

    async def stopped_then_whole(copy: ReplicatedPipeline) -> tuple[GenerationResult, ...]:
        whole = await copy.complete(PROMPT, GREEDY)
        stop = whole.text[len(whole.text) // 3 :][:4]  # a string a third of the way in
        cut = await copy.complete(PROMPT, replace(GREEDY, stop=(stop,)))
        link = copy.replicas[0].session.deployment.ring.members[0]
        status = (await link.call(Message(Op.HEARTBEAT))).meta
        # the run ended and its stream was released, or kept resident for the next request
        assert status["streams"] == (1 if kv_reuse else 0)
        again = await copy.complete(PROMPT, GREEDY)
        return whole, cut, again

    (whole, cut, again), _ = asyncio.run(
        _on_one_copy(tiny_export(2), worker, identity, True, stopped_then_whole, kv_reuse=kv_reuse)  # type: ignore[arg-type]
    )
    assert cut.finish_reason == "stop" and len(cut.token_ids) < len(whole.token_ids)
    assert whole.token_ids[: len(cut.token_ids)] == cut.token_ids
    assert again.token_ids == whole.token_ids
    assert (cut.cached_tokens > 0, again.cached_tokens > 0) == (kv_reuse, kv_reuse)


@pytest.mark.slow
def test_two_streams_on_one_copy_share_its_passes_with_exact_texts(
    tiny_export: Callable[..., Path], worker: WorkerProcess, identity: KeyPair
) -> None:
    prompts = [PROMPT, "Once upon a time, in a small village"]
    local = pipeline(tiny_export(2))

    async def reference() -> list[list[int]]:
        try:
            return [(await local.complete(p, GREEDY)).token_ids for p in prompts]
        finally:
            await local.close()

    async def together(copy: ReplicatedPipeline) -> tuple[list[list[int]], int]:
        results = await asyncio.gather(*(copy.complete(p, GREEDY) for p in prompts))
        scheduler = copy.replicas[0].pipeline.passes
        assert isinstance(scheduler, PassScheduler)
        return [r.token_ids for r in results], max(len(f.streams) for f in scheduler.formed)

    outcome, _ = asyncio.run(_on_one_copy(tiny_export(2), worker, identity, True, together))
    got, widest = outcome  # type: ignore[misc]
    # both streams' steps share the copy's passes (one FORWARD_BATCH a step for both) rather
    # than each chaining its own steps on the worker
    assert widest == 2
    assert got == asyncio.run(reference())
