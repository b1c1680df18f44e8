"""Replicas benchmark: 2 users on 2 one-core PCs, side by side in one run, interleaved repeats.

The demo target (SmolLM2-135M-Instruct, int8 weights) served three ways to the same 2 concurrent
greedy streams, each PC being a worker process pinned to its own core (``taskset``) with one
OpenVINO thread:

* ``copies``: a whole copy (a 1-stage export) on each worker, one stream on each
  (``fleet.session.replicas``), each worker chaining its decode steps itself (DECODE);
* ``copies, a request a step``: the same with one coordinator request per token, as before
  DECODE;
* ``pipeline``: one 2-stage pipeline over both workers, the 2 streams interleaved (PP+MB);
* ``genai x2``: two independent ``openvino_genai.LLMPipeline`` processes on the monolithic
  export, one per core, one stream each, at the better (by median) of the plugin's default
  precision and f32; compiled and warmed up once, then run once a repeat: the ceiling copies
  aim at (goal: within 10 %).

Each rate is all tokens of both streams over the wall time from the first request to the last
token; medians over the repeats, ratios paired within each. Beside the rates, the CPU time a
token of every process a layout runs (its workers and the coordinator, or both genai
processes): on a machine other work shares, wall rates move with that work, while the CPU a
token costs tells what each layout would give on two cores of its own.

Run: ``.venv/bin/python benchmarks/bench_replicas.py [--tokens 128] [--repeats 3]
[--skip stepwise pipeline]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import bench_cache, paired, print_figures

from fleetgui.assembler import aopen
from fleetgui.demo.models import export_real
from fleetgui.fleet.local_fleet.fleet import LocalFleet, LocalWorker
from fleetgui.fleet.local_fleet.worker_process import pinned
from fleetgui.fleet.ring.route import RouteConfig
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.generation import GenerationResult

log = logging.getLogger("bench_replicas")

PROMPTS = (  # raw continuations (an instruction alone makes the Instruct model end at once)
    "The history of the Roman Empire began",
    "def fibonacci(n):\n",
)
GENAI_SCRIPT = """
import sys, time, openvino_genai
path, prompt, n, hint = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
props = {"INFERENCE_NUM_THREADS": 1, **({"INFERENCE_PRECISION_HINT": hint} if hint else {})}
pipe = openvino_genai.LLMPipeline(path, "CPU", **props)
config = openvino_genai.GenerationConfig()
config.max_new_tokens = n
config.min_new_tokens = n
config.do_sample = False
pipe.generate("warm up", openvino_genai.GenerationConfig(max_new_tokens=4))
print("ready", flush=True)
while sys.stdin.readline().strip() == "go":
    result = pipe.generate([prompt], config)
    print(len(result.perf_metrics.raw_metrics.m_new_token_times), time.perf_counter(), flush=True)
