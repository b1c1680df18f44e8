"""``FleetBench``: the dashboard's "Benchmark this fleet", ``fleetgui bench``'s sweep run on the
pipeline the app serves, as an asyncio task on the app's loop (qasync).

It measures the deployment as it is (the fleet's own network, one delay: none added): PP, PP+MB,
PP+SD at each K with n-gram drafts and with the deployed draft model when there is one, K auto, and
the full stack PP+SD+MB (:mod:`fleetgui.app.dashboard.bench_record`). The chat is not broken by it:
new replies wait in the inference service's queue while it runs (``InferenceService.hold``), after
the running ones have ended, and the pipeline's drafter and K chooser, which the sweep swaps, are
put back before they start. Cancel ends the run after the configuration under way and keeps what was
measured; a new deployment or unloading the model ends it at once (its pipeline is going away). The
JSON, the markdown and the PNG go to a folder of the app's data folder (``bench/``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from fleetgui import paths
from fleetgui.app.dashboard.bench_record import (
    DELAY,
    BenchSettings,
    configurations,
    draft_labels,
    model_text,
    run_info,
    sweep_plan,
    write_outputs,
)
from fleetgui.app.deploy.controller import DeploymentController
from fleetgui.app.deploy.jobs import JobState
from fleetgui.app.errors import user_message
from fleetgui.app.inference import InferenceService, PipelineState
from fleetgui.app.tasks import spawn
from fleetgui.bench.configurations import Configuration
from fleetgui.bench.progress import Progress, clock
from fleetgui.bench.report import RunInfo
from fleetgui.bench.results import Results
from fleetgui.runtime.draft_source import NGRAM
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.stream_limit import StreamLimit

if TYPE_CHECKING:
    from fleetgui.app.dashboard.api_service import ApiService
    from fleetgui.bench.sweep import Sweep
    from fleetgui.fleet.session.session import FleetSession
    from fleetgui.runtime.speculative import Drafter

log = logging.getLogger(__name__)

WAITING = "waiting for the chat's replies to end"


@dataclass(frozen=True)
class BenchStep:
    """Where a run is: ``done`` of ``total`` configurations, the one under way (``what``,
    "" once it ended, with its ``figure``) and the time so far."""

    done: int
    total: int
    what: str
    elapsed_s: float
    figure: str = ""

    @property
    def left(self) -> int:
        return self.total - self.done

    def text(self) -> str:
        now = self.what or f"measured: {self.figure}"
        counts = f"{self.done} of {self.total} done, {self.left} left"
        return f"{now} · {counts} · {clock(self.elapsed_s)}"


class _StepProgress(Progress):
    """The sweep's progress as :class:`BenchStep`s (and the log's lines)."""

    def __init__(self, total: int, emit: Callable[[BenchStep], None]) -> None:
        super().__init__(total, write=lambda line: log.info("bench: %s", line))
        self._emit = emit

    def step(self, what: str) -> None:
        super().step(what)
        self._emit(BenchStep(self.done, self.total, what, time.monotonic() - self.started))

    def finished(self, figure: str) -> None:
        super().finished(figure)
        elapsed = time.monotonic() - self.started
        self._emit(BenchStep(self.done, self.total, "", elapsed, figure))


class FleetBench(QObject):
    """Runs the benchmark on the served pipeline (see module doc)."""

    availability_changed = Signal(str)  # "" when a run can start, else why not
    running_changed = Signal(bool)
    progress = Signal(object)  # BenchStep
    finished = Signal(object)  # BenchReport: also after Cancel, with what was measured
    stopped = Signal(str)  # ended with nothing measured: why
    failed = Signal(str)  # message with the fix

    def __init__(
        self,
        inference: InferenceService,
        deployment: DeploymentController,
        api: ApiService | None = None,
        out_root: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.inference = inference
        self.deployment = deployment
        self.api = api
        self.out_root = out_root or paths.data_dir() / "bench"
        self._task: asyncio.Task[None] | None = None
        self._active = False  # from start until the run's task has tidied up
        self._sweep: Sweep | None = None
        inference.state_changed.connect(self._on_pipeline_state)
        deployment.state_changed.connect(self._on_deployment_state)
        if api is not None:
            api.state_changed.connect(self._announce)

    @property
    def running(self) -> bool:
        return self._active

    def why_not(self) -> str:
        """Why a run cannot start now ("" when it can)."""
        if self.running:
            return "a benchmark is running: wait for it or press Cancel"
        pipeline = self.inference.pipeline
        if pipeline is None:
            return "deploy a model first: the benchmark measures the deployed one"
        if not isinstance(pipeline, Pipeline):
            return (
                "the benchmark measures one pipeline; whole copies (replicas) are deployed: "
                "deploy without them to benchmark the fleet"
            )
        if self.deployment.state is not JobState.IDLE:
            return f"wait for the deployment ({self.deployment.state.value}) to end"
        if self.api is not None and self.api.state.serving:
            return (
                "switch the OpenAI-compatible API off first: its requests would run beside "
                "the benchmark's"
            )
        return ""

    def start(self, settings: BenchSettings) -> bool:
        """Start a run; False (and ``failed``) when one cannot start now."""
        why = self.why_not()
        if why:
            self.failed.emit(why)
            return False
        self._set_running(True)
        self._task = spawn(self._run(settings), "benchmark this fleet")
        return True

    def cancel(self) -> None:
        """Stop after the configuration under way; what was measured is written and shown."""
        if self._sweep is not None:
            self._sweep.request_stop()
            log.info("benchmark: stopping after the configuration under way")
        elif self._task is not None and not self._task.done():
            self._task.cancel()  # nothing measured yet: nothing to keep

    async def wait(self) -> None:
        """Until the run (if any) has ended."""
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task])

    # -- the run ------------------------------------------------------------------------------

    async def _run(self, settings: BenchSettings) -> None:
        pipeline = self.inference.pipeline
        assert isinstance(pipeline, Pipeline)
        drafters, created = self._drafters(pipeline)
        started = time.monotonic()
        try:
            chosen = configurations(list(drafters), settings)
            results = Results(chosen, [DELAY], settings.repeats)
            self.progress.emit(BenchStep(0, 0, WAITING, 0.0))
            await self.inference.hold()
            try:
                # the replies wait on the deployed pipeline's limit, held; the sweep runs its
                # streams through a twin with no limit of its own
                error, interrupted, info = await self._sweep_held(
                    pipeline.with_streams(StreamLimit()), drafters, chosen, settings, results
                )
            finally:
                await self.inference.release()
            info.duration_s = round(time.monotonic() - started, 1)
            info.interrupted = interrupted or error is not None
            if error is not None:
                info.notes.append(f"stopped by an error: {error}")
            await self._report(info, results, error)
        except asyncio.CancelledError:
            self.stopped.emit("benchmark cancelled: nothing was kept")
            raise
        except Exception as exc:  # before the sweep (its prompts, the machine's record)
            self.failed.emit(f"the benchmark did not start: {user_message(exc)}")
        finally:
            for drafter in created:
                await drafter.close()
            self._sweep = None
            self._set_running(False)

    async def _sweep_held(
        self,
        pipeline: Pipeline,
        drafters: dict[str, Drafter],
        chosen: list[Configuration],
        settings: BenchSettings,
        results: Results,
    ) -> tuple[str | None, bool, RunInfo]:
        """The sweep, with the replies held back; puts the pipeline's drafter and K chooser
        back however it ends. Returns the error's message (None), whether it was stopped
        early, and the run's record."""
        from fleetgui.bench.sweep import Sweep

        saved = pipeline.draft, pipeline.new_auto_k
        session = self._session()
        description = self.inference.description
        export_dir = Path(pipeline.tokenizer.folder).parent
        labels = list(drafters)
        try:
            plan = await asyncio.to_thread(sweep_plan, pipeline.tokenizer, chosen, settings)
            model = await asyncio.to_thread(model_text, export_dir, description)
            info = await asyncio.to_thread(run_info, model, session, settings, labels)
            progress = _StepProgress(plan.steps(), self.progress.emit)
            self._sweep = sweep = Sweep(
                plan,
                session=session,
                pipeline=pipeline,
                drafters=drafters,
                set_delay=None,
                baseline=None,
                progress=progress,
            )
            try:
                await sweep.warm_up()
                await sweep.run(results)
            except Exception as exc:  # what ran before the failure is still worth keeping
                log.warning("benchmark stopped by an error: %s", exc)
                return user_message(exc), sweep.stopping, info
            return None, sweep.stopping, info
        finally:
            pipeline.draft, pipeline.new_auto_k = saved

    async def _report(self, info: RunInfo, results: Results, error: str | None) -> None:
        if not results.cells:
            if error is not None:
                self.failed.emit(f"the benchmark failed: {error}")
            else:
                self.stopped.emit("benchmark stopped before any configuration was measured")
            return
        try:
            report = await asyncio.to_thread(write_outputs, self.out_root, info, results)
        except Exception as exc:
            self.failed.emit(f"the benchmark's files could not be written: {user_message(exc)}")
            return
        self.finished.emit(report)
        if error is not None:
            self.failed.emit(f"the benchmark stopped: {error}; what ran before it is shown")

    def _drafters(self, pipeline: Pipeline) -> tuple[dict[str, Drafter], list[Drafter]]:
        """The drafters by label (see
        :func:`~fleetgui.app.dashboard.bench_record.draft_labels`), and those made for the run
        (closed after it)."""
        from fleetgui.runtime.ngram_draft import NgramDraft

        deployed = pipeline.draft
        request = self.deployment.deployed_request
        is_model = deployed is not None and not isinstance(deployed, NgramDraft)
        labels = draft_labels(is_model, None if request is None else request.draft_dir)
        drafters: dict[str, Drafter] = {}
        created: list[Drafter] = []
        for label in labels:
            # the deployed drafter for its own label (a model's, or n-gram's when it is one)
            if deployed is not None and (label != NGRAM or isinstance(deployed, NgramDraft)):
                drafters[label] = deployed
            else:
                drafters[label] = NgramDraft()
                created.append(drafters[label])
        return drafters, created

    def _session(self) -> FleetSession | None:
        """The fleet session serving the pipeline; None when it runs on this PC alone."""
        from fleetgui.fleet.session.session import FleetSession

        session = getattr(self.deployment.deployer, "session", None)
        return session if isinstance(session, FleetSession) else None

    # -- following the app --------------------------------------------------------------------

    def _on_pipeline_state(self, state: PipelineState) -> None:
        if state is PipelineState.CLOSING:
            self._stop_now("the model is unloading")
        self._announce()

    def _on_deployment_state(self, state: JobState) -> None:
        # a new deployment first ends the fleet session the benchmark is measuring
        if state is JobState.DEPLOYING:
            self._stop_now("a new deployment started")
        self._announce()

    def _stop_now(self, why: str) -> None:
        """End the run at once, measuring nothing more (its pipeline is going away)."""
        if self._task is not None and not self._task.done():
            log.info("benchmark: %s; stopping now", why)
            self._task.cancel()

    def _set_running(self, running: bool) -> None:
        self._active = running
        self.running_changed.emit(running)
        self._announce()

    def _announce(self, *_: object) -> None:
        self.availability_changed.emit(self.why_not())
