"""Memory of conversations kept on the fleet: 40 conversations of about 1,500 tokens each go
through ``fleetgui serve`` with a KV budget for 8 of them (``--kv-budget``), and the resident
set (RSS) of the serving process (stage 0) and of the worker (stage 1) is read after each; the
same with a budget for all 40 shows what the budget holds back. Then every conversation comes
back with one more message, the most recent first: the 8 kept continue their KV, the 32
evicted are prefilled again, and every answer must be the one a server without kept KV
(``--no-kv-reuse``) gives.

The demo's SmolLM2-135M-Instruct (int8 weights, 2 stages), computed in f32 (``--precision
f32``: the KV in f32 and answers comparable token for token), ``fleetgui serve`` pinned to
core 0 and a fresh worker process on core 1 for each server, one OpenVINO thread each.

Run: ``.venv/bin/python benchmarks/bench_kv_memory.py [--conversations 40 --kept 8]``
"""

from __future__ import annotations

import argparse
import json
import logging
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from bench_conversation import filler, serve_process
from common import bench_cache, demo_run_args, print_figures

from fleetgui.runtime.kv_budget import KEPT_TOKEN_COST

log = logging.getLogger("benchmarks")

N_WORDS = 1300  # about 1,500 tokens with the chat template
N_ANSWER = 8
MB = 1 << 20


def ask(url: str, messages: list[dict[str, str]]) -> tuple[str, int]:
    """The greedy answer to ``messages`` and how many prompt tokens were kept."""
    body = json.dumps(
        {"model": "m", "messages": messages, "max_tokens": N_ANSWER, "temperature": 0}
    ).encode()
    request = urllib.request.Request(
        f"{url}/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as reply:
        answer = json.load(reply)
    usage = answer["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return answer["choices"][0]["message"]["content"], cached


def rss_mb(*pids: int) -> float:
    return sum(psutil.Process(pid).memory_info().rss for pid in pids) / MB


def first_messages(i: int) -> list[dict[str, str]]:
    words = filler(100 + i, N_WORDS)
    question = f"Conversation {i}. Here is a list of words: {words}\nWhich word comes first?"
    return [{"role": "user", "content": question}]


def kv_bytes_per_token(export: Path) -> int:
    """One token's KV on the PC with the most layers, in f32 (both stages hold 15 here)."""
    from fleetgui.export.manifest import read_manifest
    from fleetgui.runtime.kv_budget import kv_bytes_per_token_per_layer

    manifest = read_manifest(export)
    most = max(stage.end_layer - stage.start_layer for stage in manifest.stages)
    return most * kv_bytes_per_token_per_layer(manifest.config, 4)


def run_server(
    export: Path, name: str, flags: tuple[str, ...], conversations: int, revisit: bool
) -> dict[str, Any]:
    """One server with a fresh worker: the first pass's RSS after each conversation (MB, both
    processes), and with ``revisit`` every conversation's second answer and its kept tokens."""
    from fleetgui.fleet.local_fleet.fleet import LocalFleet

    out: dict[str, Any] = {"rss": [], "answers": [], "first": [], "cached": []}
    with LocalFleet(bench_cache() / f"kv-memory-{name}", cores={"w1": (1,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        fleet.identity()
        identity = fleet.root / "coordinator"
        assert worker.process is not None
        with serve_process(
            export, worker, identity, "--precision", "f32", "--context", "2048", *flags
        ) as (url, server):
            pids = (server.pid, worker.process.pid)
            ask(url, [{"role": "user", "content": "Hello"}])  # compiled and warm
            out["base"] = rss_mb(*pids)
            histories = []
            for i in range(conversations):
                messages = first_messages(i)
                answer, _ = ask(url, messages)
                histories.append([*messages, {"role": "assistant", "content": answer}])
                out["first"].append(answer)
                out["rss"].append(rss_mb(*pids))
                log.info("%s: conversation %d, RSS %.0f MB", name, i + 1, out["rss"][-1])
            if revisit:  # the most recent first: the kept ones before any is evicted
                for i in reversed(range(conversations)):
                    question = {"role": "user", "content": f"And {filler(i, 12)}?"}
                    answer, cached = ask(url, [*histories[i], question])
                    out["answers"].insert(0, answer)
                    out["cached"].insert(0, cached)
                out["rss_end"] = rss_mb(*pids)
    return out


def reference(export: Path, firsts: list[str], conversations: int) -> list[str]:
    """The second answers from a server that keeps no KV, on the same histories."""
    from fleetgui.fleet.local_fleet.fleet import LocalFleet

    answers = []
    with LocalFleet(bench_cache() / "kv-memory-cold", cores={"w1": (1,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        fleet.identity()
        with serve_process(
            export, worker, fleet.root / "coordinator", "--precision", "f32", "--context",
            "2048", "--no-kv-reuse",
        ) as (url, _):  # fmt: skip
            for i in range(conversations):
                history = [*first_messages(i), {"role": "assistant", "content": firsts[i]}]
                messages = [*history, {"role": "user", "content": f"And {filler(i, 12)}?"}]
                answers.append(ask(url, messages)[0])
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--kept", type=int, default=8, help="conversations the budget holds")
    args = demo_run_args(parser)
    per_token = kv_bytes_per_token(args.export)
    # a conversation holds its prompt (about 1,500 tokens) and answer: 1,560 is a safe bound;
    # the budget counts a kept token at KEPT_TOKEN_COST times its KV
    budget = args.kept * 1560 * per_token * KEPT_TOKEN_COST
    every = args.conversations * 1560 * per_token * KEPT_TOKEN_COST
    kept = run_server(
        args.export, "kept", ("--kv-budget", str(budget)), args.conversations, revisit=True
    )
    unbounded = run_server(
        args.export, "all", ("--kv-budget", str(every)), args.conversations, revisit=False
    )
    cold = reference(args.export, kept["first"], args.conversations)
    report(args, kept=kept, unbounded=unbounded, cold=cold, budget=budget, every=every)


def report(
    args: argparse.Namespace,
    *,
    kept: dict[str, Any],
    unbounded: dict[str, Any],
    cold: list[str],
    budget: int,
    every: int,
) -> None:
    n, k = args.conversations, args.kept
    growth = max(kept["rss"]) - kept["base"]
    growth_all = max(unbounded["rss"]) - unbounded["base"]
    hits = sum(1 for c in kept["cached"] if c > 100)
    same = sum(1 for a, b in zip(kept["answers"], cold, strict=True) if a == b)
    rows = [
        (f"KV budget per PC: {k} / {n} conversations", f"{budget / MB:.0f} / {every / MB:.0f} MB"),
        (
            f"RSS growth over {n} conversations, both processes: budget for {k}",
            f"{growth:.0f} MB (budget on 2 PCs: {2 * budget / MB:.0f} MB)",
        ),
        (
            f"RSS growth over {n} conversations, both processes: budget for {n}",
            f"{growth_all:.0f} MB (budget on 2 PCs: {2 * every / MB:.0f} MB)",
        ),
        (f"RSS after conversation {k} / {n} (budget for {k})",
         f"{kept['rss'][k - 1]:.0f} / {kept['rss'][-1]:.0f} MB"),
        ("second turns that continued their kept KV", f"{hits} of {n}"),
        ("second answers the same as without kept KV", f"{same} of {n}"),
    ]  # fmt: skip
    out = {"kept": kept, "unbounded": unbounded, "cold": cold, "budget": budget}
    print_figures("KV memory: SmolLM2-135M int8 in f32, coordinator + 1 worker", rows, out)


if __name__ == "__main__":
    main()
