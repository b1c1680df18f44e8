"""Replicas of the model (a whole copy per worker, or pipelines over groups of workers) as the
app shows them.

The assembler deploys the groups the plan preview chose
(:func:`~fleetgui.fleet.placement.preview.groups_to_deploy`): a ``FleetSession`` per replica,
this PC runs no stage, and a lost replica's streams are replayed on another. Here: what the
deployment view and the fleet view say meanwhile (:func:`loading_steps`,
:func:`announce_replicas`); and :func:`replica_text`, the dashboard's "which replica serves how
many streams".
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgui.app.deploy.interfaces import DeployStep
from fleetgui.errors import FleetguiError
from fleetgui.fleet.placement.preview import export_stages

if TYPE_CHECKING:  # the fleet's modules load when a fleet deploys, not with the dashboard
    from fleetgui.fleet.ring.link import WorkerEndpoint
    from fleetgui.fleet.session.config import FleetEvent
    from fleetgui.fleet.session.replicas import ReplicatedPipeline

log = logging.getLogger(__name__)


def pick_endpoints(usable: Sequence[WorkerEndpoint], names: Sequence[str]) -> list[WorkerEndpoint]:
    """The endpoints of ``names``, in that order; raises naming a worker no longer usable."""
    by_name = {e.name: e for e in usable}
    gone = [n for n in names if n not in by_name]
    if gone:
        raise FleetguiError(
            f"the preview put a replica on {', '.join(gone)}, which cannot be used now: preview "
            "the plan again"
        )
    return [by_name[n] for n in names]


def loading_steps(groups: Sequence[Sequence[str]]) -> list[DeployStep]:
    """What each worker of a replica does while the replicas deploy."""
    steps = []
    for group in groups:
        what = "loading a whole copy" if len(group) == 1 else f"loading a {len(group)}-PC pipeline"
        steps += [DeployStep(name, what, 0, 1) for name in group]
    return steps


def announce_replicas(
    pipeline: ReplicatedPipeline, export_dir: Path, on_event: FleetEvent
) -> list[DeployStep]:
    """Tell the fleet view what each worker of the deployed replicas holds (a whole copy, or
    its part of a replica, with its layers); the progress steps that say they are ready."""
    from fleetgui.fleet.session.config import LinkState

    stages = export_stages(export_dir)
    ready = []
    for replica in pipeline.replicas:
        assignment = replica.session.deployment.assignment
        members = assignment.members if assignment is not None else ()
        for member in members:
            start, end = stages[member.indices[0]].start_layer, stages[member.indices[-1]].end_layer
            role = "a whole copy" if len(members) == 1 else f"replica {replica.name}"
            on_event(member.name, LinkState.BUSY, f"{role} (layers {start}-{end - 1})")
            ready.append(DeployStep(member.name, "ready", 1, 1))
    return ready


def replica_text(pipeline: object) -> str:
    """The dashboard's line on which replica serves how many streams now, e.g.
    ``"Replicas: w1 1 stream · w2 lost"``; "" for anything but replicas."""
    replicas = sys.modules.get("fleetgui.fleet.session.replicas")  # not loaded: no replica deployed
    if replicas is None:
        return ""
    kind: type[ReplicatedPipeline] = replicas.ReplicatedPipeline
    if not isinstance(pipeline, kind):
        return ""
    failed = {r.name for r in pipeline.replicas if r.failed}
    parts = [
        f"{name} lost" if name in failed else f"{name} {n} stream{'s' if n != 1 else ''}"
        for name, n in pipeline.streams_by_replica().items()
    ]
    return "Replicas: " + " · ".join(parts)
