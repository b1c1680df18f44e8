"""API benchmark: streamed chat completions through ``fleetgui serve``'s server against the same
streams driven through the ``Pipeline`` directly, side by side in one run.

A 2-stage export (by default the demo's SmolLM2-135M-Instruct, int8) on a fleet of this process
(stage 0, pinned to core 0) and one worker process (stage 1, ``taskset -c 1``), PP+MB, greedy.
For 1, 2 and 4 concurrent clients, interleaved repeats of:

- direct: ``pipeline.stream(prompt, options)`` per client, the prompt rendered as the server
  renders the chat;
- API: the same chats as ``POST /v1/chat/completions`` with ``stream: true`` to an
  ``ApiServer`` on this process's event loop (the pipeline's), read by aiohttp clients on the
  same loop (so the figure includes the client's own parsing: an upper bound of the server's).

Per path: aggregate tokens/s (all clients' tokens over the wall time) and time to first token
(mean over clients: the first text chunk, or the first delta). The API's overhead per token is
(API - direct) / tokens, paired by repeat, median, in microseconds: of the wall time, and of
this process's CPU time (stage 0's compute is in both and cancels; the server's and the
client's work remain), which the other processes on the machine disturb far less.

Run: ``.venv/bin/python benchmarks/bench_api.py [--export DIR] [--repeats 5] [--tokens 64]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from common import bench_cache, print_figures

from fleetgui.api.served import ServedModel, stage_streams
from fleetgui.api.server import ApiServer, ServerConfig
from fleetgui.assembler import aopen
from fleetgui.fleet.local_fleet.fleet import LocalFleet
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.generation import Runtime, TokenDelta
from fleetgui.runtime.loader import LocalPipelineConfig
from fleetgui.runtime.ov_stage import StageConfig

log = logging.getLogger("bench_api")

QUESTIONS = (
    "Write a long story about a lighthouse keeper and a storm.",
    "Describe a walk through an old city market, with all its smells and sounds.",
    "Tell me everything you know about the history of the printing press.",
    "Write a detailed essay about the causes of the French Revolution.",
)
CLIENTS = (1, 2, 4)


def _chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


async def direct(pipe: Runtime, served: ServedModel, n: int, tokens: int) -> dict[str, float]:
    options = GenerationConfig(max_new_tokens=tokens, stop=served.prompter.stop_strings)
    prompts = [served.prompter.text(_chat(QUESTIONS[i % len(QUESTIONS)])) for i in range(n)]
    started, cpu = time.perf_counter(), time.process_time()

    async def one(prompt: str) -> tuple[int, float]:
        first = None
        count = 0
        async for item in pipe.stream(prompt, options):
            if isinstance(item, TokenDelta):
                count += len(item.token_ids)
                if first is None and item.text:
                    first = time.perf_counter()
        return count, ((first or time.perf_counter()) - started) * 1000

    done = await asyncio.gather(*(one(p) for p in prompts))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    total = sum(c for c, _ in done)
    return {
        "wall": wall,
        "cpu": cpu,
        "tokens": total,
        "ttft_ms": statistics.mean(t for _, t in done),
    }


async def through_api(session: Any, url: str, model: str, n: int, tokens: int) -> dict[str, float]:
    started, cpu = time.perf_counter(), time.process_time()

    async def one(question: str) -> tuple[int, float]:
        body = {
            "model": model,
            "messages": _chat(question),
            "temperature": 0,
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        first = None
        count = 0
        async with session.post(url + "/chat/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    count = chunk["usage"]["completion_tokens"]
                for choice in chunk["choices"]:
                    if first is None and choice["delta"].get("content"):
                        first = time.perf_counter()
        return count, ((first or time.perf_counter()) - started) * 1000

    done = await asyncio.gather(*(one(QUESTIONS[i % len(QUESTIONS)]) for i in range(n)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    total = sum(c for c, _ in done)
    return {
        "wall": wall,
        "cpu": cpu,
        "tokens": total,
        "ttft_ms": statistics.mean(t for _, t in done),
    }


async def bench(args: argparse.Namespace, export: Path, endpoint: Any, identity: Any) -> None:
    import aiohttp

    stage = StageConfig(threads=1)
    config = CoordinatorConfig(
        local=LocalPipelineConfig(stage=stage, draft_stage=stage), worker_threads=1
    )
    llm = await aopen(
        export, workers=[endpoint], identity=identity, coordinator=config, max_streams=max(CLIENTS)
    )
    pipe = llm.runtime
    served = ServedModel(llm, "bench", stage_streams=stage_streams(llm))
    server = ApiServer(served, ServerConfig(port=0, max_streams=max(CLIENTS)))
    url = await server.start()
    runs: dict[str, list[dict[str, float]]] = {}
    try:
        async with aiohttp.ClientSession() as http:
            await direct(pipe, served, 1, 8)  # warm up both paths
            await through_api(http, url, "bench", 1, 8)
            for repeat in range(args.repeats):
                for n in CLIENTS:
                    order = ("direct", "api") if repeat % 2 == 0 else ("api", "direct")
                    for path in order:
                        if path == "direct":
                            figures = await direct(pipe, served, n, args.tokens)
                        else:
                            figures = await through_api(http, url, "bench", n, args.tokens)
                        runs.setdefault(f"{path}{n}", []).append(figures)
                log.info("repeat %d done", repeat + 1)
    finally:
        await server.stop()
        await llm.aclose()
    report(runs)


def report(runs: dict[str, list[dict[str, float]]]) -> None:
    rows: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for n in CLIENTS:
        d, a = runs[f"direct{n}"], runs[f"api{n}"]
        for x, y in zip(d, a, strict=True):
            if x["tokens"] != y["tokens"]:
                log.warning(
                    "%d clients: %d tokens direct, %d via the API", n, x["tokens"], y["tokens"]
                )
        rate_d = statistics.median(r["tokens"] / r["wall"] for r in d)
        rate_a = statistics.median(r["tokens"] / r["wall"] for r in a)
        ttft_d = statistics.median(r["ttft_ms"] for r in d)
        ttft_a = statistics.median(r["ttft_ms"] for r in a)
        overhead = statistics.median(
            (y["wall"] - x["wall"]) / y["tokens"] * 1e6 for x, y in zip(d, a, strict=True)
        )
        cpu_overhead = statistics.median(
            (y["cpu"] - x["cpu"]) / y["tokens"] * 1e6 for x, y in zip(d, a, strict=True)
        )
        rows.append(
            (
                f"{n} client{'s' if n > 1 else ''} ({int(d[0]['tokens'])} tokens)",
                f"direct {rate_d:.1f} tok/s, TTFT {ttft_d:.0f} ms | API {rate_a:.1f} tok/s, "
                f"TTFT {ttft_a:.0f} ms | API overhead {overhead:+.0f} us/token of wall time "
                f"({rate_a / rate_d:.3f}x), {cpu_overhead:+.0f} us/token of this process's CPU",
            )
        )
        out[str(n)] = {
            "tokens": int(d[0]["tokens"]),
            "direct_tok_s": round(rate_d, 2),
            "api_tok_s": round(rate_a, 2),
            "direct_ttft_ms": round(ttft_d, 1),
            "api_ttft_ms": round(ttft_a, 1),
            "overhead_us_per_token": round(overhead, 1),
            "cpu_overhead_us_per_token": round(cpu_overhead, 1),
        }
    print_figures("API vs Pipeline, streamed, PP+MB, 2 stages on 2 processes", rows, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="a 2-stage export (default: the demo's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens per client")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    if args.export is None:
        from fleetgui.demo.models import export_real

        args.export = export_real()
    os.sched_setaffinity(0, {0})  # the coordinator's PC
    with LocalFleet(bench_cache() / "api", cores={"w1": (1,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        asyncio.run(bench(args, args.export, worker.endpoint, fleet.identity()))


if __name__ == "__main__":
    main()
