"""Demo pair benchmark: PP+SD speedup per K on held-out code prompts, as ``fleetgui demo`` runs.

The demo's setup: the target exported in 2 stages on 2 local worker processes (one OpenVINO
thread each), the draft on the coordinator. For each K (and ``auto``) the same held-out prompts
run greedy with PP+SD and with plain PP, interleaved, and the table gives decode tokens/s,
the speedup over PP and the acceptance rate, and how many runs' greedy text differs from PP's.
With the demo's int8 target the CPU quantizes activations to int8 per pass and rounds a
K+1-position verify pass slightly differently from a one-position step, so a near-tie can part
the texts (``--precision f32`` stages are exact; ``tests/runtime/test_exact_output.py``).

Run: ``.venv/bin/python benchmarks/bench_demo.py [--size small|medium] [--tokens 96]``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
from typing import Any

from common import k_choice, print_figures

from fleetgui.demo.models import DEMO_WEIGHTS
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.training.toy_pair.spec import SIZES

HELD_OUT = (
    "def fibonacci(n):\n    ",
    "class Stack:\n\n    def __init__(self):\n        ",
    "import os\n\n\ndef main():\n    ",
    "def read_config(path):\n    with open(path) as handle:\n        ",
)


async def measure(pipe: Pipeline, k: int | None, speculative: bool, tokens: int) -> dict[str, Any]:
    rates, accepted, ids = [], [], []
    for prompt in HELD_OUT:
        options = GenerationConfig(
            max_new_tokens=tokens, k=(("auto" if k is None else k) if speculative else "off")
        )
        result = await pipe.complete(prompt, options)
        rates.append(result.tokens_per_s)
        ids.append(result.token_ids)
        if result.acceptance_rate is not None:
            accepted.append(result.acceptance_rate)
    return {
        "tok_s": statistics.mean(rates),
        "acceptance": statistics.mean(accepted) if accepted else None,
        "ids": ids,
    }


async def run(args: argparse.Namespace) -> None:
    from fleetgui.demo.start import start_demo

    demo = await start_demo(args.size, weights=args.weights)
    ks = args.ks.split(",")
    choices = {k: k_choice(k) for k in ks}
    figures: dict[str, dict[str, list[float]]] = {}
    try:
        pipe = demo.llm.runtime
        await pipe.complete("warm up", GenerationConfig(max_new_tokens=8, k="auto"))
        for _ in range(args.repeats):
            base = await measure(pipe, None, False, args.tokens)
            figures.setdefault("pp", {}).setdefault("tok_s", []).append(base["tok_s"])
            for k in ks:
                fixed_k, pipe.new_auto_k = choices[k]
                spec = await measure(pipe, fixed_k, True, args.tokens)
                entry = figures.setdefault(f"k={k}", {})
                differ = sum(a != b for a, b in zip(spec["ids"], base["ids"], strict=True))
                entry.setdefault("differs", []).append(differ)
                entry.setdefault("tok_s", []).append(spec["tok_s"])
                entry.setdefault("acceptance", []).append(spec["acceptance"] or 0.0)
                entry.setdefault("speedup", []).append(spec["tok_s"] / base["tok_s"])
    finally:
        await demo.close()
    med = {name: {m: statistics.median(v) for m, v in e.items()} for name, e in figures.items()}
    rows = [("PP (no draft)", f"{med['pp']['tok_s']:.1f} tok/s")]
    for k in ks:
        entry = med[f"k={k}"]
        differ = int(sum(figures[f"k={k}"]["differs"]))
        text = (
            f"{entry['tok_s']:.1f} tok/s, {entry['speedup']:.2f}x, "
            f"acceptance {entry['acceptance']:.1%}"
        )
        if differ:
            text += f", text differs from PP's in {differ} of {len(HELD_OUT) * args.repeats} runs"
        rows.append((f"PP+SD K={k}", text))
    print_figures(
        f"demo benchmark: {args.size} pair (target {args.weights}), 2 local workers, "
        f"{len(HELD_OUT)} held-out prompts, "
        f"{args.tokens} new tokens, median of {args.repeats}",
        rows,
        {n: {m: [round(x, 3) for x in v] for m, v in e.items()} for n, e in figures.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--weights", default=DEMO_WEIGHTS, help="the target's weight format")
    parser.add_argument(
        "--ks",
        default="1,2,3,4,6,8,auto",
        help="the Ks to run, comma-separated: numbers, auto, auto-unbraked",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
