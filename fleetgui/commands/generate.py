"""``fleetgui generate``: run prompts through an export's pipeline of stages."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgui.commands.model_options import add_batching_argument, add_context_arguments
from fleetgui.errors import FleetguiError
from fleetgui.modes import MODES, Mode
from fleetgui.runtime.draft_source import parse_draft

if TYPE_CHECKING:
    from fleetgui.generation_config import GenerationConfig
    from fleetgui.llm_pipeline import LLMPipeline

NAME = "generate"
HELP = "generate text with a pipeline of stages (PP, PP+MB, PP+SD, PP+SD+MB)"
DESCRIPTION = (
    "Generate text from one or more prompts through the stages of an export, in-process or on "
    "fleet workers, with pipeline parallelism, speculative decoding and interleaved streams."
)
log = logging.getLogger(__name__)

PRECISIONS = ("f32", "bf16", "f16", "auto")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("export_dir", metavar="EXPORT_DIR", type=Path, help="export folder")
    parser.add_argument(
        "--prompt", action="append", required=True, metavar="TEXT", help="a prompt (repeatable)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    parser.add_argument("--mode", choices=MODES, default="pp")
    parser.add_argument("--k", default="auto", metavar="K|auto", help="draft tokens per step")
    parser.add_argument(
        "--draft",
        type=parse_draft,
        metavar="DRAFT_EXPORT_DIR|ngram",
        help="draft model export, or ngram: draft from the text itself (no draft model)",
    )
    parser.add_argument("--streams", type=int, default=1, metavar="S")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P")
    parser.add_argument("--top-k", type=int, default=0, metavar="K", help="0 = no top-k cut")
    parser.add_argument("--seed", type=int, default=None, metavar="S")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--workers", metavar="HOST:PORT,...", help="run stages 1.. on workers")
    parser.add_argument("--identity", type=Path, metavar="DIR", help="coordinator key pair")
    parser.add_argument(
        "--no-local-failover",
        dest="local_failover",
        action="store_false",
        help="when workers are lost and those left cannot take their stages, end with an error "
        "instead of running the stages on this PC",
    )
    parser.add_argument("--json", action="store_true", help="print JSON objects, one a line")
    parser.add_argument(
        "--threads", type=int, default=0, metavar="N", help="OpenVINO threads per stage"
    )
    add_context_arguments(parser)
    add_batching_argument(parser)
    parser.add_argument(
        "--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)"
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as a user message, in the model's chat template",
    )
    parser.add_argument("--system", metavar="TEXT", help="with --chat: a system message first")


def _options(args: argparse.Namespace) -> GenerationConfig:
    """The flags' generation configuration, checked before anything is loaded."""
    from fleetgui.generation_config import GenerationConfig, parse_draft_tokens

    try:
        k = parse_draft_tokens(args.k)
    except ValueError as exc:
        raise FleetguiError(f"--k: {exc}") from None
    config = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop=tuple(args.stop),
        k=Mode(args.mode).draft_tokens(k),
    )
    try:
        config.check()
    except ValueError as exc:
        raise FleetguiError(str(exc)) from exc
    if config.speculative and args.draft is None:
        raise FleetguiError(
            f"--mode {args.mode} needs a draft: add --draft DRAFT_EXPORT_DIR or --draft ngram"
        )
    return config


def result_record(result: Any, speculative: bool) -> dict[str, Any]:
    """The JSON object `generate --json` (and `demo --json`) prints for one answer."""
    record: dict[str, Any] = {
        "prompt": result.prompt,
        "text": result.text,
        "token_ids": result.token_ids,
        "ttft_ms": round(result.ttft_ms, 2),
        "tokens_per_s": round(result.tokens_per_s, 2),
        "finish_reason": result.finish_reason,
    }
    if speculative:
        record["acceptance_rate"] = (
            None if result.acceptance_rate is None else round(result.acceptance_rate, 4)
        )
        record["ks"] = result.ks
        record["plain_steps"] = result.plain_steps
    return record


