"""Setting up a ring epoch: the coordinator's own stages compiled, and every member told its
place (RING), last member first so that each one's next is ready when it connects."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import openvino as ov

from fleetgui.export.manifest import Manifest
from fleetgui.fleet.ring.link import WorkerLink
from fleetgui.net.protocol import Message, Op
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.stage_factory import CompiledStage, compile_stage

log = logging.getLogger(__name__)


class CoordinatorStages:
    """The stages this PC runs, compiled once and kept while later layouts still use them."""

    def __init__(self, core: ov.Core) -> None:
        self.core = core
        self._stages: dict[int, CompiledStage] = {}

    def stages(self) -> tuple[CompiledStage, ...]:
        return tuple(self._stages[i] for i in sorted(self._stages))

    async def load(
        self, export_dir: Path, manifest: Manifest, indices: Sequence[int], config: StageConfig
    ) -> None:
        """Compile the stages in ``indices`` not compiled yet, in a thread (the event loop may
        be the GUI's), and forget the others."""
        for index in list(self._stages):
            if index not in indices:
                del self._stages[index]

        def compile_one(index: int) -> CompiledStage:
            entry = manifest.stages[index]
            return compile_stage(
                index,
                manifest.shard(index),
                [export_dir / part for part in entry.model_files],
                config,
                core=self.core,
            )

        for index in indices:
            if index not in self._stages:
                self._stages[index] = await asyncio.to_thread(compile_one, index)


async def link_members(members: Sequence[WorkerLink], epoch: int, *, hub: bool) -> None:
    """Tell each member its place in ring ``epoch``: the next member (none for the last, or in
    a hub) and the previous member's key, which may send it FORWARD."""
    for position in range(len(members) - 1, -1, -1):
        link = members[position]
        nxt = None
        if not hub and position + 1 < len(members):
            after = members[position + 1]
            nxt = {"endpoint": after.endpoint, "public_key": after.public_key, "name": after.name}
        peers = [members[position - 1].public_key] if position > 0 and not hub else []
        meta = {"epoch": epoch, "next": nxt, "peers": peers}
        await link.call(Message(Op.RING, meta=meta))