"""


def monolithic_export() -> Path:
    """SmolLM2 exported whole by optimum-intel, as openvino_genai expects it; optimum reads no
    GGUF, so the GGUF goes through a transformers folder first."""
    from fleetgui.demo.smollm2 import fetch_smollm2
    from fleetgui.export.exporter import ExportRequest, export_model

    hf = bench_cache() / "smollm2-hf"
    if not (hf / "config.json").exists():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = fetch_smollm2()
        for loader in (AutoModelForCausalLM, AutoTokenizer):
            loader.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(hf)
    out = bench_cache() / "smollm2-mono-int8"
    export_model(ExportRequest(hf, out, monolithic=True, weights="int8"))
    return out


def whole_export() -> Path:
    """The demo target in one stage: what a copy runs (one compiled model a token, not two)."""
    from fleetgui.demo.smollm2 import fetch_smollm2
    from fleetgui.export.exporter import ExportRequest, export_model

    out = bench_cache() / "smollm2-1stage-int8"
    export_model(ExportRequest(fetch_smollm2(), out, stages=1, weights="int8"))
    return out


CPU_SHARE: dict[str, list[float]] = {}  # the coordinator's CPU time over the wall time, per run
# CPU time a token of every process serving the streams (workers and coordinator, or both genai
# processes), per run: what a layout costs whatever else the machine runs meanwhile, which wall
# rates on a shared machine cannot tell apart from other people's load
CPU_PER_TOKEN: dict[str, list[float]] = {}


def process_cpu_s(pid: int) -> float:
    """CPU time (user and system, all threads) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def fleet_rate(pipeline: Any, tokens: int, name: str, pids: list[int]) -> float:
    """Tokens/s of both prompts at once; records the coordinator's share of a core meanwhile
    (this machine has no third PC for it: it takes that time from the workers' two cores) and
    the CPU time a token of the coordinator and the workers ``pids``."""
    options = GenerationConfig(max_new_tokens=tokens)
    await asyncio.gather(
        *(pipeline.complete("warm up", GenerationConfig(max_new_tokens=4)) for _ in PROMPTS)
    )
    started, cpu = time.perf_counter(), time.process_time()
    workers_cpu = sum(process_cpu_s(pid) for pid in pids)
    results: list[GenerationResult] = await asyncio.gather(
        *(pipeline.complete(p, options) for p in PROMPTS)
    )
    wall = time.perf_counter() - started
    coordinator = time.process_time() - cpu
    CPU_SHARE.setdefault(name, []).append(coordinator / wall)
    count = sum(len(r.token_ids) for r in results)
    workers_cpu = sum(process_cpu_s(pid) for pid in pids) - workers_cpu
    CPU_PER_TOKEN.setdefault(name, []).append((coordinator + workers_cpu) * 1000 / count)
    CPU_PER_TOKEN.setdefault(f"{name}: its workers", []).append(workers_cpu * 1000 / count)
    return count / wall


async def copies_rate(
    identity: KeyPair, workers: list[LocalWorker], export: Path, n: int, name: str
) -> float:
    config = CoordinatorConfig(route=RouteConfig(worker_decode=name == "copies"))
    endpoints = [w.endpoint for w in workers]
    llm = await aopen(
        export, workers=endpoints, layout="replicas", identity=identity, coordinator=config
    )
    pids = [w.process.pid for w in workers if w.process is not None]
    try:
        return await fleet_rate(llm.runtime, n, name, pids)
    finally:
        await llm.aclose()


async def pipeline_rate(
    identity: KeyPair, workers: list[LocalWorker], export: Path, n: int
) -> float:
    llm = await aopen(
        export,
        workers=[w.endpoint for w in workers],
        identity=identity,
        coordinator=CoordinatorConfig(local_stages=0),
    )
    pids = [w.process.pid for w in workers if w.process is not None]
    try:
        return await fleet_rate(llm.runtime, n, "pipeline", pids)
    finally:
        await llm.aclose()


