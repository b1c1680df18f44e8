"""Fleet benchmark: the distributed pipeline over real worker processes, side by side in one run.

The coordinator (this process) is pinned to core 0 and each worker to core 1 (``taskset``), one
OpenVINO thread each: two "PCs". Bench-size Llama (~245M parameters), medians of interleaved
repeats:

A. loopback: 2 stages (coordinator + 1 worker) single stream vs ``openvino_genai.LLMPipeline``
   on the monolithic export on one core (target >= 0.9); 2 concurrent streams vs 1 (target
   >= 1.85x).
B. 5 ms added per hop (a user-space delay relay in front of each worker,
   ``fleetgui.bench.delay_proxy``: this kernel has no netem): 3 stages (coordinator + 2
   workers), ring vs hub, one stream. The ring needs 3 hops a token, the hub 4.
C. ``--demo DIR``: a demo pair (``fleetgui demo-model --size small|medium``): PP+SD+MB with 2
   streams on the 2-stage fleet vs the monolithic target serving one user (genai), with the
   acceptance rate, in two layouts side by side: the demo's own (the coordinator runs the
   draft, both target stages run on the worker) and the coordinator also running target stage
   0 (``--demo-layers 0:1,1:8`` makes that one layer of the medium target's eight).

Beside the measured figures, ceilings (:mod:`ceilings`) from bare loops (:mod:`bare_loop`) on
the coordinator's core in the same repeat: part A's two stages in one process with no ring, and
part C's rounds as they ran (each round's K and accepted drafts) costed at the bare draft and
verify passes alone: the rate no coordinator could beat on this machine. genai's rate is a
decode rate (1 / time per output token), so each part also gives the fleet's decode throughput
(tokens after each stream's first, over the span from the first first token to the last
token) beside all tokens over the wall time.

Run: ``.venv/bin/python benchmarks/bench_fleet.py [--weights int4] [--tokens 128]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bare_loop import BareLoop
from bench_export import PROMPT, best_genai, genai_configs_tok_s, record_genai
from ceilings import ceiling_tok_s, speculative_rounds
from common import (
    bench_cache,
    bench_llama,
    decode_throughput,
    ensure_export,
    k_choice,
    paired,
    print_figures,
)

from fleetgui.assembler import aopen
from fleetgui.bench.links import DelayRelays
from fleetgui.demo.models import DEMO_WEIGHTS, DRAFT_WEIGHTS
from fleetgui.fleet.local_fleet.fleet import LocalFleet, LocalWorker
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.auto_k import K_MAX, AutoK
from fleetgui.runtime.loader import LocalPipelineConfig
from fleetgui.runtime.metrics import SpeculationRound, StageTiming, TransferTiming
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.pipeline import Pipeline

VERIFY_PASSES = 16  # bare passes timed per width
BARE_PROMPT = 40  # tokens of the bare loops' prompt (ids 5, 6, ...: only their count matters)
PROMPTS = (
    PROMPT,
    "class LinkedList:\n    def __init__(self):\n        self.head = None\n\n    def append(",
)


def fleet_root() -> Path:
    """The workers' homes and the coordinator's key, kept between runs."""
    return bench_cache() / "fleet"


@contextlib.contextmanager
def fleet_workers(names: list[str], *, cpu: int = 1) -> Iterator[list[LocalWorker]]:
    """A worker process per name, each on core ``cpu`` with one OpenVINO thread."""
    with LocalFleet(fleet_root(), precision="auto", cores=dict.fromkeys(names, (cpu,))) as fleet:
        yield fleet.start(names)


async def fleet_run(
    identity: KeyPair,
    endpoints: list[WorkerEndpoint],
    export: Path,
    n_tokens: int,
    n_streams: int,
    *,
    topology: str = "ring",
    draft: Path | None = None,
    k: int | None = None,
    local_stages: int = 1,
    new_auto_k: Callable[[], AutoK] = AutoK,
) -> dict[str, Any]:
    """One timed generation of ``n_streams`` concurrent requests on a fresh session: rates,
    TTFT and acceptance, and from the metrics the decode passes' median stage compute
    (``stage_ms``) and ring time besides it (``hop_ms``) and each stream's speculative rounds
    as (K, accepted) (``rounds``)."""
    stage = StageConfig(threads=1)
    config = CoordinatorConfig(
        local_stages=local_stages,
        local=LocalPipelineConfig(stage=stage, draft_stage=stage),
        wiring=Wiring(topology),
        worker_threads=1,
    )
    llm = await aopen(
        export,
        workers=endpoints,
        draft=draft,
        identity=identity,
        coordinator=config,
        max_streams=max(n_streams, 1),
    )
    try:
        pipe = llm.runtime
        assert isinstance(pipe, Pipeline)
        pipe.new_auto_k = new_auto_k
        speculative = draft is not None
        await pipe.complete(
            "warm up", GenerationConfig(max_new_tokens=4, k=("auto" if speculative else "off"))
        )
        options = GenerationConfig(
            max_new_tokens=n_tokens, k=(("auto" if k is None else k) if speculative else "off")
        )
        stage_ms: dict[int, list[float]] = {}
        hop_ms: list[float] = []
        rounds: dict[int, list[tuple[int, int]]] = {}

        def on_event(event: object) -> None:
            if isinstance(event, StageTiming) and event.positions == 1:
                stage_ms.setdefault(event.stage, []).append(event.compute_ms)
            elif isinstance(event, TransferTiming):
                hop_ms.append(event.ms)
            elif isinstance(event, SpeculationRound):
                rounds.setdefault(event.stream_id, []).append((event.k, event.accepted))

        pipe.metrics.subscribe(on_event)
        started = time.perf_counter()
        results = await asyncio.gather(
            *(pipe.complete(PROMPTS[i % len(PROMPTS)], options) for i in range(n_streams))
        )
        wall = time.perf_counter() - started
    finally:
        await llm.aclose()
    accepted = [r.acceptance_rate for r in results if r.acceptance_rate is not None]
    return {
        "aggregate": sum(len(r.token_ids) for r in results) / wall,
        "decode_aggregate": decode_throughput(results),
        "per_stream": statistics.mean(r.tokens_per_s for r in results),
        "ttft_ms": statistics.mean(r.ttft_ms for r in results),
        "acceptance": statistics.mean(accepted) if accepted else 0.0,
        "stage_ms": {k: statistics.median(v) for k, v in sorted(stage_ms.items())},
        "hop_ms": statistics.median(hop_ms) if hop_ms else 0.0,
        "rounds": list(rounds.values()),
    }


def part_a(identity: KeyPair, args: argparse.Namespace, model: Path) -> list[tuple[str, str]]:
    tag = args.layers.replace(":", "-").replace(",", "_")
    two = ensure_export(
        model, f"bench-2stage-{args.weights}-{tag}", layers=args.layers, weights=args.weights
    )

    mono = ensure_export(model, f"bench-mono-{args.weights}", monolithic=True, weights=args.weights)
    # the same two stages in one synchronous loop on the coordinator's core: no ring at all
    bare = BareLoop(two, list(range(5, 5 + BARE_PROMPT)), args.tokens)
    runs: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        runs.setdefault(name, []).append(value)

    with fleet_workers(["w1"]) as workers:
        endpoints = [w.endpoint for w in workers]
        for _ in range(args.repeats):
            record_genai(runs, genai_configs_tok_s(mono, 1, args.tokens, args.weights))
            record("bare", 1000.0 / statistics.mean(bare.decode_steps_ms(args.tokens)))
            one = asyncio.run(fleet_run(identity, endpoints, two, args.tokens, 1))
            record("pp1", one["per_stream"])  # decode rate, as genai's
            record("pp1_all", one["aggregate"])  # all tokens / wall, as pp2's
            record("ttft", one["ttft_ms"])
            for stage, ms in one["stage_ms"].items():
                record(f"stage{stage}_ms", ms)
            record("hop_ms", one["hop_ms"])
            two_streams = asyncio.run(fleet_run(identity, endpoints, two, args.tokens, 2))
            record("pp2", two_streams["aggregate"])
            record("pp2_decode", two_streams["decode_aggregate"])
    med = {k: statistics.median(v) for k, v in runs.items()}
    genai_name, med["genai"] = best_genai(runs)

    FIGURES["A"] = runs
    return [
        (f"A genai monolithic, 1 core, its best ({genai_name})", f"{med['genai']:.1f} tok/s"),
        (
            "A fleet 2 stages (coord + 1 worker), 1 stream",
            f"{med['pp1']:.1f} tok/s (TTFT {med['ttft']:.0f} ms)",
        ),
        ("A ratio fleet / genai, paired (target >= 0.9)", f"{paired(runs, 'pp1', genai_name):.3f}"),
        (
            "A per decode step: stage compute, ring besides it",
            f"{med['stage0_ms']:.2f} + {med['stage1_ms']:.2f} ms, {med['hop_ms']:.2f} ms",
        ),
        ("A bare 2-stage loop on one core (no ring)", f"{med['bare']:.1f} tok/s"),
        (
            "A ceiling without a ring: bare loop / genai, paired",
            f"{paired(runs, 'bare', genai_name):.3f}",
        ),
        ("A fleet 1 stream, all tokens / wall", f"{med['pp1_all']:.1f} tok/s"),
        ("A fleet 2 streams, all tokens / wall", f"{med['pp2']:.1f} tok/s"),
        (
            "A ratio 2 streams / 1, paired (target >= 1.85)",
            f"{paired(runs, 'pp2', 'pp1_all'):.3f}x",
        ),
        ("A fleet 2 streams, decode throughput", f"{med['pp2_decode']:.1f} tok/s"),
        (
            "A the same ratio by decode throughput (prefill left out)",
            f"{paired(runs, 'pp2_decode', 'pp1'):.3f}x",
        ),
    ]


def part_b(identity: KeyPair, args: argparse.Namespace, model: Path) -> list[tuple[str, str]]:
    three = ensure_export(
        model, f"bench-3stage-{args.weights}", layers="0:6,6:11,11:16", weights=args.weights
    )
    runs: dict[str, list[float]] = {"ring": [], "hub": [], "ring0": [], "hub0": []}
    tokens = max(16, args.tokens // 2)
    with (
        fleet_workers(["w1", "w2"]) as workers,
        DelayRelays(args.delay_ms) as relays,
    ):
        delayed = relays.front(workers)
        direct = [w.endpoint for w in workers]
        for _ in range(args.repeats):
            for name, endpoints, topology in (
                ("ring", delayed, "ring"),
                ("hub", delayed, "hub"),
                ("ring0", direct, "ring"),
                ("hub0", direct, "hub"),
            ):
                result = asyncio.run(
                    fleet_run(identity, endpoints, three, tokens, 1, topology=topology)
                )
                runs[name].append(result["per_stream"])
    med = {k: statistics.median(v) for k, v in runs.items()}
    FIGURES["B"] = runs
    ms = {k: 1000 / v for k, v in med.items()}
    return [
        (
            f"B ring, {args.delay_ms:g} ms per hop (3 hops/token)",
            f"{med['ring']:.1f} tok/s ({ms['ring']:.1f} ms/token)",
        ),
        (
            f"B hub, {args.delay_ms:g} ms per hop (4 hops/token)",
            f"{med['hub']:.1f} tok/s ({ms['hub']:.1f} ms/token)",
        ),
        ("B ratio ring / hub", f"{med['ring'] / med['hub']:.2f}x"),
        (
            "B added ms/token vs no delay: ring, hub",
            f"{ms['ring'] - ms['ring0']:.1f} ms, {ms['hub'] - ms['hub0']:.1f} ms "
            f"(expected {3 * args.delay_ms:g}, {4 * args.delay_ms:g})",
        ),
    ]


#: Part C's layouts: how many target stages the coordinator runs beside the draft, and a label.
#: The demo runs none (``fleetgui.demo.start``): the draft and the generation loop already keep
#: one PC busy, and with stage 0 beside them the coordinator's core was the bottleneck: 2 streams,
#: K auto, 5 repeats: 406 vs 324 tok/s (per-thread CPU time on the coordinator per round of
#: K = 3: the draft 3.2 ms, stage 0 1.3 ms, the loop 1.2 ms; the worker's core was 50 % idle).
DEMO_LAYOUTS = {
    "mb2_draft_only": (0, "coordinator drafts only"),
    "mb2_stage0": (1, "coordinator + stage 0"),
}


def record_ceilings(
    runs: dict[str, list[float]],
    rounds: dict[str, list[list[tuple[int, int]]]],
    layout_of: dict[str, str],
    bare_draft: BareLoop,
    bare_target: BareLoop,
) -> None:
    """Time the bare passes the variants' rounds used and add each variant's ceiling (the
    aggregate tok/s of those rounds with nothing but the passes taking time, :mod:`ceilings`)
    to ``runs``, as ``<variant>_ceiling``."""
    widths = {1, 5} | {k + 1 for streams in rounds.values() for s in streams for k, _ in s}
    draft_ms = bare_draft.pass_ms(1, VERIFY_PASSES)[0]
    verify = {n: bare_target.pass_ms(n, VERIFY_PASSES) for n in sorted(widths)}
    runs.setdefault("draft_pass_ms", []).append(draft_ms)
    for n in (1, 5):
        runs.setdefault(f"verify{n}_ms", []).append(sum(verify[n]))
    for name, streams in rounds.items():
        on_coordinator = DEMO_LAYOUTS[layout_of[name]][0]
        where = {
            n: [("coordinator" if i < on_coordinator else "worker", ms) for i, ms in enumerate(v)]
            for n, v in verify.items()
        }
        work, tokens = [], 0
        for stream in streams:
            stream_work, stream_tokens = speculative_rounds(stream, draft_ms, where)
            work.append(stream_work)
            tokens += stream_tokens
        runs.setdefault(f"{name}_ceiling", []).append(ceiling_tok_s(work, tokens))


def part_c(identity: KeyPair, args: argparse.Namespace) -> list[tuple[str, str]]:
    from fleetgui.training.toy_pair import load_pair

    pair = load_pair(args.demo)
    tag = args.demo_layers.replace(":", "-").replace(",", "_") if args.demo_layers else "even"
    split = {"layers": args.demo_layers} if args.demo_layers else {"stages": 2}
    weights = args.demo_weights
    # the small pair's exports keep their earlier names; other sizes' carry theirs
    size = pair.info["size"]
    prefix = "demo" if size == "small" else f"demo-{size}"
    target2 = ensure_export(
        pair.target_dir, f"{prefix}-target-2stage-{tag}-{weights}", weights=weights, **split
    )
    mono = ensure_export(
        pair.target_dir, f"{prefix}-target-mono-{weights}", monolithic=True, weights=weights
    )
    draft = ensure_export(pair.draft_dir, f"{prefix}-draft-1s", stages=1, weights=DRAFT_WEIGHTS)
    ks = {text: k_choice(text) for text in args.demo_k.split(",")}
    layouts = args.demo_layouts.split(",") if args.demo_layouts else list(DEMO_LAYOUTS)
    # one variant per layout and K; a single K keeps the layout's name as the figure's key
    variants = [(layout, k) for layout in layouts for k in ks]
    names = [layout if len(ks) == 1 else f"{layout}_k{k}" for layout, k in variants]
    layout_of = {name: layout for name, (layout, _) in zip(names, variants, strict=True)}
    runs: dict[str, list[float]] = {}
    # the draft and the target's two stages in bare loops on the coordinator's core, for the
    # ceilings: the same passes as the runs' rounds, with nothing around them
    bare_prompt = list(range(5, 5 + BARE_PROMPT))
    bare_draft = BareLoop(draft, bare_prompt, 32)
    bare_target = BareLoop(target2, bare_prompt, (K_MAX + 1) * VERIFY_PASSES)
    with fleet_workers(["w1"]) as workers:
        endpoints = [w.endpoint for w in workers]
        for index in range(args.repeats):
            record_genai(runs, genai_configs_tok_s(mono, 1, args.tokens, weights))
            order = list(zip(names, variants, strict=True))
            shift = index % len(order)  # rotate which variant runs first
            rounds: dict[str, list[list[tuple[int, int]]]] = {}
            for name, (layout, k_text) in order[shift:] + order[:shift]:
                fixed_k, new_auto_k = ks[k_text]
                result = asyncio.run(
                    fleet_run(
                        identity,
                        endpoints,
                        target2,
                        args.tokens,
                        args.demo_streams,
                        draft=draft,
                        k=fixed_k,
                        local_stages=DEMO_LAYOUTS[layout][0],
                        new_auto_k=new_auto_k,
                    )
                )
                runs.setdefault(name, []).append(result["aggregate"])
                runs.setdefault(f"{name}_decode", []).append(result["decode_aggregate"])
                runs.setdefault(f"{name}_acceptance", []).append(result["acceptance"])
                rounds[name] = result["rounds"]
            record_ceilings(runs, rounds, layout_of, bare_draft, bare_target)
    med = {key: statistics.median(v) for key, v in runs.items()}
    genai_name, med["genai"] = best_genai(runs)
    FIGURES["C"] = runs
    rows = [
        (f"C demo target monolithic ({genai_name}), 1 user", f"{med['genai']:.1f} tok/s"),
        (
            "C bare passes on one core: a draft step; the target's 2 stages, 1 and 5 positions",
            f"{med['draft_pass_ms']:.3f} ms; "
            f"{med['verify1_ms']:.3f} ms, {med['verify5_ms']:.3f} ms",
        ),
    ]
    for name, (layout, k_text) in zip(names, variants, strict=True):
        label = DEMO_LAYOUTS[layout][1]
        ceiling = paired(runs, f"{name}_ceiling", genai_name)
        decode = paired(runs, f"{name}_decode", genai_name)
        rows += [
            (
                f"C demo PP+SD+MB, {args.demo_streams} streams, K {k_text}, {label}",
                f"{med[name]:.1f} tok/s aggregate, acceptance {med[name + '_acceptance']:.1%}",
            ),
            (
                f"C ratio, K {k_text}, {label}"
                + (" (target >= 2.0; paper 1.79)" if args.demo_streams == 2 else ""),
                f"{med[name] / med['genai']:.2f}x",
            ),
            (
                f"C decode throughput (prefill left out), K {k_text}, {label}",
                f"{med[name + '_decode']:.1f} tok/s, {decode:.2f}x genai (paired)",
            ),
            (
                f"C ceiling of those rounds (passes only, no messages), K {k_text}, {label}",
                f"{med[name + '_ceiling']:.1f} tok/s, {ceiling:.2f}x genai (paired)",
            ),
        ]
    return rows


FIGURES: dict[str, Any] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weights", default="int4")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--layers", default="0:9,9:16", help="part A's 2-stage split")
    parser.add_argument("--demo-layers", help="part C's 2-stage split (default: even)")
    parser.add_argument("--parts", default="AB", help="which parts to run (A, B, C)")
    parser.add_argument("--demo", type=Path, help="demo pair folder for part C")
    parser.add_argument(
        "--demo-k",
        default="auto",
        help="part C's K: a number, auto or auto-unbraked; several, comma-separated, run "
        "side by side (e.g. auto,auto-unbraked,4)",
    )
    parser.add_argument(
        "--demo-streams", type=int, default=2, help="part C's concurrent streams (the target's)"
    )
    parser.add_argument(
        "--demo-layouts",
        help=f"part C's layouts, comma-separated (default: all of {', '.join(DEMO_LAYOUTS)})",
    )
    parser.add_argument(
        "--demo-weights",
        default=DEMO_WEIGHTS,
        help="part C's target weights (the demo's); the draft is as in the demo",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.sched_setaffinity(0, {0})  # the coordinator's PC
    identity = LocalFleet(fleet_root()).identity()
    rows: list[tuple[str, str]] = []
    model = bench_llama()
    if "A" in args.parts:
        rows += part_a(identity, args, model)
    if "B" in args.parts:
        rows += part_b(identity, args, model)
    if "C" in args.parts:
        if args.demo is None:
            raise SystemExit("part C needs --demo DIR (build it with fleetgui demo-model)")
        rows += part_c(identity, args)
    models = [f"bench Llama {args.weights}"] if set(args.parts) & {"A", "B"} else []
    if "C" in args.parts:
        models.append(f"demo pair {args.demo_weights} ({args.demo.name})")
    print_figures(
        f"fleet benchmark: {', '.join(models)}, coordinator on core 0, workers on core 1, "
        f"1 thread each, {args.tokens} new tokens, median of {args.repeats}",
        rows,
        {k: {n: [round(x, 3) for x in v] for n, v in r.items()} for k, r in FIGURES.items()},
    )


if __name__ == "__main__":
    main()
