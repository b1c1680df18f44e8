"""Replicas of the model (a whole copy per worker, or pipelines over groups of workers),
deployed from the app and shown in it.

:func:`deploy_replicas` deploys the groups the plan preview chose
(:func:`~fleetgui.app.plan_preview.groups_to_deploy`) with
:func:`~fleetgui.fleet.replicas.open_copies`: a ``FleetSession`` per replica, this PC runs no
stage, and a lost replica's streams are replayed on another. The fleet view's code expects one
session; :class:`ReplicaSessions` answers for all of them, each worker's status from the session
that holds it. :func:`replica_text` is the dashboard's "which replica serves how many streams".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fleetgui.app.deploy.interfaces import DeployRequest, DeployStep, ProgressCallback
from fleetgui.app.plan_preview import export_stages
from fleetgui.errors import FleetguiError

if TYPE_CHECKING:  # the fleet's modules load when a fleet deploys, not with the dashboard
    from fleetgui.fleet.coordinator import FleetSession
    from fleetgui.fleet.link import WorkerLink
    from fleetgui.fleet.replicas import ReplicatedPipeline
    from fleetgui.fleet.session_config import (
        CoordinatorConfig,
        FleetEvent,
        WorkerEndpoint,
        WorkerLinkStatus,
    )
    from fleetgui.net.keys import KeyPair

log = logging.getLogger(__name__)

UNLOAD_TIMEOUT_S = 10.0


class ReplicaSessions:
    """The sessions of several copies, as the fleet controller reads one ``FleetSession``:
    ``links`` and ``worker_status``."""

    def __init__(self, sessions: Sequence[FleetSession]) -> None:
        self.sessions = list(sessions)

    @property
    def links(self) -> dict[str, WorkerLink]:
        return {name: link for s in self.sessions for name, link in s.links.items()}

    def worker_status(self, name: str) -> WorkerLinkStatus:
        for session in self.sessions:
            if name in session.links:
                return session.worker_status(name)
        raise KeyError(name)


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


async def unload(endpoints: Sequence[WorkerEndpoint], identity: KeyPair) -> None:
    """Tell ``endpoints`` to drop what they loaded (after a deployment that did not finish:
    ``open_copies`` closes its sessions without unloading)."""
    from fleetgui.fleet.coordinator import FleetSession

    session = FleetSession(identity)
    try:
        await session.connect(endpoints)
    except Exception as exc:
        log.warning("cannot reach the copies' workers to unload them: %s", exc)
    await session.close(unload=True, timeout_s=UNLOAD_TIMEOUT_S)


async def deploy_replicas(
    request: DeployRequest,
    usable: Sequence[WorkerEndpoint],
    identity: KeyPair,
    config: CoordinatorConfig,
    *,
    progress: ProgressCallback,
    on_event: FleetEvent,
) -> ReplicatedPipeline:
    """``request.export_dir`` on each group of ``request.groups`` (a whole copy on a group of
    one); their session events go to ``on_event`` from then on. A failed or cancelled
    deployment leaves every one of those workers unloaded."""
    from fleetgui.fleet.replicas import open_copies
    from fleetgui.fleet.session_config import LinkState

    groups = [pick_endpoints(usable, names) for names in request.groups]
    endpoints = [endpoint for group in groups for endpoint in group]
    for group in groups:
        what = "loading a whole copy" if len(group) == 1 else f"loading a {len(group)}-PC pipeline"
        for endpoint in group:
            progress(DeployStep(endpoint.name, what, 0, 1))
    try:
        pipeline = await open_copies(
            request.export_dir, groups, identity, config, draft_dir=request.draft_dir
        )
    except BaseException:
        await asyncio.shield(unload(endpoints, identity))
        raise
    stages = export_stages(request.export_dir)
    for replica in pipeline.replicas:
        # open_copies' sessions report to nobody: from now on they report to the fleet view
        replica.session.on_event = on_event
        assert replica.session.assignment is not None  # deployed by open_copies
        members = replica.session.assignment.members
        for member in members:
            start, end = stages[member.indices[0]].start_layer, stages[member.indices[-1]].end_layer
            role = "a whole copy" if len(members) == 1 else f"replica {replica.name}"
            on_event(member.name, LinkState.BUSY, f"{role} (layers {start}-{end - 1})")
            progress(DeployStep(member.name, "ready", 1, 1))
    return pipeline


async def close_replicas(pipeline: ReplicatedPipeline) -> None:
    """End the replicas: every worker drops its stages, every session closes."""
    for replica in pipeline.replicas:
        with contextlib.suppress(Exception):
            await replica.session.close(unload=True, timeout_s=UNLOAD_TIMEOUT_S)


def replica_text(pipeline: object) -> str:
    """The dashboard's line on which replica serves how many streams now, e.g.
    ``"Replicas: w1 1 stream · w2 lost"``; "" for anything but replicas."""
    replicas = sys.modules.get("fleetgui.fleet.replicas")  # not loaded: no replica deployed
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
