"""K auto against fixed K request by request, and what a round costs at each K, in one process.

The real demo target (SmolLM2-135M-Instruct, 2 int8 stages) and its distilled draft run in this
process, one OpenVINO thread each, no network: the link's delay is out of the picture, so what
is left is the choice of K against the draft's and the stages' own costs. Each of ``fleetgui
bench``'s requests is rendered with the chat template; per repeat each configuration runs once
on it, interleaved, and K auto starts from a fresh chooser every run (a new user's first reply,
as in ``fleetgui bench``). Rates are decode tokens/s (after the first token), medians over the
repeats; K auto's ratio is of its median to the best fixed K's. The cost table: each fixed K's
rounds (after a reply's first), medians of the draft's proposal, the verify pass and both.

Run: ``.venv/bin/python benchmarks/bench_k_requests.py [--target DIR] [--draft DIR]
[--ks 1,5,10] [--tokens 128] [--repeats 5] [--requests 0,1,2,3,4,5]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import logging
import statistics
from pathlib import Path
from typing import Literal

import common

from fleetgui.bench.prompts import REQUESTS
from fleetgui.generation_config import GenerationConfig
from fleetgui.paths import shards_cache_dir
from fleetgui.runtime.auto_k import AutoK
from fleetgui.runtime.chat_prompt import ChatPrompter
from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
from fleetgui.runtime.metrics import MetricEvent, MetricsBus, SpeculationRound
from fleetgui.runtime.ov_stage import StageConfig


async def run(args: argparse.Namespace) -> None:
    one_thread = StageConfig(threads=1)
    bus = MetricsBus()
    rounds: list[SpeculationRound] = []

    def keep(event: MetricEvent) -> None:
        if isinstance(event, SpeculationRound):
            rounds.append(event)

    bus.subscribe(keep)
    pipe = load_local_pipeline(
        args.target,
        draft_dir=args.draft,
        config=LocalPipelineConfig(stage=one_thread, draft_stage=one_thread),
        metrics=bus,
    )
    prompter = ChatPrompter.for_tokenizer(pipe.tokenizer)
    configs: list[int | Literal["auto"]] = [*args.ks, "auto"]
    costs: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    try:
        for index in args.requests:
            prompt = prompter.text([{"role": "user", "content": REQUESTS[index]}])
            warm = GenerationConfig(max_new_tokens=8, k=2)
            await pipe.complete(prompt, warm)  # the first passes of fresh states cost more
            rates: dict[int | Literal["auto"], list[float]] = {k: [] for k in configs}
            mean_k: list[float] = []
            for _ in range(args.repeats):
                for k in configs:
                    pipe.new_auto_k = functools.partial(AutoK)  # no estimates carried over
                    rounds.clear()
                    options = GenerationConfig(
                        max_new_tokens=args.tokens, stop=prompter.stop_strings, k=k
                    )
                    result = await pipe.complete(prompt, options)
                    rates[k].append(result.tokens_per_s)
                    if k == "auto":
                        mean_k.append(statistics.mean(result.ks) if result.ks else 0.0)
                    else:
                        costs[k] += [(r.draft_ms, r.verify_ms) for r in rounds[1:]]
            medians = {k: statistics.median(v) for k, v in rates.items()}
            best = max(args.ks, key=lambda k: medians[k])
            rows = [(f"K={k}", f"{medians[k]:.1f} tok/s") for k in args.ks] + [
                ("K auto", f"{medians['auto']:.1f} tok/s, mean K {statistics.mean(mean_k):.1f}"),
                (f"K auto / best fixed (K={best})", f"{medians['auto'] / medians[best]:.2f}x"),
            ]
            figures = {str(k): v for k, v in medians.items()}
            common.print_figures(f"request {index}: {REQUESTS[index][:40]}", rows, figures)
        cost_rows, cost_json = [], {}
        for k in args.ks:
            draft = statistics.median(d for d, _ in costs[k])
            verify = statistics.median(v for _, v in costs[k])
            whole = statistics.median(d + v for d, v in costs[k])
            cost_rows.append(
                (f"K={k}", f"draft {draft:.1f} + verify {verify:.1f} = {whole:.1f} ms")
            )
            cost_json[str(k)] = {"draft_ms": draft, "verify_ms": verify, "round_ms": whole}
        common.print_figures("a round's cost (medians over every request)", cost_rows, cost_json)
    finally:
        await pipe.close()


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    cache = shards_cache_dir()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=cache / "demo-smollm2-2stages-int8")
    parser.add_argument("--draft", type=Path, default=cache / "demo-smollm2-draft-int8")
    parser.add_argument("--ks", type=_ints, default=[1, 5, 10])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=_ints, default=list(range(len(REQUESTS))))
    args = parser.parse_args()
    for folder in (args.target, args.draft):
        if not (folder / "manifest.json").is_file():
            parser.error(f"{folder} is not an export: make it with `fleetgui demo-model`")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
