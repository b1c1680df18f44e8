"""Real demo model benchmark: PP+SD's speedup over PP and its acceptance, per drafter, on chat
and on code prompts, as ``fleetgui demo`` runs SmolLM2-135M-Instruct.

The demo's setup (``start_demo()``): the target's GGUF exported in 2 int8 stages on 2 local
worker processes (one OpenVINO thread each), the coordinator drafting. Every prompt is a chat
message rendered with the model's template. In each repeat, each prompt runs greedy with plain
PP and then with PP+SD (K auto) for each drafter in turn, interleaved, so the speedups are
paired within a repeat (median over repeats). Rates are decode tokens/s (after the first
token), averaged over a set's prompts.

Run: ``.venv/bin/python benchmarks/bench_real_demo.py [--drafts ngram,DRAFT_EXPORT_DIR]
[--tokens 128] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from common import paired, print_figures

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.draft_source import draft_label, parse_draft

CHAT = (
    "What is the capital of Italy?",
    "Explain in three sentences why the sky is blue.",
    "Give me three tips for sleeping better.",
    "What is the difference between weather and climate?",
    "Write a short, friendly email inviting a colleague to lunch on Friday.",
    "How do plants make their food?",
)
CODE = (
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that reverses the words in a sentence.",
    "Write a Python class for a stack with push, pop and peek.",
    "Write a Python function that counts how often each word appears in a text.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that merges two sorted lists into one sorted list.",
)


async def run(args: argparse.Namespace) -> None:
    from fleetgui.demo.start import start_demo
    from fleetgui.runtime.chat_prompt import ChatPrompter
    from fleetgui.runtime.loader import load_draft

    demo = await start_demo(None)
    pipe = demo.llm.runtime
    session = demo.llm.sessions[0]
    assert session.deployment.manifest is not None
    drafts = {
        draft_label(source): load_draft(
            source, session.deployment.manifest, pipe.tokenizer, session.config.local, session._core
        )
        for source in map(parse_draft, args.drafts.split(","))
    }
    prompter = ChatPrompter.for_tokenizer(pipe.tokenizer)
    sets = {"chat": CHAT, "code": CODE}
    rates: dict[str, dict[str, list[float]]] = {name: {} for name in sets}
    accepted: dict[str, dict[str, list[float]]] = {name: {} for name in sets}
    pp = GenerationConfig(max_new_tokens=args.tokens)
    sd = GenerationConfig(max_new_tokens=args.tokens, k="auto")
    try:
        for _ in range(args.repeats):
            for set_name, prompts in sets.items():
                texts = [prompter.text([{"role": "user", "content": p}]) for p in prompts]
                per_repeat: dict[str, list[float]] = {}
                for text in texts:
                    base = await pipe.complete(text, pp)
                    per_repeat.setdefault("PP", []).append(base.tokens_per_s)
                    for name, drafter in drafts.items():
                        pipe.draft = drafter  # the same pipeline and fleet, another drafter
                        result = await pipe.complete(text, sd)
                        per_repeat.setdefault(name, []).append(result.tokens_per_s)
                        if result.acceptance_rate is not None:
                            accepted[set_name].setdefault(name, []).append(result.acceptance_rate)
                for name, values in per_repeat.items():
                    rates[set_name].setdefault(name, []).append(statistics.mean(values))
    finally:
        for drafter in drafts.values():
            if drafter is not pipe.draft:
                await drafter.close()
        await demo.close()
    rows: list[tuple[str, str]] = [
        ("model", "SmolLM2-135M-Instruct, int8, 2 stages on 2 local workers"),
        ("run", f"{args.repeats} repeats x 6 prompts per set, {args.tokens} new tokens, greedy"),
    ]
    figures: dict[str, Any] = {}
    for set_name in sets:
        pp_rate = statistics.median(rates[set_name]["PP"])
        rows.append((f"{set_name}: PP", f"{pp_rate:.1f} tok/s"))
        for name in drafts:
            speedup = paired(rates[set_name], name, "PP")
            acceptance = statistics.mean(accepted[set_name].get(name, [0.0]))
            rows.append(
                (
                    f"{set_name}: PP+SD, {name}",
                    f"{statistics.median(rates[set_name][name]):.1f} tok/s, "
                    f"{speedup:.2f}x over PP, acceptance {acceptance:.1%}",
                )
            )
            figures[f"{set_name}/{name}"] = {
                "speedup": round(speedup, 3),
                "acceptance": round(acceptance, 4),
                "per_repeat_tok_s": [round(v, 1) for v in rates[set_name][name]],
            }
        figures[f"{set_name}/PP"] = [round(v, 1) for v in rates[set_name]["PP"]]
    print_figures("real demo model: drafters", rows, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--drafts", default="ngram", help="comma-separated: ngram, draft exports")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
