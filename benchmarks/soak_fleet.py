"""Soak: many rounds of concurrent streams on a real fleet, a worker killed and restarted
during it. Every stream's greedy tokens must equal its prompt's uninterrupted run (no token
lost or mixed up between streams); prints the counts and each worker's RSS at start and end.

Fleet: the demo target (SmolLM2-135M-Instruct, 2 int8 stages, ``fleetgui demo``'s export):
stage 0 on the coordinator, stage 1 on worker a, workers b and c as spares. After a third of
the rounds a is killed (``kill -9``), mid-round; the round's streams fail over to a spare and
replay. After two thirds a restarts on its port and rejoins as a spare, and the worker then
serving is killed too.

Run: ``.venv/bin/python benchmarks/soak_fleet.py [--streams 4] [--rounds 60] [--tokens 24]
[--export DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path

import psutil
from common import bench_cache

from fleetgui.assembler import aopen
from fleetgui.demo.models import export_real
from fleetgui.fleet.local_fleet.fleet import LocalFleet, LocalWorker
from fleetgui.fleet.ring.link import LinkConfig
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.loader import LocalPipelineConfig
from fleetgui.runtime.ov_stage import StageConfig

log = logging.getLogger("soak")

PROMPTS = (
    "The history of the Roman Empire began",
    "def fibonacci(n):\n",
    "List three uses of a paperclip:",
    "The capital of France is",
    "Water boils at",
    "import numpy as np\n",
)


def rss_mib(worker: LocalWorker) -> float:
    assert worker.process is not None
    return float(psutil.Process(worker.process.pid).memory_info().rss) / 2**20


async def soak(
    args: argparse.Namespace, workers: list[LocalWorker], export: Path, identity: KeyPair
) -> dict:
    stage = StageConfig(precision=args.precision)
    config = CoordinatorConfig(
        link=LinkConfig(heartbeat_interval_s=0.25, lost_after_s=1.5),
        rejoin_interval_s=0.5,
        local=LocalPipelineConfig(stage=stage, draft_stage=stage),
        worker_precision=args.precision,
    )
    llm = await aopen(
        export,
        workers=[w.endpoint for w in workers],
        identity=identity,
        coordinator=config,
        max_streams=args.streams,
    )
    session, pipe = llm.sessions[0], llm.runtime
    options = GenerationConfig(max_new_tokens=args.tokens)
    reference = {p: (await pipe.complete(p, options)).token_ids for p in PROMPTS}
    rss_start = {w.name: rss_mib(w) for w in workers}
    counts = {"streams": 0, "exact": 0, "wrong": 0, "failed": 0, "tokens": 0}
    kills: list[str] = []
    wrong: list[dict[str, object]] = []
    served: dict[str, dict[str, float]] = {}  # per serving period: rounds, RSS first and last
    started = time.monotonic()
    try:
        for round_ in range(args.rounds):
            prompts = [PROMPTS[(round_ + i) % len(PROMPTS)] for i in range(args.streams)]
            tasks = [asyncio.create_task(pipe.complete(p, options)) for p in prompts]
            if round_ in (args.rounds // 3, 2 * args.rounds // 3):
                await asyncio.sleep(0.3)  # mid-round
                serving = session.deployment.assignment.members[0].name
                victim = next(w for w in workers if w.name == serving)
                victim.kill()
                kills.append(serving)
                log.warning("round %d: killed %s", round_, serving)
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            serving = session.deployment.assignment.members[0].name
            server = next(w for w in workers if w.name == serving)
            assert server.process is not None
            rss, period = rss_mib(server), f"{server.name} (pid {server.process.pid})"
            served.setdefault(period, {"rounds": 0, "rss_mib_first": round(rss, 1)})
            served[period]["rounds"] += 1
            served[period]["rss_mib_last"] = round(rss, 1)
            for prompt, outcome in zip(prompts, outcomes, strict=True):
                counts["streams"] += 1
                if isinstance(outcome, BaseException):
                    counts["failed"] += 1
                    log.error("a stream failed: %s", outcome)
                elif outcome.token_ids == reference[prompt]:
                    counts["exact"] += 1
                    counts["tokens"] += len(outcome.token_ids)
                else:
                    counts["wrong"] += 1
                    got, want = outcome.token_ids, reference[prompt]
                    first = next(
                        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                        min(len(got), len(want)),
                    )
                    others = [p for p, ids in reference.items() if p != prompt and ids == got]
                    wrong.append({"round": round_, "first_difference": first, "other": others})
            if round_ == args.rounds // 3 + 2:  # the first victim comes back, as a spare
                index = next(i for i, w in enumerate(workers) if w.name == kills[0])
                workers[index].restart()
                rss_start[f"{kills[0]} (restarted)"] = rss_mib(workers[index])
                log.warning("round %d: restarted %s", round_, kills[0])
    finally:
        await llm.aclose()
    alive = [w for w in workers if w.running]
    return {
        "command": f"benchmarks/soak_fleet.py --streams {args.streams} --rounds {args.rounds} "
        f"--tokens {args.tokens} --precision {args.precision}"
        + (f" --export {args.export}" if args.export else ""),
        "seconds": round(time.monotonic() - started, 1),
        **counts,
        "wrong_streams": wrong,
        "precision": args.precision,
        "killed": kills,
        "failovers": list(session.failover.failovers),
        "serving": served,
        "rss_mib_start": {k: round(v, 1) for k, v in rss_start.items()},
        "rss_mib_end": {w.name: round(rss_mib(w), 1) for w in alive},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="a 2-stage export (default: the demo's)")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument(
        "--precision", default="auto", help="every stage's precision (f32, f32-dq, auto, ...)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    export = args.export or export_real()
    with LocalFleet(bench_cache() / "soak", precision=args.precision) as fleet:
        workers = fleet.start(["a", "b", "c"])  # a restarted one too is the fleet's to stop
        figures = asyncio.run(soak(args, workers, export, fleet.identity()))
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
