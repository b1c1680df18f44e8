"""The Python front door: :func:`open` a model on this PC or a fleet and generate with it.

:func:`open` (and :func:`aopen`, for callers with an event loop of their own) returns an
:class:`~fleetgui.llm_pipeline.LLMPipeline`; one
:class:`~fleetgui.generation_config.GenerationConfig` says how to decode each answer. A caller
that deploys with progress and planning of its own wraps what it opened with
:meth:`LLMPipeline.over <fleetgui.llm_pipeline.LLMPipeline.over>`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.llm_pipeline import LLMPipeline, _LoopThread

__all__ = ["GenerationConfig", "LLMPipeline", "aopen", "open"]

log = logging.getLogger(__name__)

Layout = Literal["pipeline", "copies"]


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


async def aopen(
    source: str | Path,
    *,
    workers: Sequence[str] | str = (),
    draft: str | Path | None = None,
    layout: Layout = "pipeline",
    max_streams: int = 4,
    weights: str = "int4",
    identity: str | Path | None = None,
    threads: int = 0,
    precision: str = "auto",
    local_failover: bool = True,
) -> LLMPipeline:
    """:func:`open` for callers with an event loop of their own (the pipeline then runs on it:
    use its async methods)."""
    from fleetgui.runtime.draft_source import parse_draft
    from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
    from fleetgui.runtime.ov_stage import StageConfig

    if max_streams < 1:
        raise FleetguiError(f"max_streams must be at least 1, got {max_streams}")
    if layout not in ("pipeline", "copies"):
        raise FleetguiError(f"layout must be 'pipeline' or 'copies', not {layout!r}")
    addresses = [w.strip() for w in (workers.split(",") if isinstance(workers, str) else workers)]
    addresses = [a for a in addresses if a]
    if layout == "copies" and not addresses:
        raise FleetguiError("layout='copies' puts a copy on each worker: give workers=[...]")
    stages = 1 if layout == "copies" else 1 + len(addresses)
    export = await asyncio.to_thread(_export_of, Path(source), stages, weights)
    # a str is parsed ("ngram" or a folder); a Path is a folder, even one called ngram
    draft_source = parse_draft(draft) if isinstance(draft, str) else draft
    stage = StageConfig(threads=threads, precision=precision)
    local = LocalPipelineConfig(stage=stage, draft_stage=stage)
    if not addresses:
        runtime = await asyncio.to_thread(
            load_local_pipeline, export, draft_dir=draft_source, config=local
        )
        return LLMPipeline(runtime, (), max_streams)
    from fleetgui.fleet.open_fleet import open_fleet, parse_worker_list, resolve_workers
    from fleetgui.fleet.replicas import open_copies
    from fleetgui.fleet.session_config import CoordinatorConfig
    from fleetgui.net.keys import coordinator_identity, load_identity

    pair = load_identity(Path(identity)) if identity else coordinator_identity()
    config = CoordinatorConfig(
        local=local,
        worker_threads=threads,
        worker_precision=precision,
        local_failover=local_failover,
    )
    parsed = parse_worker_list(",".join(addresses))
    if layout == "copies":
        endpoints = await resolve_workers(parsed)
        groups = [[endpoint] for endpoint in endpoints]
        copies = await open_copies(export, groups, pair, config, draft_dir=draft_source)
        return LLMPipeline(copies, (), max_streams)
    session = await open_fleet(export, parsed, pair, config)
    try:
        runtime = await session.open_pipeline(draft_dir=draft_source)
    except BaseException:
        await session.close()
        raise
    return LLMPipeline(runtime, (session,), max_streams)


def open(
    source: str | Path,
    *,
    workers: Sequence[str] | str = (),
    draft: str | Path | None = None,
    layout: Layout = "pipeline",
    max_streams: int = 4,
    weights: str = "int4",
    identity: str | Path | None = None,
    threads: int = 0,
    precision: str = "auto",
    local_failover: bool = True,
) -> LLMPipeline:
    """Open a model for generating, on this PC or on a fleet.

    ``source``: an export folder (``fleetgui export``), or a model to export first into the
    shard cache (a GGUF file, a HuggingFace folder or hub id; reused on the next open).

    ``workers``: ``["HOST:PORT", ...]`` (or one comma-separated string) of paired workers
    (``fleetgui worker --pair``). None: every stage runs here. With ``layout="pipeline"`` this
    PC runs the first stage and each worker the next one, in order; with ``layout="copies"``
    each worker holds a whole copy and each generation runs on the least busy copy.

    ``draft``: a draft model's export, or ``"ngram"`` to draft from the text itself; then
    ``GenerationConfig(k=...)`` decodes speculatively. ``max_streams``: generations run at once
    (interleaved across the stages); more wait. ``weights``: the format a model is exported
    with (int4, int8, fp16, fp32). ``identity``: a coordinator key folder (default: the one in
    the OS keyring). ``threads``/``precision``: OpenVINO settings of every stage.
    ``local_failover``: when workers are lost and those left cannot take their stages, run
    the stages on this PC (else the generation ends with an error).

    Example::

        import fleetgui

        with fleetgui.open("shards/llama8b", workers=["192.168.1.20:5555"]) as llm:
            print(llm.chat([{"role": "user", "content": "Why is the sky blue?"}]))
            for text in llm.stream("def quicksort(items):", max_new_tokens=64):
                print(text, end="", flush=True)
    """
    thread = _LoopThread()
    try:
        pipeline = thread.run(
            aopen(
                source,
                workers=workers,
                draft=draft,
                layout=layout,
                max_streams=max_streams,
                weights=weights,
                identity=identity,
                threads=threads,
                precision=precision,
                local_failover=local_failover,
            )
        )
    except BaseException:
        thread.stop()
        raise
    pipeline._thread = thread
    return pipeline
