"""Where in-process stages run: a lone request's stages and a draft's proposal on one worker
thread (never the event loop's), overlapping streams stage by stage, and cancellation that waits
for the thread's work before the stages are free again."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import export, perturbed_copy, pipeline

from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.pipeline import GenerationOptions, Pipeline
from fleetgui.runtime.route import LocalRoute
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

pytestmark = pytest.mark.slow

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def exports(tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("threads")
    model = tiny_models("llama")
    draft = perturbed_copy(model, work / "draft", scale=0.05)
    return {
        "2s": export(model, work / "2s", stages=2),
        "draft": export(draft, work / "draft-1s", stages=1),
    }


class CallLog:
    """Records which thread ran each forward of the watched stages (the real forward runs)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []  # (stage name, thread id, "blocking"/"async")
        self.on_blocking: Callable[[str, int], None] | None = None
        self.recording = True

    def watch(self, name: str, stage: LocalStage) -> None:
        blocking, forward = stage.forward_blocking, stage.forward

        def forward_blocking(request: ForwardRequest) -> ForwardResult:
            if self.recording:
                self.calls.append((name, threading.get_ident(), "blocking"))
            if self.on_blocking is not None:
                self.on_blocking(name, len(self.calls))
            return blocking(request)

        async def forward_async(request: ForwardRequest) -> ForwardResult:
            if self.recording:
                self.calls.append((name, threading.get_ident(), "async"))
            return await forward(request)

        stage.forward_blocking = forward_blocking  # type: ignore[method-assign]
        stage.forward = forward_async  # type: ignore[method-assign]


def watched(pipe: Pipeline) -> CallLog:
    log = CallLog()
    route = pipe.route
    assert isinstance(route, LocalRoute)
    for stage in route.stages:
        assert isinstance(stage, LocalStage)
        log.watch(f"stage{stage.index}", stage)
    if pipe.draft is not None:
        log.watch("draft", pipe.draft.stage)
    return log


def test_a_lone_request_runs_its_stages_on_one_worker_thread(exports: dict) -> None:
    async def main() -> tuple[list[int], list[list[int]], CallLog, CallLog, int]:
        loop_thread = threading.get_ident()
        pipe = pipeline(exports["2s"])
        try:
            alone = watched(pipe)
            single = await pipe.complete(PROMPT, GenerationOptions(max_new_tokens=10))
            alone.recording = False
            together = CallLog()
            for stage in pipe.route.stages:  # type: ignore[attr-defined]
                together.watch(f"stage{stage.index}", stage)
            pair = await asyncio.gather(
                pipe.complete(PROMPT, GenerationOptions(max_new_tokens=24)),
                pipe.complete("class Node:", GenerationOptions(max_new_tokens=24)),
            )
        finally:
            await pipe.close()
        return single.token_ids, [r.token_ids for r in pair], alone, together, loop_thread

    single, pair, alone, together, loop_thread = asyncio.run(main())
    # One request at a time: after the prompt's pass, every forward ran blocking, off the
    # loop, both stages of a pass on the same thread, one after the other.
    prompt, decode = alone.calls[:2], alone.calls[2:]
    assert [kind for _, _, kind in prompt] == ["async", "async"]
    assert len(decode) == 2 * 9 and all(kind == "blocking" for _, _, kind in decode)
    assert all(thread != loop_thread for _, thread, _ in decode)
    passes = list(zip(decode[::2], decode[1::2], strict=True))
    assert all(a[0] == "stage0" and b[0] == "stage1" and a[1] == b[1] for a, b in passes)
    # Two streams at once overlap stage by stage (the asynchronous path; a stream takes the
    # one-thread path only while it is alone), and the text is the same whichever path a pass
    # took.
    kinds = [kind for _, _, kind in together.calls]
    assert kinds.count("async") > 4 * kinds.count("blocking")  # one-thread only while alone
    assert pair[0][:10] == single


def test_a_draft_proposal_runs_off_the_loop_in_one_go(exports: dict) -> None:
    async def main() -> tuple[CallLog, int, list[int], list[int]]:
        loop_thread = threading.get_ident()
        pipe = pipeline(exports["2s"], draft=exports["draft"])
        try:
            log = watched(pipe)
            options = GenerationOptions(max_new_tokens=16, speculative=True, k=4)
            speculative = await pipe.complete(PROMPT, options)
            plain = await pipe.complete(PROMPT, GenerationOptions(max_new_tokens=16))
        finally:
            await pipe.close()
        return log, loop_thread, speculative.token_ids, plain.token_ids

    log, loop_thread, speculative, plain = asyncio.run(main())
    draft = [(thread, kind) for name, thread, kind in log.calls if name == "draft"]
    assert len(draft) >= 4  # the prompt, then at least one proposal of 4
    assert all(kind == "blocking" and thread != loop_thread for thread, kind in draft)
    assert speculative == plain


def test_a_cancelled_request_frees_the_stages_only_after_its_thread_is_done(
    exports: dict,
) -> None:
    events: list[str] = []

    async def main() -> tuple[list[int], list[int], bool]:
        loop = asyncio.get_running_loop()
        pipe = pipeline(exports["2s"])
        try:
            reference = await pipe.complete(PROMPT, GenerationOptions(max_new_tokens=12))
            log = watched(pipe)
            task = loop.create_task(pipe.complete(PROMPT, GenerationOptions(max_new_tokens=40)))

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
            route: Any = pipe.route
            free = not any(stage.lock.locked() for stage in route.stages)
            log.on_blocking = None
            again = await pipe.complete(PROMPT, GenerationOptions(max_new_tokens=12))
        finally:
            await pipe.close()
        return reference.token_ids, again.token_ids, free

    reference, again, free = asyncio.run(main())
    assert events == ["pass done", "cancelled"]
    assert free
    assert again == reference
