"""``fleetgui serve``: an export's pipeline (in this process or on fleet workers) as an
OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.runtime.draft_source import parse_draft
from fleetgui.runtime.modes import MODES, interleaves, is_speculative

NAME = "serve"
HELP = "serve an export on an OpenAI-compatible HTTP API (/v1/chat/completions, ...)"
DESCRIPTION = (
    "Serve an export's pipeline, in this process or on fleet workers, on an OpenAI-compatible "
    "API: GET /v1/models, POST /v1/chat/completions and POST /v1/completions, streamed or not. "
    "Concurrent requests run as concurrent streams of the pipeline, up to --max-streams; more "
    "wait in a bounded queue, and beyond it get 429."
)
log = logging.getLogger(__name__)

PRECISIONS = ("f32", "bf16", "f16", "auto")
MB_DEFAULT_STREAMS = 4  # --max-streams in the +mb modes; the others default to one at a time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fleetgui.api import DEFAULT_HOST, DEFAULT_PORT

    parser.add_argument("export_dir", metavar="EXPORT_DIR", type=Path, help="export folder")
    parser.add_argument("--workers", metavar="HOST:PORT,...", help="run stages 1.. on workers")
    parser.add_argument("--identity", type=Path, metavar="DIR", help="coordinator key pair")
    parser.add_argument(
        "--draft",
        type=parse_draft,
        metavar="DIR|ngram",
        help="draft model export, or ngram: draft from the text itself (no draft model)",
    )
    parser.add_argument("--mode", choices=MODES, default="pp")
    parser.add_argument("--k", default="auto", metavar="K|auto", help="draft tokens per step")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind ({DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"({DEFAULT_PORT}; 0: any)")
    parser.add_argument(
        "--api-key",
        metavar="KEY|keyring",
        help="key clients must send (Authorization: Bearer KEY); 'keyring': the one in the OS "
        "keyring, made the first time; default: the FLEETGUI_API_KEY variable, else none "
        "(allowed on 127.0.0.1 only)",
    )
    parser.add_argument(
        "--max-streams",
        type=int,
        metavar="N",
        help=f"requests generating at once (default {MB_DEFAULT_STREAMS} in pp+mb and "
        "pp+sd+mb, else 1); up to 4N more wait",
    )
    parser.add_argument(
        "--layout",
        choices=("pipeline", "copies", "auto"),
        default="pipeline",
        help="with --workers: one pipeline over this PC and the workers (default); a whole "
        "copy of the model on each worker, new requests going to the least loaded copy (for "
        "models every worker can hold: no hop per token); or auto: the planner measures the "
        "PCs and picks the faster of the two for --max-streams users",
    )
    parser.add_argument("--model-name", metavar="NAME", help="the model's id (EXPORT_DIR's name)")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument(
        "--threads", type=int, default=0, metavar="N", help="OpenVINO threads per stage"
    )


def _k(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        k = int(text)
    except ValueError:
        raise FleetguiError(f"--k must be a number from 1 to 16 or 'auto', not {text!r}") from None
    from fleetgui.runtime.auto_k import check_k

    try:
        check_k(k)
    except ValueError as exc:
        raise FleetguiError(f"--k: {exc}") from exc
    return k


async def _serve(args: argparse.Namespace) -> int:
    from fleetgui.api.keys import resolve_api_key
    from fleetgui.api.served import ServedModel
    from fleetgui.api.server import ApiServer, ServerConfig
    from fleetgui.generation_config import speculative_k
    from fleetgui.llm_pipeline import LLMPipeline
    from fleetgui.runtime.loader import LocalPipelineConfig
    from fleetgui.runtime.ov_stage import StageConfig

    speculative = is_speculative(args.mode)
    if speculative and args.draft is None:
        raise FleetguiError(
            f"--mode {args.mode} needs a draft: add --draft DRAFT_EXPORT_DIR or --draft ngram"
        )
    k = _k(args.k)
    max_streams = args.max_streams
    if max_streams is None:
        max_streams = MB_DEFAULT_STREAMS if interleaves(args.mode) else 1
    api_key, created = resolve_api_key(args.api_key)
    config = ServerConfig(args.host, args.port, api_key, max_streams)
    config.check()  # before anything is loaded: a refused start costs nothing
    stage = StageConfig(threads=args.threads, precision=args.precision)
    local = LocalPipelineConfig(stage=stage, draft_stage=stage)
    draft = args.draft if speculative else None
    runtime, counts, session = await _open_pipeline(args, local, draft, max_streams)
    # closes the runtime pipeline, then the fleet session it runs on
    llm = LLMPipeline.over(runtime, closers=[session] if session else [], max_streams=max_streams)
    name = args.model_name or Path(args.export_dir).resolve().name
    server: ApiServer | None = None
    try:
        if not llm.has_chat_template:  # reads the template: a broken one stops the start here
            log.warning(
                "%s has no chat template: chats are sent as a plain 'User: ... Assistant:' "
                "transcript",
                args.export_dir,
            )
        served = ServedModel(llm, name, k=speculative_k(speculative, k), stage_streams=counts)
        server = ApiServer(served, config)
        url = await server.start()
        print(f"fleetgui serve: {name} at {url} ({args.mode}, {max_streams} streams)", flush=True)
        if created:
            print(f"API key (stored in the OS keyring): {api_key}", flush=True)
        await _until_stopped()
    finally:
        if server is not None:
            await server.stop()
        await llm.aclose()
    return 0


async def _open_pipeline(
    args: argparse.Namespace, local: Any, draft: Any, max_streams: int
) -> tuple[Any, Any, Any]:
    """The pipeline to serve, how to count its streams, and the fleet session it runs on (None
    in this process, or for copies, which own theirs)."""
    from fleetgui.api.served import fleet_stage_streams, local_stage_streams, replica_streams
    from fleetgui.runtime.loader import load_local_pipeline
    from fleetgui.runtime.route import LocalRoute

    groups: tuple[tuple[str, ...], ...] | None = None  # None: a copy on every worker
    layout = args.layout
    if args.workers and layout == "auto":
        groups = await _choose_layout(args, local, max_streams)
        layout = "copies" if groups else "pipeline"
    if args.workers and layout == "copies":
        replicas = await _open_replicas(args, local, draft, groups)
        return replicas, replica_streams(replicas), None
    if args.workers:
        session = await _open_fleet(args, local)
        return session.pipeline(draft_dir=draft), fleet_stage_streams(session), session
    if args.layout != "pipeline":
        raise FleetguiError(f"--layout {args.layout} places the model on workers: give --workers")
    pipeline = await asyncio.to_thread(
        load_local_pipeline, args.export_dir, draft_dir=draft, config=local
    )
    assert isinstance(pipeline.route, LocalRoute)
    return pipeline, local_stage_streams(pipeline.route), None


async def _until_stopped() -> None:
    """Wait for SIGINT or SIGTERM (Ctrl+C on Windows ends ``asyncio.run`` itself)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows: no handlers
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping the API server")


