"""The plan the deployment view previews, and what a deployment then deploys exactly.

For an existing export the stages are fixed: the preview is the best placement of its whole
stages (:func:`fleetgui.planner.plan_fixed_stages`), and the fleet deployer turns that plan into
the fleet's assignment (:func:`plan_assignment`). A HuggingFace model is planned layer by layer
(:func:`fleetgui.planner.solve`) and then exported with the plan's ``--layers``, one stage per
device, so its stages match the plan.

Beside that plan the preview shows the :class:`~fleetgui.planner.layout.Layout` that
:func:`~fleetgui.planner.plan_layout` chooses for the replies generating at once
(:func:`preview_layout`). The app serves several groups as independent replicas on workers
(:func:`fleetgui.fleet.session.replicas.open_replicas`: a group of one worker holds a whole copy, a
larger one a pipeline; this PC runs no stage), so the layout is planned for workers only, and Deploy
deploys the groups when :func:`groups_to_deploy` says they beat the plan.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgui.export.manifest import read_manifest
from fleetgui.fleet.placement.assignment import Assignment, assignment_from_plan
from fleetgui.planner import (
    DeviceProfile,
    Layout,
    ModelProfile,
    NoPlanFitsError,
    Plan,
    PlanConfig,
    load_model_profile,
    plan_fixed_stages,
    plan_layout,
    solve,
)
from fleetgui.shard import Shard

if TYPE_CHECKING:
    from fleetgui.fleet.ring.link import WorkerEndpoint
    from fleetgui.net.keys import KeyPair
    from fleetgui.runtime.ov_stage import StageConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreviewRequest:
    """What to plan for."""

    model_dir: Path  # an export (manifest.json) or a HuggingFace model folder
    devices: tuple[DeviceProfile, ...]  # this PC first, then the usable workers
    config: PlanConfig
    streams: int = 1  # sequences decoded at once
    weights: str = "int4"  # weight format a HuggingFace model will be exported with
    previous: Plan | None = None  # a plan whose ring order to keep (e.g. the one exported)
    context: int | None = None  # tokens of KV per stream (None: the model's, at most 4,096)


def export_stages(export_dir: Path) -> list[Shard]:
    """The shard of each of the export's stages (a monolithic export is one stage)."""
    manifest = read_manifest(export_dir)
    if manifest.layout != "stages":
        return [Shard(manifest.model_id, 0, manifest.n_layers, manifest.n_layers)]
    return manifest.shards


def in_plan_order(devices: Sequence[DeviceProfile], plan: Plan | None) -> list[DeviceProfile]:
    """``devices`` with the coordinator first, then ``plan``'s devices in its ring order, then
    the others in the order given."""
    if plan is None or not devices:
        return list(devices)
    rank = {name: index for index, name in enumerate(plan.devices)}
    first, rest = devices[0], devices[1:]
    planned = sorted((d for d in rest if d.name in rank), key=lambda d: rank[d.name])
    return [first, *planned, *(d for d in rest if d.name not in rank)]


def preview_plan(request: PreviewRequest) -> Plan:
    """The plan for ``request`` (reads the model's files; run it in an executor)."""
    folder = request.model_dir
    devices = in_plan_order(request.devices, request.previous)
    profile = _profile(request, request.streams)
    if (folder / "manifest.json").is_file():
        return plan_fixed_stages(devices, profile, export_stages(folder), request.config)
    return solve(devices, profile, request.config)


def _profile(request: PreviewRequest, streams: int) -> ModelProfile:
    """The model at the weights it has (an export) or will get (a HuggingFace model), for
    ``request``'s context and ``streams``."""
    folder = request.model_dir
    is_export = (folder / "manifest.json").is_file()
    return load_model_profile(
        folder,
        weight_format=None if is_export else request.weights,
        context_length=request.context,
        streams=streams,
    )


def context_text(request: PreviewRequest, plan: Plan) -> str:
    """What the preview says the context costs: the KV cache of ``plan``'s streams at its
    context, and per 1,000 tokens (what a longer context, or a conversation kept between turns,
    adds)."""
    profile = _profile(request, plan.streams)
    per_token = profile.kv_bytes_per_token_per_layer * profile.n_layers
    whole = per_token * plan.context_length * plan.streams
    most = ", ".join(f"{s.device} {s.max_streams}" for s in plan.stages)
    return (
        f"Context: {plan.context_length:,} tokens a stream. Its KV cache takes "
        f"{whole / 1e9:.2f} GB across the PCs for {plan.streams} stream(s), "
        f"{_megabytes(per_token * 1000)} per 1,000 tokens; conversations kept between turns "
        "take the same per token, up to each PC's budget. Users in one pass: each PC holds "
        f"the KV of up to ({most}) streams at this context, so up to {plan.max_streams} share "
        "a pass."
    )


def _megabytes(size: float) -> str:
    mb = size / 1e6
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"


def preview_layout(request: PreviewRequest) -> Layout | None:
    """The layout for ``request.streams`` users on the workers of ``request.devices`` (the
    coordinator only routes tokens), or None when there is no worker or no layout fits."""
    if len(request.devices) < 2:
        return None
    folder = request.model_dir
    profile = _profile(request, 1)
    try:
        return plan_layout(
            request.devices,
            profile,
            request.config,
            users=request.streams,
            coordinator_runs_stages=False,
        )
    except NoPlanFitsError as exc:
        log.info("no layout of the workers fits %s: %s", folder.name, exc)
        return None


