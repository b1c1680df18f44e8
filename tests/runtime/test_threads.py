"""Where in-process stages run: a lone stream's stages and steps on one worker thread (never
the event loop's); a draft's proposal in one go, on a worker thread or, when short, on the
loop's; several streams overlapping stage by stage; cancellation that waits for the thread's
work before the stream is freed; and the blocking form a worker uses for short passes, on the
caller's thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from runtime_support import pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.generation import GenerationCutError
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.paged_stage import PagedStage
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.route import LocalRoute
from fleetgui.runtime.stage import ForwardRequest, ForwardResult, GreedyHead

pytestmark = pytest.mark.slow

PROMPT = "def add(a, b):"


class CallLog:
    """Records each forward of the watched stages (the real forward runs): stage name, stream,
    thread, kind ("blocking"/"async"), start and end times."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, str, float, float]] = []
        self.on_blocking: Callable[[str, int], None] | None = None
        self.recording = True

    def _record(self, name: str, request: ForwardRequest, kind: str, started: float) -> None:
        if self.recording:
            ended = time.perf_counter()
            self.calls.append(
                (name, request.stream_id, threading.get_ident(), kind, started, ended)
            )

    def watch(self, name: str, stage: LocalStage | PagedStage) -> None:
        blocking, forward = stage.forward_blocking, stage.forward

        def forward_blocking(request: ForwardRequest) -> ForwardResult:
            started = time.perf_counter()
            if self.on_blocking is not None:
                self.on_blocking(name, len(self.calls) + 1)
            result = blocking(request)
            self._record(name, request, "blocking", started)
            return result

        async def forward_async(request: ForwardRequest) -> ForwardResult:
            started = time.perf_counter()
            result = await forward(request)
            self._record(name, request, "async", started)
            return result

        stage.forward_blocking = forward_blocking  # type: ignore[method-assign]
        stage.forward = forward_async  # type: ignore[method-assign]


def watched(pipe: Pipeline) -> CallLog:
    log = CallLog()
    route = pipe.route
    assert isinstance(route, LocalRoute)
    for stage in route.stages:
        assert isinstance(stage, PagedStage)
        log.watch(f"stage{stage.index}", stage)
    if pipe.draft is not None:
        log.watch("draft", pipe.draft.stage)
    return log