class _AnswerText:
    """One answer's text printed as its tokens come (when ``enabled``)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.printed = False

    def write(self, text: str) -> None:
        if self.enabled and text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.printed = True

    def cut(self) -> None:
        """An error ended the answer: end its line, so the error starts on a line of its own."""
        if self.printed:
            sys.stdout.write("\n")
            sys.stdout.flush()


async def _generate(args: argparse.Namespace) -> int:
    from fleetgui.assembler import aopen
    from fleetgui.export.manifest import read_manifest
    from fleetgui.fleet.pairing.worker_addresses import parse_worker_list
    from fleetgui.runtime.generation import GenerationResult

    if args.system is not None and not args.chat:
        raise FleetguiError("--system is a chat's system message: add --chat")
    config = _options(args)
    if args.workers:
        parse_worker_list(args.workers)  # "--workers is empty", a worker listed twice
    read_manifest(args.export_dir)  # an export, never a model to export first (as open() does)
    concurrent = Mode(args.mode).interleaved  # pp+mb and pp+sd+mb: the prompts at once
    streams = max(1, args.streams if concurrent else 1)
    if concurrent and args.streams == 1:
        streams = len(args.prompt)
    llm = await aopen(
        args.export_dir,
        workers=args.workers or (),
        draft=args.draft if config.speculative else None,
        max_streams=streams,  # the other prompts wait their turn in the pipeline
        identity=args.identity,
        threads=args.threads,
        precision=args.precision,
        local_failover=args.local_failover,
        context=args.context,
        kv_reuse=args.kv_reuse,
        kv_budget=args.kv_budget,
        batching=args.batching,
    )
    results: list[Any] = [None] * len(args.prompt)
    prompts = list(args.prompt)
    answer = _AnswerText(enabled=not args.json and len(args.prompt) == 1)

    async def one(index: int, prompt: str) -> None:
        async for item in llm.astream_result(prompt, config):
            if isinstance(item, GenerationResult):
                results[index] = item
            else:
                answer.write(item.text)

    started = time.perf_counter()
    try:
        if args.chat:
            prompts, config = _chat_prompts(args, llm, config)
        if concurrent:
            await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        else:
            for i, prompt in enumerate(prompts):
                await one(i, prompt)
    except BaseException:
        answer.cut()
        raise
    finally:
        await llm.aclose()
    _print_results(args, results, config.speculative, time.perf_counter() - started)
    return 0


def _chat_prompts(
    args: argparse.Namespace, llm: LLMPipeline, config: GenerationConfig
) -> tuple[list[str], GenerationConfig]:
    """Each prompt as one user message (after the --system message) in the export's chat
    template, and the configuration with the stop strings its format needs."""
    from fleetgui.runtime.chat_template import no_template_note

    note = no_template_note(llm.prompter.template)
    if note:
        log.warning("%s: %s", args.export_dir, note)
    head = [] if args.system is None else [{"role": "system", "content": args.system}]
    prompts = [llm.prompter.text([*head, {"role": "user", "content": p}]) for p in args.prompt]
    return prompts, llm.chat_config(config)


def _print_results(
    args: argparse.Namespace, results: list[Any], speculative: bool, wall: float
) -> None:
    total_tokens = sum(len(r.token_ids) for r in results)
    if args.json:
        for result in results:
            print(json.dumps(result_record(result, speculative)))
        aggregate = {
            "aggregate": True,
            "streams": len(results),
            "total_tokens": total_tokens,
            "wall_s": round(wall, 3),
            "tokens_per_s": round(total_tokens / wall, 2),
        }
        print(json.dumps(aggregate))
        return
    if len(results) == 1:
        print()
    else:
        for result in results:
            print(f"--- {result.prompt!r}")
            print(result.text)
    for result in results:
        rate = f"{result.tokens_per_s:.1f} tok/s, TTFT {result.ttft_ms:.0f} ms"
        if result.acceptance_rate is not None:
            rate += f", acceptance {result.acceptance_rate:.0%}"
        print(
            f"[{len(result.token_ids)} tokens, {rate}, {result.finish_reason}]",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_generate(args))
