"""A fleet session end to end (``fleetgui.fleet.session.session``): real worker processes on
loopback, CURVE on, real OpenVINO stages. Distributed greedy output is the monolithic model's,
token for token, in PP, PP+SD and PP+SD+MB; the coordinator's short passes run on its event
loop's thread. (When workers are lost: ``test_failover.py``.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_support import WorkerProcess, fleet_session, greedy_in
from runtime_support import TINY_PROMPTS

from fleetgui.fleet.ring.route import RingRoute
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.paged_stage import PagedStage
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

pytestmark = pytest.mark.slow

N_NEW = 40
PROMPTS = TINY_PROMPTS
CLOSE = 0.003  # the draft's noise: it nearly always agrees


@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("mode", ["pp", "pp+sd", "pp+sd+mb"])
def test_fleet_greedy_matches_monolithic(
    n_workers: int,
    mode: str,
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    identity: KeyPair,
    live_workers: list[WorkerProcess],
) -> None:
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}
    export_dir = tiny_export(n_workers + 1)

    async def main() -> None:
        session = await fleet_session(identity, live_workers[:n_workers], export_dir)
        try:
            members = session.deployment.assignment.members
            assert [len(m.indices) for m in members] == [1] * n_workers
            pipe = session.pipeline(draft_dir=tiny_export(1, draft=CLOSE) if mode != "pp" else None)
            assert pipe.route.n_stages == n_workers + 1
            prompts = PROMPTS if mode == "pp+sd+mb" else PROMPTS[:1]
            results = await asyncio.gather(
                *(pipe.complete(p, greedy_in(mode, N_NEW)) for p in prompts)
            )
            for prompt, result in zip(prompts, results, strict=True):
                assert result.token_ids == references[prompt], (mode, prompt)
            if mode != "pp":
                assert all(r.acceptance_rate is not None for r in results)
        finally:
            await session.close()

    asyncio.run(main())


def test_the_coordinators_short_passes_run_on_its_event_loop_thread(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    identity: KeyPair,
    live_workers: list[WorkerProcess],
) -> None:
    """The coordinator's stage runs its first pass on its lane and, once a short pass was timed
    within the budget, the decode steps on the event loop's thread (no hand-off); with no budget
    every pass goes to its lane. The text is the same either way. The budgets are extreme so
    the outcome does not depend on how loaded the machine is."""
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}

    Calls = list[tuple[int, int]]

    async def main() -> tuple[list[tuple[list[int], Calls]], int]:
        session = await fleet_session(identity, live_workers[:1], tiny_export(2))
        runs: list[tuple[list[int], Calls]] = []
        try:
            pipe = session.pipeline()
            assert isinstance(pipe.route, RingRoute)
            stage = pipe.route.ring.local[0]
            assert isinstance(stage, LocalStage | PagedStage)
            await pipe.set_resident(None)  # the same prompt twice, each prefilled whole
            calls: Calls = []
            forward = stage.forward_blocking

            def watched(request: ForwardRequest) -> ForwardResult:
                calls.append((request.n_positions, threading.get_ident()))
                return forward(request)

            stage.forward_blocking = watched  # type: ignore[method-assign]
            for budget_ms in (60_000.0, 0.0):
                pipe.route.config = replace(pipe.route.config, inline_ms=budget_ms)
                result = await pipe.complete(PROMPTS[0], GenerationConfig(max_new_tokens=N_NEW))
                runs.append((result.token_ids, list(calls)))
                calls.clear()
        finally:
            await session.close()
        return runs, threading.get_ident()

    (generous, never), loop_thread = asyncio.run(main())
    for tokens, calls in (generous, never):
        assert tokens == references[PROMPTS[0]]
        assert len(calls) == len(tokens)  # the prompt's pass, then a step per further token
        assert calls[0][0] > 1
    tokens, calls = generous
    assert calls[0][1] != loop_thread  # no pass timed yet: on its lane
    assert all(n == 1 and thread == loop_thread for n, thread in calls[1:])
    tokens, calls = never
    assert all(thread != loop_thread for _, thread in calls)
