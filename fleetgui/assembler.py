"""The one assembler: :func:`open` and :func:`aopen` turn a model and a list of workers into an
:class:`~fleetgui.llm_pipeline.LLMPipeline`.

Every front end assembles through it: Python's ``fleetgui.open``, ``fleetgui generate`` and
``serve``, the app's Deploy, ``fleetgui demo`` and ``fleetgui bench``. What differs between them
is said with options, not with assemblers of their own: the fleet's configuration
(``coordinator``) and :class:`OpenHooks` for what a caller wants to see or decide on the way
(deployment progress, worker events, the session as it is made, and where the stages go).

Without workers every stage runs in this process. With workers, one
:class:`~fleetgui.fleet.session.session.FleetSession` runs the export as a pipeline (this PC's
stages first, then the workers in ring order), or, for a :class:`Placement` with replicas, one
session per group of workers serves a replica each (this PC runs none). A failed or cancelled
opening leaves nothing loaded: every session it made unloads its workers and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.llm_pipeline import UNLOAD_TIMEOUT_S, LLMPipeline
from fleetgui.loop_thread import LoopThread

if TYPE_CHECKING:
    from fleetgui.fleet.placement.assignment import Assignment
    from fleetgui.fleet.replanning.live_replanner import PlanContext
    from fleetgui.fleet.ring.link import WorkerEndpoint
    from fleetgui.fleet.ring.shard_push import ProgressCallback
    from fleetgui.fleet.session.config import CoordinatorConfig, FleetEvent
    from fleetgui.fleet.session.session import FleetSession
    from fleetgui.net.keys import KeyPair
    from fleetgui.runtime.draft_source import DraftSource
    from fleetgui.runtime.generation import Runtime

__all__ = ["GenerationConfig", "LLMPipeline", "OpenHooks", "OpenOptions", "Placement", "aopen"]
__all__ += ["open"]

log = logging.getLogger(__name__)

#: How the workers serve the model: one pipeline over this PC and the workers, or a replica on
#: each worker (``copies`` is the same: a whole copy per worker). A plan hook decides otherwise.
Layout = Literal["pipeline", "replicas", "copies"]
LAYOUTS = ("pipeline", "replicas", "copies")


@dataclass(frozen=True)
class Placement:
    """Where an export's stages run on the workers: a plan hook's answer."""

    # worker names of each replica (a group of one holds a whole copy); (): one pipeline
    replicas: tuple[tuple[str, ...], ...] = ()
    assignment: Assignment | None = None  # the pipeline's layout; None: here first, then in order
    order: tuple[str, ...] = ()  # the workers' ring order; (): as given
    replan: PlanContext | None = None  # what the plan was made of: re-plan while serving


#: Decides where the stages go, given the export and the workers (resolved, in order given).
Planner = Callable[[Path, Sequence["WorkerEndpoint"]], Awaitable[Placement]]


@dataclass(frozen=True)
class OpenHooks:
    """What a caller of :func:`aopen` sees and decides on the way (each may be None)."""

    progress: ProgressCallback | None = None  # files sent, loading, ready: per worker
    plan: Planner | None = None  # where the stages go (default: from ``layout``)
    on_event: FleetEvent | None = None  # a worker's state in a session changed
    on_session: Callable[[FleetSession], None] | None = None  # a session made, not yet connected


class OpenOptions(TypedDict, total=False):
    """The options of :func:`open` and :func:`aopen` (see :func:`open` for each)."""

    workers: Sequence[str | WorkerEndpoint] | str
    draft: str | Path | None
    layout: Layout
    max_streams: int
    weights: str
    identity: str | Path | KeyPair | None
    threads: int
    precision: str
    local_failover: bool
    context: int | None
    kv_reuse: bool
    kv_budget: int | None
    batching: bool
    coordinator: CoordinatorConfig
    hooks: OpenHooks


@dataclass
class _Opened:
    runtime: Runtime
    sessions: tuple[FleetSession, ...]
    max_streams: int


def open(source: str | Path, **options: Unpack[OpenOptions]) -> LLMPipeline:
    """Open a model for generating, on this PC or on a fleet.

    ``source``: an export folder (``fleetgui export``), or a model to export first into the
    shard cache (a GGUF file, a HuggingFace folder or hub id; reused on the next open).

    ``workers``: ``["HOST:PORT", ...]`` (or one comma-separated string) of paired workers
    (``fleetgui worker --pair``), or workers already resolved (``WorkerEndpoint``). None: every
    stage runs here. ``layout``: ``"pipeline"`` (default: this PC runs the first stage and each
    worker the next one, in order), or ``"replicas"`` / ``"copies"`` (a whole copy on each
    worker; each generation runs on the least busy copy).

    ``draft``: a draft model's export, or ``"ngram"`` to draft from the text itself; then
    ``GenerationConfig(k=...)`` decodes speculatively. ``max_streams`` (4): generations run at
    once (interleaved across the stages); more wait. ``weights`` ("int4"): the format a model
    is exported with (int4, int8, fp16, fp32). ``identity``: a coordinator key folder or key
    pair (default: the one in the OS keyring). ``threads``/``precision`` (0/"auto"):
    OpenVINO settings of every stage. ``local_failover`` (True): when workers are lost and
    those left cannot take their stages, run the stages on this PC (else the generation ends
    with an error). ``context``: the most tokens a prompt and its answer may hold (default:
    the model's, up to 4,096). ``kv_reuse`` (True): a finished answer's KV stays on the stages,
    and a request that continues the conversation (or shares a long prefix with it) prefills
    only what is new. ``kv_budget``: the bytes of KV idle conversations may keep on each PC
    holding stages (default: half of its free memory); the least recently used go first.
    ``batching`` (True): several streams share each stage's pass where the model allows;
    False: one stream a pass, streams interleaved across the stages.
    ``coordinator``: the whole fleet configuration instead of threads, precision and
    local_failover (``CoordinatorConfig``); ``context``, ``kv_reuse`` and ``kv_budget`` still
    apply. ``hooks``: :class:`OpenHooks`.

    Example::

        import fleetgui

        with fleetgui.open("shards/llama8b", workers=["192.168.1.20:5555"]) as llm:
            print(llm.chat([{"role": "user", "content": "Why is the sky blue?"}]))
            for text in llm.stream("def quicksort(items):", max_new_tokens=64):
                print(text, end="", flush=True)
    """
    thread = LoopThread()
    try:
        opened = thread.run(_assemble(source, options))
    except BaseException:
        thread.stop()
        raise
    return LLMPipeline(opened.runtime, opened.sessions, opened.max_streams, thread=thread)


async def aopen(source: str | Path, **options: Unpack[OpenOptions]) -> LLMPipeline:
    """:func:`open` for callers with an event loop of their own (the pipeline then runs on it:
    use its async methods)."""
    opened = await _assemble(source, options)
    return LLMPipeline(opened.runtime, opened.sessions, opened.max_streams)


async def _assemble(source: str | Path, options: OpenOptions) -> _Opened:
    from fleetgui.runtime.draft_source import parse_draft
    from fleetgui.runtime.loader import load_local_pipeline

    max_streams = options.get("max_streams", 4)
    if max_streams < 1:
        raise FleetguiError(f"max_streams must be at least 1, got {max_streams}")
    layout = options.get("layout", "pipeline")
    if layout not in LAYOUTS:
        raise FleetguiError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    workers = _worker_list(options.get("workers", ()))
    if layout != "pipeline" and not workers:
        raise FleetguiError(f"layout={layout!r} puts a copy on each worker: give workers=[...]")
    whole = layout in ("replicas", "copies")
    stages = 1 if whole else 1 + len(workers)
    export = await asyncio.to_thread(
        _export_of, Path(source), stages, options.get("weights", "int4")
    )
    draft = options.get("draft")
    # a str is parsed ("ngram" or a folder); a Path is a folder, even one called ngram
    draft_source = parse_draft(draft) if isinstance(draft, str) else draft
    config = _coordinator_config(options)
    if not workers:
        runtime = await asyncio.to_thread(
            load_local_pipeline, export, draft_dir=draft_source, config=config.local
        )
        return _Opened(runtime, (), max_streams)
    hooks = options.get("hooks") or OpenHooks()
    identity = _identity(options.get("identity"))
    endpoints = await _resolve(workers)
    if hooks.plan is not None:
        placement = await hooks.plan(export, endpoints)
    elif whole:
        placement = Placement(replicas=tuple((e.name,) for e in endpoints))
    else:
        placement = Placement()
    fleet = _FleetOpening(export, identity, config, draft_source, hooks)
    if placement.replicas:
        return await fleet.replicas(endpoints, placement.replicas, max_streams)
    return await fleet.pipeline(endpoints, placement, max_streams)


class _FleetOpening:
    """One opening's sessions: made with the same identity, configuration and hooks, and all
    unloaded and closed if the opening fails."""

    def __init__(
        self,
        export: Path,
        identity: KeyPair,
        config: CoordinatorConfig,
        draft: DraftSource | None,
        hooks: OpenHooks,
    ) -> None:
        self.export = export
        self.identity = identity
        self.config = config
        self.draft = draft
        self.hooks = hooks
        self.sessions: list[FleetSession] = []

    def _session(self, config: CoordinatorConfig) -> FleetSession:
        from fleetgui.fleet.session.session import FleetSession

        session = FleetSession(self.identity, config, on_event=self.hooks.on_event)
        self.sessions.append(session)
        if self.hooks.on_session is not None:
            self.hooks.on_session(session)
        return session

    async def pipeline(
        self, endpoints: Sequence[WorkerEndpoint], placement: Placement, max_streams: int
    ) -> _Opened:
        """One session: this PC's stages, then the workers in ring order (the rest spares)."""
        try:
            session = self._session(self.config)
            await session.connect(endpoints)
            await session.deploy(
                self.export,
                order=list(placement.order) or None,
                assignment=placement.assignment,
                progress=self.hooks.progress,
            )
            runtime = await session.open_pipeline(draft_dir=self.draft)
            if placement.replan is not None:
                session.replan_with(placement.replan)
        except BaseException:
            await asyncio.shield(self.discard())
            raise
        return _Opened(runtime, (session,), max_streams)

    async def replicas(
        self,
        endpoints: Sequence[WorkerEndpoint],
        groups: Sequence[Sequence[str]],
        max_streams: int,
    ) -> _Opened:
        """A session per group of workers, each running every stage (a group of one holds a
        whole copy, a larger one a pipeline over its workers in order); this PC runs none."""
        from fleetgui.fleet.session.replicas import Replica, ReplicatedPipeline

        # this PC runs no stage and takes no lost group's stages over: another replica takes
        # its streams instead
        config = replace(self.config, local_stages=0, local_failover=False)
        by_name = {e.name: e for e in endpoints}
        replicas: list[Replica] = []
        try:
            for group in groups:
                session = self._session(config)
                await session.connect([_endpoint(by_name, name) for name in group])
                await session.deploy(self.export, order=list(group), progress=self.hooks.progress)
                pipeline = await session.open_pipeline(draft_dir=self.draft)
                replicas.append(Replica("+".join(group), session, pipeline))
        except BaseException:
            await asyncio.shield(self.discard())
            raise
        log.info("serving %s on %d replicas: %s", self.export, len(replicas), list(groups))
        return _Opened(ReplicatedPipeline(replicas), tuple(self.sessions), max_streams)

    async def discard(self) -> None:
        """Unload what the sessions loaded and close them (a failed or cancelled opening)."""
        for session in self.sessions:
            with contextlib.suppress(Exception):
                await session.close(unload=True, timeout_s=UNLOAD_TIMEOUT_S)


def _worker_list(workers: Sequence[str | WorkerEndpoint] | str) -> list[str | WorkerEndpoint]:
    """Addresses (stripped, empty ones left out) and endpoints, in the order given."""
    items = workers.split(",") if isinstance(workers, str) else list(workers)
    listed = [w.strip() if isinstance(w, str) else w for w in items]
    return [w for w in listed if w != ""]


async def _resolve(workers: Sequence[str | WorkerEndpoint]) -> list[WorkerEndpoint]:
    """Each worker's endpoint, in order: addresses are probed and their keys pinned (or
    checked), endpoints taken as they are."""
    from fleetgui.fleet.pairing.worker_addresses import parse_worker_list, resolve_workers

    addresses = [w for w in workers if isinstance(w, str)]
    found = await resolve_workers(parse_worker_list(",".join(addresses))) if addresses else []
    resolved = iter(found)
    return [next(resolved) if isinstance(w, str) else w for w in workers]


def _endpoint(by_name: dict[str, WorkerEndpoint], name: str) -> WorkerEndpoint:
    if name not in by_name:
        raise FleetguiError(
            f"the placement puts a replica on {name}, which is not among the workers given "
            f"({', '.join(by_name)}): plan again"
        )
    return by_name[name]


def _coordinator_config(options: OpenOptions) -> CoordinatorConfig:
    """``coordinator`` as given, else the fleet's defaults with the stages' threads, precision
    and whether this PC may take lost workers' stages."""
    from fleetgui.fleet.session.config import CoordinatorConfig
    from fleetgui.runtime.loader import LocalPipelineConfig, with_context
    from fleetgui.runtime.ov_stage import StageConfig

    config = options.get("coordinator")
    if config is None:
        threads, precision = options.get("threads", 0), options.get("precision", "auto")
        stage = StageConfig(threads=threads, precision=precision)
        config = CoordinatorConfig(
            local=LocalPipelineConfig(stage=stage, draft_stage=stage),
            worker_threads=threads,
            worker_precision=precision,
            local_failover=options.get("local_failover", True),
        )
    local = with_context(
        config.local,
        context=options.get("context"),
        kv_reuse=options.get("kv_reuse"),
        kv_budget=options.get("kv_budget"),
        batching=options.get("batching"),
    )
    return replace(config, local=local)


def _identity(identity: str | Path | KeyPair | None) -> KeyPair:
    from fleetgui.net.keys import KeyPair, coordinator_identity, load_identity

    if isinstance(identity, KeyPair):
        return identity
    return load_identity(Path(identity)) if identity else coordinator_identity()


def _export_of(source: Path, stages: int, weights: str) -> Path:
    """``source`` itself if it is an export, else ``source`` exported into the shard cache in
    ``stages`` stages (reused while complete and current)."""
    if (source / "manifest.json").is_file():
        return source
    from fleetgui.export.exporter import ExportRequest, export_model
    from fleetgui.paths import shards_cache_dir

    out = shards_cache_dir() / f"{source.stem}-{stages}stages-{weights}"
    log.info("exporting %s into %s", source, out)
    export_model(ExportRequest(source, out, stages=stages, weights=weights))
    return out
