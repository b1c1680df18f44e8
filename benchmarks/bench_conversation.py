"""Conversations on the fleet: time to first token when the history is resent turn by turn, with
the KV kept on the stages (``fleetgui serve``'s default) and without (``--no-kv-reuse``), and
optionally llama.cpp split the same way over RPC, side by side in one run.

The demo's SmolLM2-135M-Instruct (int8, 2 stages) on this PC's stage 0 (``fleetgui serve``
pinned to core 0, one OpenVINO thread) and one worker process (stage 1, core 1, one thread); the
``openai`` client streams each request (TTFT: the request sent to its first text chunk).

- conversation: 16 turns, each a user message of about 110 tokens; the history (every earlier
  message and 16-token answer) is resent each turn, as chat clients do;
- agent: a 6,000-token prompt (``--context 8192``), then the same prompt plus about 100 tokens;
- shared: 8 new conversations whose prompts start with one 2,000-token system prompt, each
  asked once.

With ``--llama-server`` and ``--rpc-server`` (built from llama-cpp-python's sdist, see
../shared/OPENVINO-FACTS.md) the same requests go to ``llama-server --rpc`` on core 0 with
``ggml-rpc-server`` on core 1, one thread each, on an int8 (Q8_0) GGUF of the same model
(``--gguf``), its layers split 15 and 15 as fleetgui's stages are (``-ngl 16``: without it
llama-server puts every layer on the RPC server); llama-server keeps each slot's prompt and
reuses the longest common prefix.

Run: ``.venv/bin/python benchmarks/bench_conversation.py [--turns 16] [--llama-server BIN
--rpc-server BIN --gguf Q8_0.gguf]``
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import bench_cache, demo_run_args, print_figures

log = logging.getLogger("benchmarks")

N_ANSWER = 16  # tokens of each answer
READY_S = 600.0
WORDS = [
    "river",
    "mountain",
    "lantern",
    "copper",
    "violin",
    "harbor",
    "meadow",
    "thunder",
    "pepper",
    "candle",
    "orbit",
    "marble",
    "glacier",
    "saddle",
    "pocket",
    "ribbon",
    "falcon",
    "willow",
    "cactus",
    "anchor",
    "velvet",
    "summit",
]


def filler(seed: int, n_words: int) -> str:
    """Text of ``n_words`` words that differs for each ``seed`` (about 1.1 tokens a word)."""
    return " ".join(WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(WORDS)] for i in range(n_words))


@contextlib.contextmanager
def fleetgui_server(export: Path, worker: Any, identity_dir: Path, *flags: str) -> Iterator[str]:
    """``fleetgui serve`` on core 0 with stage 1 on ``worker``; its base URL."""
    with serve_process(export, worker, identity_dir, *flags) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(
    export: Path, worker: Any, identity_dir: Path, *flags: str
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``fleetgui serve`` on core 0 with stage 1 on ``worker``: its base URL and process."""
    command = [
        "taskset", "-c", "0", sys.executable, "-m", "fleetgui", "serve", str(export),
        "--workers", worker.address, "--identity", str(identity_dir), "--threads", "1",
        "--port", "0", "--max-streams", "1", "--model-name", "m", *flags,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            found = re.match(r"fleetgui serve: \S+ at (http://\S+)", line)
            if found:
                yield found.group(1), process
                break
            if not line and process.poll() is not None:
                raise RuntimeError(f"fleetgui serve exited with {process.returncode}")
        else:
            raise RuntimeError("fleetgui serve did not start")
    finally:
        process.terminate()
        process.wait(30)


@contextlib.contextmanager
def llama_server(args: argparse.Namespace, context: int) -> Iterator[str]:
    """``llama-server --rpc`` on core 0 with ``ggml-rpc-server`` on core 1."""
    rpc = subprocess.Popen(
        ["taskset", "-c", "1", args.rpc_server, "-t", "1", "-p", "50052"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = subprocess.Popen(
        [
            "taskset", "-c", "0", args.llama_server, "-m", str(args.gguf),
            "--rpc", "127.0.0.1:50052", "-ngl", "16", "-t", "1", "-np", "1", "-c", str(context),
            "--jinja",
            "--port", "8097",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import urllib.request

        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8097/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield "http://127.0.0.1:8097/v1"
    finally:
        for process in (server, rpc):
            process.terminate()
            process.wait(30)


def ttft(client: Any, messages: list[dict[str, str]]) -> tuple[float, str, int]:
    """Seconds to the first text chunk, the whole answer and its cached prompt tokens."""
    started = time.perf_counter()
    first = None
    text = ""
    cached = 0
    stream = client.chat.completions.create(
        model="m", messages=messages, temperature=0, max_tokens=N_ANSWER, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            text += chunk.choices[0].delta.content
        if chunk.usage is not None:
            details = getattr(chunk.usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", 0) or 0
    return (first or time.perf_counter()) - started, text, cached


def conversation(client: Any, turns: int) -> list[float]:
    messages: list[dict[str, str]] = []
    times = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Turn {turn}: {filler(turn, 100)}"})
        seconds, answer, cached = ttft(client, messages)
        messages.append({"role": "assistant", "content": answer})
        times.append(seconds)
        log.info("turn %d: TTFT %.3f s (%d cached)", turn + 1, seconds, cached)
    return times


def agent(client: Any) -> list[float]:
    prompt = filler(1, 5400)
    first, _, _ = ttft(client, [{"role": "user", "content": prompt}])
    again, _, cached = ttft(client, [{"role": "user", "content": prompt + filler(2, 90)}])
    log.info("agent: %.2f s, then %.3f s (%d cached)", first, again, cached)
    return [first, again]


def shared(client: Any) -> list[float]:
    system = {"role": "system", "content": filler(3, 1800)}
    return [
        ttft(client, [system, {"role": "user", "content": f"Question {i}: {filler(10 + i, 20)}"}])[
            0
        ]
        for i in range(8)
    ]


def run_all(url: str, turns: int) -> dict[str, list[float]]:
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    return {
        "conversation": conversation(client, turns),
        "agent": agent(client),
        "shared": shared(client),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--llama-server", help="llama-server binary (built with GGML_RPC)")
    parser.add_argument("--rpc-server", help="ggml-rpc-server binary")
    parser.add_argument("--gguf", type=Path, help="the same model as a GGUF file (Q8_0)")
    args = demo_run_args(parser)
    from fleetgui.fleet.local_fleet.fleet import LocalFleet

    runs: dict[str, dict[str, list[float]]] = {}
    with LocalFleet(bench_cache() / "conversation", cores={"w1": (1,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        fleet.identity()
        identity_dir = fleet.root / "coordinator"
        for name, flags in (("reuse", ()), ("no reuse", ("--no-kv-reuse",))):
            with fleetgui_server(
                args.export, worker, identity_dir, "--context", "8192", *flags
            ) as url:
                runs[name] = run_all(url, args.turns)
    if args.llama_server and args.rpc_server and args.gguf:
        with llama_server(args, 8192) as url:
            runs["llama.cpp"] = run_all(url, args.turns)
    report(runs)


def report(runs: dict[str, dict[str, list[float]]]) -> None:
    rows: list[tuple[str, str]] = []
    out: dict[str, Any] = {name: run for name, run in runs.items()}
    reuse, cold = runs["reuse"], runs["no reuse"]
    turns = len(reuse["conversation"])
    for name, run in runs.items():
        times = run["conversation"]
        picks = [1, 4, 8, 12, turns]
        rows.append(
            (f"{name}: TTFT at turns {', '.join(map(str, picks))}",
             " / ".join(f"{times[t - 1]:.2f}" for t in picks) + " s")
        )  # fmt: skip
    last_over_first = reuse["conversation"][-1] / reuse["conversation"][0]
    rows.append(("reuse: TTFT at the last turn / at turn 1", f"{last_over_first:.2f}x"))
    for name, run in runs.items():
        first, again = run["agent"]
        rows.append(
            (
                f"{name}: agent 6k prompt, then +100",
                f"{first:.2f} s, then {again:.3f} s ({again / first:.1%})",
            )
        )
        rows.append(
            (
                f"{name}: 8 new chats, one 2k system prompt: mean TTFT",
                f"{statistics.mean(run['shared']):.3f} s",
            )
        )
    gain = statistics.mean(cold["shared"]) / statistics.mean(reuse["shared"])
    rows.append(("shared system prompt: no reuse / reuse", f"{gain:.1f}x"))
    if "llama.cpp" in runs:
        worst = max(
            a / b
            for a, b in zip(reuse["conversation"], runs["llama.cpp"]["conversation"], strict=True)
        )
        rows.append(("fleetgui / llama.cpp TTFT, worst turn", f"{worst:.2f}x"))
    out["machine"] = os.uname().machine
    print_figures(
        "Conversations on the fleet: SmolLM2-135M int8, coordinator + 1 worker", rows, out
    )


if __name__ == "__main__":
    main()