def test_a_lone_stream_runs_every_stage_and_step_on_one_worker_thread(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    async def main() -> tuple[list[int], CallLog, int]:
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        try:
            log = watched(pipe)
            single = await pipe.complete(PROMPT, GenerationConfig(max_new_tokens=10))
        finally:
            await pipe.close()
        return single.token_ids, log, threading.get_ident()

    tokens, log, loop_thread = asyncio.run(main())
    assert len(tokens) == 10
    # the prompt's pass, then 9 decode steps, each through both stages, in order, blocking
    assert [name for name, *_ in log.calls] == ["stage0", "stage1"] * 10
    assert all(kind == "blocking" for _, _, _, kind, _, _ in log.calls)
    # the decode steps never wait for the loop: all on one thread, and not the loop's
    decode_threads = {thread for _, _, thread, *_ in log.calls[2:]}
    assert len(decode_threads) == 1 and loop_thread not in decode_threads


def test_streams_overlap_stage_by_stage(tiny_exports_2s_draft: dict[str, Path]) -> None:
    """With two streams, stage 1 computes one stream while stage 0 computes the other (their
    forwards overlap in time, on different threads), and each text is the lone stream's."""

    async def main() -> tuple[list[list[int]], list[list[int]], CallLog]:
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        prompts = [PROMPT, "class Node:"]
        try:
            alone = [
                (await pipe.complete(p, GenerationConfig(max_new_tokens=24))).token_ids
                for p in prompts
            ]
            log = watched(pipe)
            pair = await asyncio.gather(
                *(pipe.complete(p, GenerationConfig(max_new_tokens=24)) for p in prompts)
            )
        finally:
            await pipe.close()
        return alone, [r.token_ids for r in pair], log

    alone, pair, log = asyncio.run(main())
    assert pair == alone
    first = [c for c in log.calls if c[0] == "stage0"]
    second = [c for c in log.calls if c[0] == "stage1"]
    overlapping = [
        (a, b)
        for a in first
        for b in second
        if a[1] != b[1] and a[4] < b[5] and b[4] < a[5]  # other streams, intervals intersect
    ]
    assert len(overlapping) >= 5
    assert all(a[2] != b[2] for a, b in overlapping)


def test_a_draft_proposal_runs_in_one_go_off_the_loop_or_on_it_when_short(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    """A proposal's K passes run together: on a worker thread, or on the loop's thread once
    the last proposal showed they take at most ``inline_ms`` (the tiny draft's do)."""

    async def main(inline_ms: float) -> tuple[CallLog, int, list[int], list[int]]:
        loop_thread = threading.get_ident()
        pipe = pipeline(tiny_exports_2s_draft["2s"], draft=tiny_exports_2s_draft["draft"])
        try:
            assert pipe.draft is not None
            pipe.draft.inline_ms = inline_ms
            log = watched(pipe)
            options = GenerationConfig(max_new_tokens=16, k=4)
            speculative = await pipe.complete(PROMPT, options)
            plain = await pipe.complete(PROMPT, GenerationConfig(max_new_tokens=16))
        finally:
            await pipe.close()
        return log, loop_thread, speculative.token_ids, plain.token_ids

    def draft_calls(log: CallLog) -> list[tuple[int, str]]:
        return [(thread, kind) for name, _, thread, kind, _, _ in log.calls if name == "draft"]

    log, loop_thread, speculative, plain = asyncio.run(main(inline_ms=0.0))
    calls = draft_calls(log)
    assert len(calls) >= 8  # the prompt, then at least two proposals of 4
    assert all(kind == "blocking" and thread != loop_thread for thread, kind in calls)
    assert speculative == plain

    log, loop_thread, speculative, plain = asyncio.run(main(inline_ms=1000.0))
    calls = draft_calls(log)
    assert all(kind == "blocking" for _, kind in calls)
    # the prompt and the first proposal (no time measured yet) off the loop, the rest on it
    assert all(thread != loop_thread for thread, _ in calls[:5])
    assert len(calls) > 5 and all(thread == loop_thread for thread, _ in calls[5:])
    assert speculative == plain


def test_a_cancelled_stream_is_freed_only_after_its_thread_is_done(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    """Cancelling a stream mid-decode waits for the step its thread is running, runs no step
    after it, and leaves the stages serving (the next request gives the same text)."""
    events: list[str] = []

    async def main() -> tuple[list[int], list[int], int, int]:
        loop = asyncio.get_running_loop()
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        try:
            reference = await pipe.complete(PROMPT, GenerationConfig(max_new_tokens=12))
            log = watched(pipe)
            task = loop.create_task(pipe.complete(PROMPT, GenerationConfig(max_new_tokens=40)))

            def cancel_midway(name: str, count: int) -> None:
                if count == 9:  # a decode pass, in the worker thread
                    loop.call_soon_threadsafe(task.cancel)
                    time.sleep(0.2)  # the cancellation reaches the loop while this pass runs
                    events.append("pass done")

            log.on_blocking = cancel_midway
            try:
                await task
            except asyncio.CancelledError:
                events.append("cancelled")
            log.on_blocking = None
            calls_at_cancel = len(log.calls)
            held = sum(len(stage.stream_ids()) for stage in pipe.route.stages)  # type: ignore[attr-defined]
            again = await pipe.complete(PROMPT, GenerationConfig(max_new_tokens=12))
        finally:
            await pipe.close()
        return reference.token_ids, again.token_ids, calls_at_cancel, held

    reference, again, calls_at_cancel, held = asyncio.run(main())
    assert events == ["pass done", "cancelled"]
    assert calls_at_cancel <= 10  # the pass under way (and its other stage), nothing more
    assert held == 0  # the stream was released on every stage
    assert again == reference


def test_closing_the_pipeline_stops_a_decode_run_under_way(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    """A pipeline closed while a stream decodes (the app quitting mid-answer) stops the run
    after its step under way instead of computing the rest of its token budget, and the
    stream ends with an error, not with an answer that looks finished."""

    async def main() -> tuple[int, int, int]:
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        log = watched(pipe)
        deltas = 0
        closed_at = -1
        try:
            with pytest.raises(GenerationCutError, match="closed"):
                async with contextlib.aclosing(
                    pipe.stream(PROMPT, GenerationConfig(max_new_tokens=400))
                ) as items:
                    async for _item in items:
                        deltas += 1
                        if deltas == 5:
                            await pipe.close()
                            closed_at = len(log.calls)
        finally:
            await pipe.close()
        await asyncio.sleep(0.3)  # a run that went on would keep calling the stages
        return closed_at, len(log.calls), deltas

    closed_at, calls, deltas = asyncio.run(main())
    assert closed_at > 0
    assert calls <= closed_at + 2 * 2  # at most the step under way and one already handed on
    assert deltas < 40


def test_run_blocking_runs_every_stage_on_the_calling_thread_with_the_lanes_results(
    tiny_exports_2s_draft: dict[str, Path],
) -> None:
    """``LocalRoute.run_blocking`` (what a worker uses for short passes) computes the same
    tokens as the lanes, on the caller's thread, stage after stage."""

    async def main() -> tuple[list[list[int]], list[list[int]], CallLog, int]:
        pipe = pipeline(tiny_exports_2s_draft["2s"])
        route = pipe.route
        assert isinstance(route, LocalRoute)
        log = watched(pipe)
        ids = pipe.tokenizer.encode(PROMPT)
        lanes, inline = [], []
        try:
            token = None
            for stream_id, out, blocking in ((1, lanes, False), (2, inline, True)):
                feed = ids
                for _ in range(6):  # the prompt, then 5 decode steps
                    request = ForwardRequest(
                        stream_id, np.array([feed], dtype=np.int64), head=GreedyHead()
                    )
                    result = route.run_blocking(request) if blocking else await route.run(request)
                    out.append(result.tokens)
                    assert sorted(result.compute_ms) == [0, 1]
                    token = result.tokens[-1]
                    feed = [token]
        finally:
            await pipe.close()
        return lanes, inline, log, threading.get_ident()

    lanes, inline, log, caller = asyncio.run(main())
    assert inline == lanes and all(len(tokens) == 1 for tokens in inline)
    on_caller = [(name, stream) for name, stream, thread, *_ in log.calls if thread == caller]
    assert on_caller == [("stage0", 2), ("stage1", 2)] * 6  # the lanes' stream 1: other threads