class GenaiPair:
    """Two independent genai processes, one per core, kept between runs (compiled and warmed up
    once); ``hint``: an inference precision (the plugin's default if empty)."""

    def __init__(self, mono: Path, n: int, hint: str = "") -> None:
        self.processes = [
            subprocess.Popen(
                [
                    *pinned([core]),
                    *(sys.executable, "-c", GENAI_SCRIPT),
                    *(str(mono), p, str(n), hint),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for core, p in enumerate(PROMPTS)
        ]
        for process in self.processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                self.close()
                raise RuntimeError("a genai process did not start")

    def rate(self, name: str) -> float:
        """Tokens/s of both processes' prompts, started together; records their CPU time a
        token under ``name``."""
        cpu = sum(process_cpu_s(p.pid) for p in self.processes)
        started = time.perf_counter()
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        ends = []
        for process in self.processes:
            assert process.stdout is not None
            count, end = process.stdout.readline().split()
            ends.append((int(count), float(end)))
        tokens = sum(count for count, _ in ends)
        used = sum(process_cpu_s(p.pid) for p in self.processes) - cpu
        CPU_PER_TOKEN.setdefault(name, []).append(used * 1000 / tokens)
        return tokens / (max(end for _, end in ends) - started)

    def close(self) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError, ValueError):
                assert process.stdin is not None
                process.stdin.close()
            process.wait(60)


STEPWISE = "copies, a request a step"


def run_repeats(
    args: argparse.Namespace,
    identity: KeyPair,
    workers: list[LocalWorker],
    pairs: dict[str, GenaiPair],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Every layout once a repeat, genai first in every other repeat; the rates by layout and
    genai's by precision."""
    export, whole = export_real("int8"), whole_export()
    runs: dict[str, list[float]] = {"copies": [], STEPWISE: [], "pipeline": [], "genai x2": []}
    genai: dict[str, list[float]] = {hint: [] for hint in pairs}

    def genai_once() -> None:
        for hint, pair in pairs.items():
            genai[hint].append(pair.rate(f"genai {hint}"))

    for repeat in range(args.repeats):
        if repeat % 2:
            genai_once()
        for name in ("copies", STEPWISE):
            if name == STEPWISE and "stepwise" in args.skip:
                continue
            runs[name].append(asyncio.run(copies_rate(identity, workers, whole, args.tokens, name)))
        if "pipeline" not in args.skip:
            runs["pipeline"].append(
                asyncio.run(pipeline_rate(identity, workers, export, args.tokens))
            )
        if not repeat % 2:
            genai_once()
        latest = {k: round(v[-1], 1) for k, v in {**runs, **genai}.items() if v}
        log.warning("repeat %d: %s", repeat + 1, latest)
    return runs, genai


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["stepwise", "pipeline"],
        help="leave these layouts out (copies and genai x2 always run)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    mono = monolithic_export()
    names = ["a", "b"]
    fleet = LocalFleet(bench_cache() / "replicas", cores={n: (i,) for i, n in enumerate(names)})
    pairs: dict[str, GenaiPair] = {}
    try:
        workers = fleet.start(names)
        for hint in ("default", "f32"):  # the better one is the bar
            pairs[hint] = GenaiPair(mono, args.tokens, "" if hint == "default" else hint)
        runs, genai = run_repeats(args, fleet.identity(), workers, pairs)
    finally:
        for pair in pairs.values():
            pair.close()
        fleet.stop()
    report(args, runs, genai)


def report(
    args: argparse.Namespace, runs: dict[str, list[float]], genai: dict[str, list[float]]
) -> None:
    # the configuration with the better median, not the better figure of each repeat (which
    # noise would inflate)
    best = max(genai, key=lambda hint: statistics.median(genai[hint]))
    runs["genai x2"] = genai[best]
    med = {name: statistics.median(values) for name, values in runs.items() if values}
    rows = [(name, f"{value:.1f} tok/s") for name, value in med.items()]
    rows.append(("genai precision", f"{best} (of {', '.join(genai)})"))
    # ratios paired within each repeat: the machine's load drifts between repeats
    rows.append(("copies / genai x2", f"{paired(runs, 'copies', 'genai x2'):.2f}x"))
    for other, label in (("pipeline", "pipeline"), (STEPWISE, "a request a step")):
        if runs[other]:
            rows.append((f"copies / {label}", f"{paired(runs, 'copies', other):.2f}x"))
    for name, shares in CPU_SHARE.items():
        rows.append((f"coordinator CPU, {name}", f"{statistics.median(shares):.0%} of a core"))
    costs = {**CPU_PER_TOKEN, "genai x2": CPU_PER_TOKEN[f"genai {best}"]}
    for name, values in costs.items():
        rows.append((f"CPU a token, {name}", f"{statistics.median(values):.2f} ms"))
    # what the rates would be on two cores running nothing else: the inverse ratio of costs
    rows.append(("genai x2 / copies, CPU a token", f"{paired(costs, 'genai x2', 'copies'):.3f}x"))
    figures = {
        "runs": runs,
        "median": med,
        "coordinator_cpu_share": CPU_SHARE,
        "cpu_ms_per_token": CPU_PER_TOKEN,
        "genai_by_precision": genai,
        "tokens": args.tokens,
        "repeats": args.repeats,
    }
    print_figures("2 users on 2 one-core workers, SmolLM2-135M int8", rows, figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
