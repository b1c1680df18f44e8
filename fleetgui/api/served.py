"""What the API serves: one model under one name, how it decodes, and how to count the streams
its stages hold (the ``/health`` answer, and what tests watch after a client leaves)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING

from fleetgui.generation_config import DraftTokens
from fleetgui.llm_pipeline import LLMPipeline
from fleetgui.runtime.generation import Runtime

if TYPE_CHECKING:
    from fleetgui.fleet.session.replicas import ReplicatedPipeline
    from fleetgui.fleet.session.session import FleetSession
    from fleetgui.runtime.chat_prompt import ChatPrompter
    from fleetgui.runtime.route import LocalRoute

#: Streams each part of the pipeline holds right now, by name ("coordinator", a worker's name).
StageStreams = Callable[[], Awaitable[dict[str, int]]]


@dataclass
class ServedModel:
    """The model the API generates with: ``source`` is the assembler's pipeline, or a runtime
    one (wrapped in an :class:`~fleetgui.llm_pipeline.LLMPipeline`, its stream limit as it is)."""

    source: InitVar[LLMPipeline | Runtime]
    name: str
    k: DraftTokens = "off"  # every request's GenerationConfig.k (the server's mode)
    stage_streams: StageStreams | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    llm: LLMPipeline = field(init=False)

    def __post_init__(self, source: LLMPipeline | Runtime) -> None:
        self.llm = source if isinstance(source, LLMPipeline) else LLMPipeline.over(source)

    @property
    def pipeline(self) -> Runtime:
        """The runtime pipeline underneath (its stages and metrics)."""
        return self.llm.runtime

    @property
    def prompter(self) -> ChatPrompter:
        """How chats are rendered for the model (``llm.prompter``)."""
        return self.llm.prompter


def local_stage_streams(route: LocalRoute) -> StageStreams:
    """Stream counts of an in-process pipeline's stages."""

    async def count() -> dict[str, int]:
        return {f"stage {i}": len(s.stream_ids()) for i, s in enumerate(route.stages)}

    return count


def fleet_stage_streams(session: FleetSession, timeout_s: float = 2.0) -> StageStreams:
    """Stream counts of the coordinator's stages and of each deployed worker, the latter asked
    afresh (a heartbeat) rather than taken from the last periodic one."""
    from fleetgui.net.protocol import Message, Op
    from fleetgui.runtime.stage import BlockingStage

    async def count() -> dict[str, int]:
        counts: dict[str, int] = {}
        ring = session.deployment.ring
        if ring is not None:
            local = [s for s in ring.local if isinstance(s, BlockingStage)]
            counts["coordinator"] = sum(len(s.stream_ids()) for s in local)
            for link in ring.members:
                if link.lost:
                    continue
                reply = await link.call(Message(Op.HEARTBEAT), timeout_s=timeout_s)
                counts[link.name] = int(reply.meta.get("streams", 0))
        return counts

    return count


def replica_streams(pipeline: ReplicatedPipeline) -> StageStreams:
    """Streams each replica of a replicated pipeline runs now, by replica name."""

    async def count() -> dict[str, int]:
        return pipeline.streams_by_replica()

    return count


def stage_streams(llm: LLMPipeline) -> StageStreams:
    """How to count the streams of what ``llm`` runs on: this PC's stages, a fleet session's
    coordinator and workers, or replicas."""
    from fleetgui.runtime.route import LocalRoute

    runtime = llm.runtime
    if llm.sessions:  # the fleet's modules are loaded: it runs on them
        from fleetgui.fleet.session.replicas import ReplicatedPipeline

        if isinstance(runtime, ReplicatedPipeline):
            return replica_streams(runtime)
        return fleet_stage_streams(llm.sessions[0])
    route = getattr(runtime, "route", None)
    if not isinstance(route, LocalRoute):
        raise TypeError(f"cannot count the stage streams of {type(runtime).__name__}")
    return local_stage_streams(route)
