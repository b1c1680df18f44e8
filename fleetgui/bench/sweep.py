"""The benchmark's loop: every configuration at every delay, interleaved, repeated.

In each repeat the monolithic baseline runs once, then the delays in turn (ascending in even
repeats, descending in odd ones, so slow drift of the machine does not favour one end) and at
each delay every configuration, in an order rotated by one each repeat. All of them run on one
fleet session: only the delay under it changes, the drafter and K are swapped on the same
pipeline, and the hub comparison re-forms the same workers into a hub for its run. Each run of
K auto starts from a fresh chooser, as a new user's first reply does.

The app's dashboard runs the same sweep on the deployment it serves: no session when it runs on
this PC alone (nothing to re-form, no hop to time), no delay to set (its network as it is), and
it may stop the run between two configurations (:meth:`Sweep.request_stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import statistics
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

from fleetgui.bench.baseline import Baseline
from fleetgui.bench.configurations import Configuration, Measurement
from fleetgui.bench.measure import RunFigures, measure
from fleetgui.bench.progress import Progress
from fleetgui.bench.prompts import pick, prompt_of_length, request_texts
from fleetgui.bench.results import Results
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.protocol import Message, Op
from fleetgui.runtime.auto_k import AutoK
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.speculative import Drafter
from fleetgui.runtime.tokenizer import Tokenizer

log = logging.getLogger(__name__)

WARM_UP_TOKENS = 4
HEARTBEATS = 3  # heartbeats timed per worker and delay, to measure the hop


@dataclass(frozen=True)
class SweepPlan:
    """What to run and with which prompts."""

    configurations: list[Configuration]
    delays: list[float]
    repeats: int
    tokens: int  # new tokens per stream
    prompts: list[str]  # requests, rendered as the model wants them
    length_prompts: dict[int, str]  # TTFT's prompts, by their length in tokens
    stop_strings: tuple[str, ...] = ()
    where: str = ""  # how progress names the network ("" : the delay, "25 ms a hop")

    def steps(self) -> int:
        per_repeat = sum(c.runs_at(d) for c in self.configurations for d in self.delays)
        per_repeat += sum(not c.per_delay for c in self.configurations)
        return per_repeat * self.repeats


def plan_sweep(
    tokenizer: Tokenizer,
    configurations: list[Configuration],
    *,
    delays: Sequence[float],
    repeats: int,
    tokens: int,
    where: str = "",
) -> SweepPlan:
    """The plan for ``configurations``, its requests rendered in the model's chat template (sent
    as they are when the template cannot be read) and TTFT's prompts made to their lengths.
    Encodes text: call it in a worker thread from a running event loop."""
    from fleetgui.runtime.chat_prompt import ChatPrompter
    from fleetgui.runtime.chat_template import ChatTemplateError

    try:
        prompter: ChatPrompter | None = ChatPrompter.for_tokenizer(tokenizer)
    except ChatTemplateError as exc:
        log.info("bench prompts sent as they are: %s", exc)
        prompter = None
    lengths = {c.prompt_tokens for c in configurations if c.prompt_tokens}
    return SweepPlan(
        configurations=configurations,
        delays=list(delays),
        repeats=repeats,
        tokens=tokens,
        prompts=request_texts(prompter),
        length_prompts={n: prompt_of_length(tokenizer, n) for n in lengths},
        stop_strings=() if prompter is None or prompter.is_fallback else prompter.stop_strings,
        where=where,
    )


def rotated(items: Sequence[Configuration], shift: int) -> list[Configuration]:
    if not items:
        return []
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def delay_order(delays: Sequence[float], repeat: int) -> list[float]:
    return list(delays) if repeat % 2 == 0 else list(reversed(delays))


class Sweep:
    """Runs a :class:`SweepPlan` on a deployed session (see module doc)."""

    def __init__(
        self,
        plan: SweepPlan,
        *,
        session: FleetSession | None,
        pipeline: Pipeline,
        drafters: dict[str, Drafter],
        set_delay: Callable[[float], None] | None,
        baseline: Baseline | None,
        progress: Progress,
    ) -> None:
        self.plan = plan
        self.session = session
        self.pipeline = pipeline
        self.drafters = drafters
        self.set_delay = set_delay
        self.baseline = baseline
        self.progress = progress
        self.stopping = False

    def request_stop(self) -> None:
        """End :meth:`run` after the configuration under way; what ran is kept."""
        self.stopping = True

    async def warm_up(self) -> None:
        """One short generation per drafter and one without: the first passes of a fresh
        stage and a fresh draft cost more than the rest."""
        prompt = self.plan.prompts[0]
        config = GenerationConfig(max_new_tokens=WARM_UP_TOKENS)
        await self.pipeline.complete(prompt, config)
        for drafter in self.drafters.values():
            self.pipeline.draft = drafter
            await self.pipeline.complete(prompt, replace(config, k="auto"))

    async def run(self, results: Results) -> Results:
        """Measure everything into ``results`` (filled as it goes: Ctrl+C keeps what ran)."""
        plan = self.plan
        for repeat in range(plan.repeats):
            for configuration in plan.configurations:
                if not configuration.per_delay:
                    await self._one(results, configuration, 0.0, repeat)
            for delay in delay_order(plan.delays, repeat):
                if self.stopping:
                    return results
                if self.set_delay is not None:
                    await asyncio.to_thread(self.set_delay, delay)
                here = [c for c in plan.configurations if c.runs_at(delay)]
                for configuration in rotated(here, repeat):
                    await self._one(results, configuration, delay, repeat)
                if self.stopping:
                    return results
                hop = await self._hop_ms()
                if hop is not None:
                    results.hop_ms.setdefault(delay, []).append(hop)
        return results

    async def _one(
        self, results: Results, configuration: Configuration, delay: float, repeat: int
    ) -> None:
        if self.stopping:
            return
        where = self.plan.where or f"{delay:g} ms a hop"
        if not configuration.per_delay:
            where = "this PC, no network"
        self.progress.step(
            f"{where}, repeat {repeat + 1}/{self.plan.repeats}: {configuration.label}"
        )
        figures = await self.run_configuration(configuration, repeat)
        results.add(configuration, delay, repeat, figures)
        text = f"TTFT {figures.ttft_ms:.0f} ms ({figures.prompt_tokens}-token prompt)"
        if configuration.mode != Measurement.TTFT:
            text = f"{figures.tokens_per_s:.1f} tok/s, TTFT {figures.ttft_ms:.0f} ms"
        if figures.acceptance is not None:
            text += f", acceptance {figures.acceptance:.0%}, mean K {figures.mean_k or 0:.1f}"
        self.progress.finished(text)

    async def run_configuration(self, configuration: Configuration, repeat: int) -> RunFigures:
        plan = self.plan
        if configuration.mode == Measurement.MONOLITHIC:
            if self.baseline is None:
                raise RuntimeError("no monolithic baseline to run")
            run = await asyncio.to_thread(
                self.baseline.run, plan.prompts[repeat % len(plan.prompts)], plan.tokens
            )
            return RunFigures(run.tokens_per_s, run.new_tokens, run.ttft_ms, 0, 0.0)
        if configuration.mode == Measurement.TTFT:
            assert configuration.prompt_tokens is not None
            prompts = [plan.length_prompts[configuration.prompt_tokens]]
            tokens = 1
        else:
            prompts = pick(plan.prompts, repeat, configuration.streams)
            tokens = plan.tokens
        if configuration.speculative:
            self.pipeline.draft = self.drafters[str(configuration.draft)]
        # a new maker: no K chooser state carried over from earlier runs (see module doc)
        self.pipeline.new_auto_k = functools.partial(AutoK)
        config = GenerationConfig(
            max_new_tokens=tokens,
            k=configuration.k if configuration.speculative else "off",
            stop=plan.stop_strings,
        )
        async with self._wiring(configuration.topology):
            return await measure(self.pipeline, prompts, config)

    @contextlib.asynccontextmanager
    async def _wiring(self, wiring: Wiring) -> AsyncIterator[None]:
        """The session's workers formed into ``wiring`` for a run, and back after."""
        before = Wiring.RING if self.session is None else self.session.deployment.wiring
        if wiring == before:
            yield
            return
        await self._form(wiring)
        try:
            yield
        finally:
            await self._form(before)

    async def _form(self, wiring: Wiring) -> None:
        session = self.session
        if session is None or session.deployment.assignment is None:
            raise RuntimeError("nothing deployed")
        await session.deployment.rewire(wiring)

    async def _hop_ms(self) -> float | None:
        """Half a heartbeat's round trip to each worker, idle (median over a few and over the
        workers): the hop's delay as the coordinator sees it, its messaging included."""
        if self.session is None:
            return None
        times = []
        for link in self.session.workers.links.values():
            if link.lost:  # a lost worker answers no heartbeat
                continue
            for _ in range(HEARTBEATS):
                started = time.perf_counter()
                await link.call(Message(Op.HEARTBEAT))
                times.append((time.perf_counter() - started) * 1000 / 2)
        return statistics.median(times) if times else None