def _fleet_config(args: argparse.Namespace, local: Any) -> tuple[Any, Any]:
    """The coordinator's key pair and configuration for ``--workers``."""
    from fleetgui.fleet.session_config import CoordinatorConfig
    from fleetgui.net.keys import coordinator_identity, load_identity

    identity = load_identity(args.identity) if args.identity else coordinator_identity()
    config = CoordinatorConfig(
        local=local, worker_threads=args.threads, worker_precision=args.precision
    )
    return identity, config


async def _open_fleet(args: argparse.Namespace, local: Any) -> Any:
    from fleetgui.fleet.open_fleet import open_fleet, parse_worker_list

    identity, config = _fleet_config(args, local)
    return await open_fleet(args.export_dir, parse_worker_list(args.workers), identity, config)


async def _choose_layout(
    args: argparse.Namespace, local: Any, users: int
) -> tuple[tuple[str, ...], ...]:
    """The groups of workers to serve as replicas for ``--max-streams`` users (whole copies,
    or pipelines over groups), or () for one pipeline, as the app's plan preview decides for
    ``users`` at once: this PC and the workers time a stage of the export, the planner plans
    the pipeline and the workers' layouts, and replicas win only when predicted faster. The
    preview is printed, alternatives included."""
    from fleetgui.app.layer_times import measure_devices
    from fleetgui.app.local_pc import (
        ESTIMATED_DISK_BYTES_PER_S,
        ESTIMATED_MS_PER_LAYER,
        coordinator_profile,
    )
    from fleetgui.app.plan_preview import (
        PreviewRequest,
        groups_to_deploy,
        layout_text,
        preview_layout,
        preview_plan,
    )
    from fleetgui.fleet.open_fleet import parse_worker_list, resolve_workers
    from fleetgui.net.info_probe import probe
    from fleetgui.planner import DeviceProfile, PlanConfig

    identity, _ = _fleet_config(args, local)
    addresses = parse_worker_list(args.workers)
    endpoints = await resolve_workers(addresses)
    base = [coordinator_profile()]
    for host, port in addresses:
        started = time.perf_counter()
        info = await probe(host, port)
        base.append(
            DeviceProfile(
                name=info.name,
                memory_bytes=info.free_ram_bytes or info.ram_bytes,
                ms_per_layer=ESTIMATED_MS_PER_LAYER,
                disk_read_bytes_per_s=ESTIMATED_DISK_BYTES_PER_S,
                rtt_ms=(time.perf_counter() - started) * 1000,  # the probe's round trip
            )
        )
    measured = await measure_devices(
        base, endpoints, identity, args.export_dir, local_stage=local.stage
    )
    request = PreviewRequest(Path(args.export_dir), measured.profiles, PlanConfig(), users)
    plan = await asyncio.to_thread(preview_plan, request)
    layout = await asyncio.to_thread(preview_layout, request)
    print(layout_text(plan, layout) or f"{plan}", flush=True)
    return groups_to_deploy(plan, layout)


async def _open_replicas(
    args: argparse.Namespace, local: Any, draft: Any, groups: tuple[tuple[str, ...], ...] | None
) -> Any:
    """A replica per group of worker names (None: a whole copy on every worker)."""
    from fleetgui.fleet.open_fleet import parse_worker_list, resolve_workers
    from fleetgui.fleet.replicas import open_copies

    identity, config = _fleet_config(args, local)
    endpoints = await resolve_workers(parse_worker_list(args.workers))
    by_name = {endpoint.name: endpoint for endpoint in endpoints}
    chosen = (
        [[by_name[name] for name in group] for group in groups]
        if groups
        else [[endpoint] for endpoint in endpoints]
    )
    return await open_copies(args.export_dir, chosen, identity, config, draft_dir=draft)


def run(args: argparse.Namespace) -> int:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise FleetguiError("fleetgui serve needs aiohttp: pip install 'fleetgui[app]'") from None
    if sys.platform == "win32":  # no signal handlers on the Proactor loop: Ctrl+C ends it
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(_serve(args))
        return 0
    return asyncio.run(_serve(args))
