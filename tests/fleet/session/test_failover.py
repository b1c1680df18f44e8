"""Failover (``fleetgui.fleet.session.failover``) on real worker processes on loopback, CURVE on,
real OpenVINO stages: when a worker is killed (-9) or hangs mid-generation, a spare or a
neighbour takes its stages and the text is still the monolithic model's, token for token; when
nobody is left for a stage, one clear error says which workers to restart, and restarting them
works. Each test starts its own workers: they are killed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from fleet_support import (
    FAST_LINKS,
    WorkerProcess,
    fast_coordinator,
    fleet_session,
    greedy_in,
    running_workers,
    start_all,
    worker_process,
)
from runtime_support import TINY_PROMPTS
from runtime_support import pipeline as runtime_pipeline

from fleetgui.errors import FleetguiError
from fleetgui.fleet.placement.fleet_too_small import FleetTooSmallError
from fleetgui.fleet.session.config import LinkReason, LinkState
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.pipeline import Pipeline

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)

N_NEW = 40
PROMPTS = TINY_PROMPTS
CLOSE = 0.003  # the draft's noise: it nearly always agrees


async def _generate_and_kill(
    session: FleetSession,
    victim: WorkerProcess,
    prompt: str,
    after_tokens: int,
    *,
    how: str = "kill",
    **options: object,
) -> GenerationResult:
    pipe = session.pipeline(draft_dir=options.pop("draft", None))  # type: ignore[arg-type]
    seen = 0
    result = None
    async for item in pipe.stream(prompt, GenerationConfig(max_new_tokens=N_NEW, **options)):  # type: ignore[arg-type]
        if isinstance(item, GenerationResult):
            result = item
        else:
            seen += 1
            if seen == after_tokens:
                if how == "kill":
                    victim.kill()
                else:  # a hung worker: alive, connected, silent
                    assert victim.process is not None
                    victim.process.send_signal(signal.SIGSTOP)
    assert result is not None
    return result


@pytest.mark.parametrize("how", ["kill", "hang"])
def test_lost_worker_spare_takes_over(
    how: str,
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    identity: KeyPair,
    root: Path,
    authorized_keys: Path,
) -> None:
    """3 stages: coordinator, a, b; spare c. b is killed (-9) or hangs (SIGSTOP) mid-generation:
    it is noticed within seconds, c takes its stage and the text is unchanged."""
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}
    with running_workers(root / f"spare-{how}", ["a", "b", "c"], authorized_keys) as ws:

        async def main() -> None:
            session = await fleet_session(identity, ws, tiny_export(3))
            try:
                assert session.deployment.assignment.spares == ("c",)
                started = time.monotonic()
                result = await _generate_and_kill(session, ws[1], PROMPTS[0], 8, how=how)
                assert result.token_ids == references[PROMPTS[0]]
                assert time.monotonic() - started < FAST_LINKS.lost_after_s + 10
                assert session.failover.failovers == ["b"]
                assert [m.name for m in session.deployment.assignment.members] == ["a", "c"]
            finally:
                await session.close()
                if how == "hang" and ws[1].process is not None:
                    ws[1].process.send_signal(signal.SIGCONT)

        asyncio.run(main())


# The failure injection: the second worker killed 0 s and 3 s after the first, 10 runs
# each; plus 0.3 s (found lost while the first one's failover loads its stage onto it), the
# timing of the original bug with these links' 1.5 s detection.
DOUBLE_FAILURE_RUNS = {3.0: 6, 0.0: 6, 0.3: 2}
DOUBLE_FAILURE_LANES = 6  # worker pairs running runs side by side: a run mostly waits


@dataclass
class _DoubleFailure:
    """One run: its timing and configuration, and what it gave."""

    gap_s: float
    local_failover: bool  # False: this PC may not take the lost stages, so the run must fail
    workers: tuple[str, str] = ("", "")  # the lane's pair it ran on
    answers: list[list[int]] = field(default_factory=list)  # each generation's tokens, in order
    error: FleetguiError | None = None
    seconds: float = 0.0
    first_answer_s: float | None = None  # from the first kill to the first answer's end
    after_restart: list[int] | None = None  # after the error: both restarted, rejoined, asked
    after_restart_error: FleetguiError | None = None

    def __str__(self) -> str:
        local = "on" if self.local_failover else "off"
        ended = f"error {self.error!r}" if self.error is not None else "no error"
        first = "-" if self.first_answer_s is None else f"{self.first_answer_s:.1f} s"
        if self.after_restart is not None or self.after_restart_error is not None:
            ended += f"; after restarting both: {self.after_restart_error or 'an answer'}"
        return (
            f"{'+'.join(self.workers)}, gap {self.gap_s:g} s, local failover {local}: "
            f"{len(self.answers)} answer(s) (the first {first} after the first kill), {ended}, "
            f"{self.seconds:.1f} s"
        )

    def problems(self, reference: list[int]) -> list[str]:
        """What is wrong with the outcome (empty: nothing). Every answer must be the
        uninterrupted run's. With local failover the coordinator can hold the whole model, so
        no error either; without it nobody is left for stages 1-2, so the run must end with
        the error that names both workers and those stages."""
        found = [f"answer {i} differs" for i, a in enumerate(self.answers) if a != reference]
        if self.local_failover:
            if self.error is not None:
                found.append("an error although this PC can run every stage")
            if not self.answers:
                found.append("no answer")
            return found
        a, b = self.workers
        if not isinstance(self.error, FleetTooSmallError):
            return [*found, "no clear error although nobody is left for stages 1-2"]
        text = str(self.error)
        for needed in (f"workers {a} and {b} were lost", "stages 1-2", f"Restart {a} and {b}"):
            if needed not in text:
                found.append(f"the error does not say {needed!r}")
        if self.error.lost != (a, b) or self.error.stages != (1, 2):
            found.append(f"the error's lost {self.error.lost} / stages {self.error.stages}")
        if self.after_restart != reference:  # what the error says to do works
            found.append(
                f"after restarting both, the session answered {self.after_restart} "
                f"({self.after_restart_error!r})"
            )
        return found


async def _double_failure(
    run: _DoubleFailure, identity: KeyPair, pair: list[WorkerProcess], export_dir: Path
) -> None:
    """Generate on coordinator + a + b; kill -9 a at the 6th token of the first answer and b
    ``run.gap_s`` later, and keep asking for answers (a new one as each ends) until one that
    started after b's kill has ended, or an error ends the run. After the error, do what it
    says: restart both (same ports), and once they rejoined the session ask again."""
    a, b = pair
    run.workers = (a.name, b.name)
    loop = asyncio.get_running_loop()
    second_killed = asyncio.Event()
    events: list[tuple[str, LinkState, str]] = []

    def kill_second() -> None:
        b.kill()
        second_killed.set()

    started = time.monotonic()
    config = replace(fast_coordinator(), local_failover=run.local_failover)
    session = FleetSession(identity, config, on_event=lambda *e: events.append(e))
    pipe = None
    killed: float | None = None  # when a was
    try:
        await session.connect([w.endpoint for w in pair])
        await session.deploy(export_dir)
        pipe = await session.open_pipeline()
        after_kill = False
        while not after_kill:
            after_kill = second_killed.is_set()
            result = None
            seen = 0
            async for item in pipe.stream(PROMPTS[0], greedy_in("pp", N_NEW)):
                if isinstance(item, GenerationResult):
                    result = item
                    continue
                seen += 1
                if not run.answers and seen == 6:
                    a.kill()
                    killed = time.monotonic()
                    loop.call_later(run.gap_s, kill_second)
            assert result is not None
            if not run.answers and killed is not None:
                run.first_answer_s = time.monotonic() - killed
            run.answers.append(result.token_ids)
    except FleetguiError as exc:
        run.error = exc
        if pipe is not None and isinstance(exc, FleetTooSmallError):
            await second_killed.wait()
            await _restart_and_ask(run, pipe, pair, events)
    finally:
        await session.close()
        if killed is None:  # ended before the first kill: both down anyway, for the lane
            a.kill()
            kill_second()
        await second_killed.wait()
        run.seconds = time.monotonic() - started


async def _restart_and_ask(
    run: _DoubleFailure,
    pipe: Pipeline,
    pair: list[WorkerProcess],
    events: list[tuple[str, LinkState, str]],
) -> None:
    """Restart the lost pair on their ports; once the session says both rejoined, ask again
    (the answer goes to ``run.after_restart``, an error to ``run.after_restart_error``)."""
    await asyncio.to_thread(start_all, pair)
    rejoined = {(w.name, LinkState.ONLINE, LinkReason.REJOINED) for w in pair}
    for _ in range(60):
        if rejoined <= set(events):
            break
        await asyncio.sleep(0.25)
    try:
        run.after_restart = (await pipe.complete(PROMPTS[0], greedy_in("pp", N_NEW))).token_ids
    except FleetguiError as exc:
        run.after_restart_error = exc


def test_double_failure_injection_gives_the_exact_text_or_a_clear_error(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    identity: KeyPair,
    root: Path,
    authorized_keys: Path,
) -> None:
    """3 stages on the coordinator, a and b, no spare: kill -9 a mid-answer and b 0 s, 0.3 s or
    3 s later (6, 2 and 6 runs; after 3 s, answers run on coordinator + b when a's failover
    was quick enough, and b dies in the middle of one). A layout that lacked the lost stage ran
    stage 0 straight into stage 2 and printed garbage with exit status 0 (8 of 12 runs). Now
    every answer is the uninterrupted run's, and a run ends with the error naming both workers
    and stages 1-2 exactly when nobody left can run them: half the runs forbid this PC from
    taking the stages (so they must fail), the other half let it (so they must not). After the
    error, doing what it says (restart both) lets the same session answer exactly again. Lanes
    of two workers take the next run as they come free, restarting whichever of theirs is down
    (same port, key and cache, so the deployment is cached)."""
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}
    by_gap = [
        [_DoubleFailure(gap, local_failover=i % 2 == 0) for i in range(n)]
        for gap, n in DOUBLE_FAILURE_RUNS.items()
    ]
    # interleaved gaps, so lanes are not all killing or failing over at the same moment
    schedule = [run for runs in itertools.zip_longest(*by_gap) for run in runs if run]
    queue = iter(schedule)
    lanes = [
        [worker_process(root / "double", f"{ab}{lane}", authorized_keys) for ab in "ab"]
        for lane in range(DOUBLE_FAILURE_LANES)
    ]

    async def lane(pair: list[WorkerProcess]) -> None:
        for run in queue:
            down = [w for w in pair if w.process is None or w.process.poll() is not None]
            await asyncio.to_thread(start_all, down)
            await _double_failure(run, identity, pair, tiny_export(3))
            log.info("%s", run)

    async def main() -> None:
        await asyncio.gather(*(lane(pair) for pair in lanes))

    started = time.monotonic()
    start_all([w for pair in lanes for w in pair])
    try:
        for worker in (w for pair in lanes for w in pair):
            worker.args = _same_port(worker)  # restarted where the sessions look for it
        asyncio.run(main())
    finally:
        for worker in (w for pair in lanes for w in pair):
            worker.stop()
    elapsed = time.monotonic() - started
    for gap, n in DOUBLE_FAILURE_RUNS.items():
        runs = [r for r in schedule if r.gap_s == gap]
        exact = sum(r.error is None for r in runs)
        before = sum(r.first_answer_s is not None and r.first_answer_s < gap for r in runs)
        log.info(
            "second kill %g s after the first: %d of %d runs gave the exact text, %d the error; "
            "in %d the first answer ended before the second kill",
            gap,
            exact,
            n,
            n - exact,
            before,
        )
    log.info("%d runs in %.1f s", len(schedule), elapsed)
    reference = references[PROMPTS[0]]
    problems = [f"{run}: {problem}" for run in schedule for problem in run.problems(reference)]
    assert not problems, "\n".join(problems)


def test_kill_worker_neighbour_takes_layers_and_worker_rejoins(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    identity: KeyPair,
    root: Path,
    authorized_keys: Path,
) -> None:
    """4 stages over a, b, c with no spare; kill -9 b during PP+SD: a neighbour takes its
    stage; b restarted on the same port and key rejoins as a spare."""
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}
    events: list[tuple[str, LinkState, str]] = []
    with running_workers(root / "merge", ["a", "b", "c"], authorized_keys) as ws:

        async def main() -> None:
            session = FleetSession(
                identity, fast_coordinator(), on_event=lambda *e: events.append(e)
            )
            await session.connect([w.endpoint for w in ws])
            await session.deploy(tiny_export(4))
            try:
                result = await _generate_and_kill(
                    session, ws[1], PROMPTS[0], 6, k=3, draft=tiny_export(1, draft=CLOSE)
                )
                assert result.token_ids == references[PROMPTS[0]]
                members = {m.name: m.indices for m in session.deployment.assignment.members}
                assert set(members) == {"a", "c"}
                assert sorted(members["a"] + members["c"]) == [1, 2, 3]
                restarted = replace(ws[1], args=_same_port(ws[1]))
                restarted.start()
                ws[1] = restarted
                for _ in range(40):
                    if ("b", LinkState.ONLINE, LinkReason.REJOINED) in events:
                        break
                    await asyncio.sleep(0.25)
                assert ("b", LinkState.LOST) in [e[:2] for e in events]
                assert ("b", LinkState.ONLINE, LinkReason.REJOINED) in events
                assert "b" in session.deployment.assignment.spares
                again = await session.pipeline().complete(PROMPTS[1], greedy_in("pp", N_NEW))
                assert again.token_ids == references[PROMPTS[1]]
            finally:
                await session.close()

        asyncio.run(main())


def _same_port(worker: WorkerProcess) -> list[str]:
    args = list(worker.args)
    args[args.index("--listen") + 1] = worker.address
    return args


def test_generate_cli_exits_with_one_clear_error_when_both_workers_die(
    tiny_export: Callable[..., Path], root: Path, authorized_keys: Path, identity_dir: Path
) -> None:
    """`fleetgui generate` on coordinator + a + b, told not to run lost stages here: kill -9 a
    and b while it prints the answer. It must not finish the text (stages 1-2 have nowhere to
    run) nor print anything an uninterrupted run would not, and must say so: exit status 1 and
    one line naming both workers, the stages lost and what to do, no traceback."""
    n_new = 400  # about a second of tokens on this fleet: still printing when both die

    async def uninterrupted() -> GenerationResult:
        local = runtime_pipeline(tiny_export(3))
        try:
            return await local.complete(PROMPTS[0], GenerationConfig(max_new_tokens=n_new))
        finally:
            await local.close()

    expected = asyncio.run(uninterrupted())
    assert len(expected.token_ids) == n_new
    home = root / "cli-double-home"
    with running_workers(root / "cli-double", ["a", "b"], authorized_keys) as ws:
        env = {**os.environ, "FLEETGUI_HOME": str(home), "PYTHONIOENCODING": "utf-8"}
        command = [
            sys.executable, "-m", "fleetgui", "generate", str(tiny_export(3)),
            "--prompt", PROMPTS[0], "--max-new-tokens", str(n_new),
            "--workers", ",".join(w.address for w in ws), "--no-local-failover",
            "--identity", str(identity_dir), "--precision", "f32",
            "--threads", "1",
        ]  # fmt: skip
        cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            assert cli.stdout is not None
            first = cli.stdout.read(1)  # the answer's text is printed as its tokens come
            for worker in ws:
                worker.kill()
            rest, errors = cli.communicate(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait(10)
    printed, stderr = (first + rest).decode(), errors.decode()
    assert cli.returncode == 1, stderr[-3000:]
    lines = stderr.splitlines()
    said = [line for line in lines if line.startswith("fleetgui generate: ")]
    assert len(said) == 1, stderr[-3000:]
    for needed in ("error: workers a and b were lost", "stages 1-2", "Restart a and b"):
        assert needed in said[0], said[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not any(line.startswith(("ERROR", "CRITICAL")) for line in lines), stderr[-3000:]
    assert printed.endswith("\n"), "the cut answer's line is ended before the error"
    cut = printed[:-1]
    assert cut and expected.text.startswith(cut) and cut != expected.text