def plan_holds(
    plan: Plan, layout: Layout | None, devices: Sequence[str], *, objective: str, streams: int
) -> bool:
    """Whether ``plan`` (and the replicas of ``layout``, previewed with it) still fits the PCs
    usable now (``devices``, this PC first): the same objective and streams, and every PC it
    uses still usable (this PC still first). Deploy plans again when it does not."""
    replicas = layout.devices if layout is not None else ()
    holds = (
        plan.objective == objective
        and plan.streams == streams
        and bool(devices)
        and plan.devices[0] == devices[0]
        and set(plan.devices) | set(replicas) <= set(devices)
    )
    if not holds:
        log.info("the previewed plan no longer holds; planning again")
    return holds


Groups = tuple[tuple[str, ...], ...]  # workers per replica, each group in its ring order


def groups_to_deploy(plan: Plan | None, layout: Layout | None) -> Groups:
    """The groups of workers Deploy runs as independent replicas (one worker: a whole copy;
    several: a pipeline over them), or () to deploy ``plan`` as one pipeline: replicas when
    ``layout`` has at least two groups for at least two users, with more predicted tokens/s in
    all than ``plan`` for the same users (one user gains nothing from a replica)."""
    if layout is None or len(layout.groups) < 2 or layout.users < 2:
        return ()
    if plan is not None and plan.predicted_tokens_per_s >= layout.predicted_tokens_per_s:
        return ()
    return tuple(tuple(group.devices) for group in layout.groups)


def replicas_phrase(groups: Groups) -> str:
    """``"2 whole copies, on a, b"`` or ``"2 replicas: a+b | c+d"``."""
    if all(len(group) == 1 for group in groups):
        return f"{len(groups)} whole copies, on {', '.join(g[0] for g in groups)}"
    return f"{len(groups)} replicas: " + " | ".join("+".join(group) for group in groups)


def layout_text(plan: Plan | None, layout: Layout | None) -> str:
    """What the preview says about serving several users: the layout's table (its alternatives'
    tokens/s included) and what Deploy will do."""
    if layout is None:
        return ""
    lines = layout.table_lines()
    groups = groups_to_deploy(plan, layout)
    pipeline = (
        f" ({plan.predicted_tokens_per_s:.1f} tokens/s for {plan.streams} stream(s))"
        if plan is not None
        else ""
    )
    if groups:
        lines.append(
            f"Deploy runs {replicas_phrase(groups)}: "
            f"{layout.predicted_tokens_per_s:.1f} tokens/s in all, more than the pipeline above"
            f"{pipeline}."
        )
    else:
        lines.append(f"Deploy runs the pipeline above{pipeline}{_why_pipeline(layout)}.")
    return "\n".join(lines)


def _why_pipeline(layout: Layout) -> str:
    """Why Deploy runs the pipeline although the layout above it may predict more tokens/s (a
    layout's number left unexplained read as a broken promise: 40.3 predicted, 21.3 served)."""
    predicted = f"the layout's {layout.predicted_tokens_per_s:.1f} tokens/s"
    if layout.users < 2:
        return (
            f", not {predicted}: copies and replicas are deployed only to serve 2 or more "
            "streams at once (Streams in PP+MB or PP+SD+MB), and one stream runs on the pipeline"
        )
    if len(layout.groups) < 2:
        return (
            f", not {predicted}: that layout is a single group, and Deploy runs replicas only "
            "when there are 2 or more groups"
        )
    return f": it predicts as much as {predicted} or more"


def plan_assignment(
    plan: Plan, export_dir: Path, usable: Sequence[str], *, coordinator: str
) -> Assignment:
    """:func:`~fleetgui.fleet.placement.assignment.assignment_from_plan` for the export in
    ``export_dir``."""
    return assignment_from_plan(plan, export_stages(export_dir), usable, coordinator=coordinator)


def rows_of(assignment: Assignment, stages: Sequence[Shard], here: str) -> list[str]:
    """``"device start:end"`` per participant of ``assignment``, like
    :func:`~fleetgui.planner.fixed_stages.plan_rows`."""

    def text(name: str, indices: Sequence[int]) -> str:
        return f"{name} {stages[indices[0]].start_layer}:{stages[indices[-1]].end_layer}"

    rows = [text(here, assignment.local)] if assignment.local else []
    return rows + [text(m.name, m.indices) for m in assignment.members]


async def auto_layout(
    export: Path,
    endpoints: Sequence[WorkerEndpoint],
    identity: KeyPair,
    local_stage: StageConfig,
    users: int,
) -> tuple[str, Groups]:
    """What the app's preview would deploy for ``users`` at once, for a layout chosen without
    the app (``serve --layout auto``): this PC and the workers time a stage of ``export``, the
    planner plans the pipeline and the workers' layouts, and replicas win only when predicted
    faster. The preview's text (alternatives included) and the groups to deploy as replicas
    (``()``: one pipeline)."""
    from fleetgui.fleet.profiling.fleet_profiles import measured_fleet

    measured = await measured_fleet(export, endpoints, identity, local_stage)
    request = PreviewRequest(export, measured.profiles, PlanConfig(), users)
    plan = await asyncio.to_thread(preview_plan, request)
    layout = await asyncio.to_thread(preview_layout, request)
    return layout_text(plan, layout) or f"{plan}", groups_to_deploy(plan, layout)
