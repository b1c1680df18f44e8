"""``fleetgui serve``: an export's pipeline (in this process or on fleet workers) as an
OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fleetgui.commands.model_options import add_batching_argument, add_context_arguments
from fleetgui.errors import FleetguiError
from fleetgui.modes import MODES, Mode
from fleetgui.runtime.draft_source import parse_draft

if TYPE_CHECKING:
    from fleetgui.assembler import Placement
    from fleetgui.fleet.ring.link import WorkerEndpoint

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
#: --max-streams in every mode: several requests generate at once (a chat UI's background
#: requests beside its user's), each stream's steps interleaved through the stages
DEFAULT_STREAMS = 4


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
        help=f"requests generating at once (default {DEFAULT_STREAMS}); up to 4N more wait",
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
    add_context_arguments(parser)
    add_batching_argument(parser)


def _k(text: str) -> int | Literal["auto"]:
    from fleetgui.generation_config import parse_draft_tokens

    try:
        return parse_draft_tokens(text)
    except ValueError as exc:
        raise FleetguiError(f"--k: {exc}") from None


async def _serve(args: argparse.Namespace) -> int:
    from fleetgui.api.keys import resolve_api_key
    from fleetgui.api.served import ServedModel, stage_streams
    from fleetgui.api.server import ApiServer, ServerConfig
    from fleetgui.assembler import OpenHooks, Placement, aopen
    from fleetgui.export.manifest import read_manifest
    from fleetgui.fleet.placement.preview import auto_layout
    from fleetgui.net.keys import coordinator_identity, load_identity
    from fleetgui.runtime.ov_stage import StageConfig

    mode = Mode(args.mode)
    if mode.speculative and args.draft is None:
        raise FleetguiError(
            f"--mode {args.mode} needs a draft: add --draft DRAFT_EXPORT_DIR or --draft ngram"
        )
    k = _k(args.k)
    max_streams = args.max_streams
    if max_streams is None:
        max_streams = DEFAULT_STREAMS
    if args.layout != "pipeline" and not args.workers:
        raise FleetguiError(f"--layout {args.layout} places the model on workers: give --workers")
    api_key, created = resolve_api_key(args.api_key)
    config = ServerConfig(args.host, args.port, api_key, max_streams)
    config.check()  # before anything is loaded: a refused start costs nothing
    read_manifest(args.export_dir)  # an export, never a model to export first (as open() does)
    identity = None
    if args.workers:
        identity = load_identity(args.identity) if args.identity else coordinator_identity()
    stage = StageConfig(threads=args.threads, precision=args.precision)

    async def print_auto_layout(export: Path, endpoints: Sequence[WorkerEndpoint]) -> Placement:
        """``--layout auto``: the layout the planner chooses for ``--max-streams`` users, its
        preview printed (alternatives included)."""
        assert identity is not None  # --layout auto needs --workers
        text, groups = await auto_layout(export, endpoints, identity, stage, max_streams)
        print(text, flush=True)
        return Placement(replicas=groups)

    llm = await aopen(
        args.export_dir,
        workers=args.workers or (),
        draft=args.draft if mode.speculative else None,
        layout="pipeline" if args.layout == "auto" else args.layout,  # auto: the plan hook
        max_streams=max_streams,
        identity=identity,
        threads=args.threads,
        precision=args.precision,
        hooks=OpenHooks(plan=print_auto_layout if args.layout == "auto" else None),
        context=args.context,
        kv_reuse=args.kv_reuse,
        kv_budget=args.kv_budget,
        batching=args.batching,
    )
    name = args.model_name or Path(args.export_dir).resolve().name
    server: ApiServer | None = None
    try:
        if not llm.has_chat_template:  # reads the template: a broken one stops the start here
            log.warning(
                "%s has no chat template: chats are sent as a plain 'User: ... Assistant:' "
                "transcript",
                args.export_dir,
            )
        served = ServedModel(llm, name, k=mode.draft_tokens(k), stage_streams=stage_streams(llm))
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


async def _until_stopped() -> None:
    """Wait for SIGINT or SIGTERM (Ctrl+C on Windows ends ``asyncio.run`` itself)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows: no handlers
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping the API server")


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
