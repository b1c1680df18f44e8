"""Where a whole-model copy's decode step goes, against openvino_genai, in ONE process on one core.

Every variant decodes the same greedy continuation of the same prompt, one OpenVINO inference
thread each, all compiled in this process (run it under ``taskset -c N``); the variants take
turns, in a rotated order each round, so the machine's drifting load hits them alike. Figures
per round: the 10th percentile and the median of the decode steps' wall times (the 10th
percentile is the step's cost when nothing else ran on the core meanwhile, the figure to
compare on a busy machine), and the whole generation's CPU time in this process (all its
threads) over its tokens; medians over the rounds, and ratios to the first variant paired per
round:

* ``genai``: ``openvino_genai.LLMPipeline`` on the monolithic export (default backend and
  precision, and the ``f32`` hint), timed from its own token timestamps;
* ``raw <model> <props>``: a bare InferRequest loop (inputs prepared in advance, top-1 read back),
  i.e. OpenVINO's compute and nothing else, on the copy's 1-stage export (``stage``) or the
  monolithic export (``mono``), compiled with the worker's properties (``fleet``: f32 with
  dynamic quantization) or others;
* ``LocalStage``: what a worker's DECODE step runs, minus the network:
  ``LocalStage.forward_blocking`` with a greedy head, through ``LocalRoute.run_blocking``.

Run: ``taskset -c 1 .venv/bin/python benchmarks/bench_copy_breakdown.py [--tokens 128]
[--rounds 5] [--only NAME ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from common import bench_cache

from fleetgui.runtime.ov_stage import LocalStage, StageConfig, infer_now, input_dtypes
from fleetgui.runtime.route import LocalRoute
from fleetgui.runtime.stage import ForwardRequest, GreedyHead
from fleetgui.shard import Shard

PROMPT = "The history of the Roman Empire began"
FLEET = StageConfig(threads=1, precision="f32-dq").ov_properties()
PROPS: dict[str, dict[str, Any]] = {
    "fleet": FLEET,
    "default": {"INFERENCE_NUM_THREADS": 1},  # what genai passes the plugin by default
    "f32": {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"},
    "fleet+pin": {**FLEET, "ENABLE_CPU_PINNING": True},
    "fleet-latency": {k: v for k, v in FLEET.items() if k != "PERFORMANCE_HINT"},
    "fleet+kvf16": {**FLEET, "KV_CACHE_PRECISION": "f16"},
    "fleet+kvf32": {**FLEET, "KV_CACHE_PRECISION": "f32"},
    "fleet-dq": {**FLEET, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0},
}

#: generate that many tokens after the prompt ids: the decode steps' wall times in ms, and the
#: tokens
Decode = Callable[[list[int], int], tuple[list[float], list[int]]]


def genai_variant(mono: Path, hint: str, backend: str = "") -> Decode:
    import openvino_genai

    props: dict[str, Any] = {"INFERENCE_NUM_THREADS": 1}
    if hint:
        props["INFERENCE_PRECISION_HINT"] = hint
    if backend:
        props["ATTENTION_BACKEND"] = backend
    pipe = openvino_genai.LLMPipeline(str(mono), "CPU", **props)

    def run(prompt: list[int], n: int) -> tuple[list[float], list[int]]:
        config = openvino_genai.GenerationConfig()
        config.max_new_tokens = config.min_new_tokens = n
        config.do_sample = False
        ids = ov.Tensor(np.array([prompt], dtype=np.int64))
        mask = ov.Tensor(np.ones((1, len(prompt)), dtype=np.int64))
        result = pipe.generate(openvino_genai.TokenizedInputs(ids, mask), config)
        stamps = result.perf_metrics.raw_metrics.m_new_token_times  # ms, one per token
        return list(np.diff(np.asarray(stamps, dtype=np.float64))), list(result.tokens[0])

    return run


def raw_variant(model: Path, props: dict[str, Any]) -> Decode:
    core = ov.Core()
    compiled = core.compile_model(str(model), "CPU", props)
    dtypes = input_dtypes(compiled)
    top1 = "top1_ids" in {p.get_any_name() for p in compiled.outputs}

    def run(prompt: list[int], n: int) -> tuple[list[float], list[int]]:
        request = compiled.create_infer_request()
        total = len(prompt) + n
        mask = np.ones((1, total), dtype=np.int64)
        beam = np.zeros(1, dtype=np.int32)
        positions = np.arange(total, dtype=np.int64)[None, :]

        def step(ids: list[int], at: int) -> int:
            infer_now(
                request,
                {
                    "input_ids": np.array([ids], dtype=np.int64),
                    "attention_mask": mask[:, : at + len(ids)],
                    "position_ids": positions[:, at : at + len(ids)],
                    "beam_idx": beam,
                },
                dtypes,
            )
            if top1:
                return int(request.get_tensor("top1_ids").data[0, -1])
            return int(request.get_tensor("logits").data[0, -1].argmax())

        token, at, out, ms = step(prompt, 0), len(prompt), [], []
        for _ in range(n - 1):
            out.append(token)
            started = time.perf_counter()
            token = step([token], at)
            ms.append((time.perf_counter() - started) * 1000)
            at += 1
        return ms, [*out, token]

    return run


def stage_variant(export: Path, config: StageConfig) -> Decode:
    from fleetgui.export.manifest import read_manifest

    manifest = read_manifest(export)
    stage = LocalStage(
        0,
        Shard("m", 0, manifest.n_layers, manifest.n_layers),
        [export / p for p in manifest.stages[0].model_files],
        config,
    )
    route = LocalRoute([stage])
    counter = iter(range(1, 1 << 30))

    def run(prompt: list[int], n: int) -> tuple[list[float], list[int]]:
        sid = next(counter)
        head = GreedyHead()
        ids = np.array([prompt], dtype=np.int64)
        token = route.run_blocking(ForwardRequest(sid, ids, head=head)).tokens[-1]
        out, ms = [], []
        for _ in range(n - 1):
            out.append(token)
            started = time.perf_counter()
            result = route.run_blocking(
                ForwardRequest(sid, np.array([[token]], dtype=np.int64), head=head)
            )
            token = result.tokens[-1]
            ms.append((time.perf_counter() - started) * 1000)
        asyncio.run(stage.release(sid))
        return ms, [*out, token]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    whole = bench_cache() / "smollm2-1stage-int8"
    mono = bench_cache() / "smollm2-mono-int8"
    stage_xml = whole / "stage_0-30.xml"
    mono_xml = mono / "openvino_model.xml"
    import openvino_genai

    prompt = list(openvino_genai.Tokenizer(str(mono)).encode(PROMPT).input_ids.data[0])
    builders: dict[str, Callable[[], Decode]] = {
        "genai default": lambda: genai_variant(mono, ""),
        "genai f32": lambda: genai_variant(mono, "f32"),
        "genai SDPA default": lambda: genai_variant(mono, "", "SDPA"),
        "genai SDPA f32": lambda: genai_variant(mono, "f32", "SDPA"),
        "LocalStage": lambda: stage_variant(whole, StageConfig(threads=1, precision="f32-dq")),
    }
    for name, props in PROPS.items():
        builders[f"raw stage {name}"] = partial(raw_variant, stage_xml, props)
        builders[f"raw mono {name}"] = partial(raw_variant, mono_xml, props)
    wanted = args.only or list(builders)
    variants = {name: builders[name]() for name in wanted}
    for run in variants.values():
        run(prompt, 8)  # warm up
    figures: dict[str, dict[str, list[float]]] = {
        kind: {name: [] for name in variants} for kind in ("p10", "median", "cpu")
    }
    names = list(variants)
    tokens: dict[str, list[int]] = {}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        if r % 2:
            order.reverse()
        for name in order:
            used = time.process_time()
            steps, tokens[name] = variants[name](prompt, args.tokens)
            figures["cpu"][name].append((time.process_time() - used) * 1000 / args.tokens)
            figures["p10"][name].append(float(np.percentile(steps, 10)))
            figures["median"][name].append(statistics.median(steps))
    base = names[0]
    print(
        f"ms a token (prompt of {len(prompt)} + {args.tokens} tokens), medians of {args.rounds} "
        f"rounds; ratios to {base!r} paired per round"
    )
    print(f"{'variant':26s}" + "".join(f" {kind:>7s} {'ratio':>6s}" for kind in figures))
    for name in names:
        row = f"{name:26s}"
        for runs in figures.values():
            ratios = [a / b for a, b in zip(runs[name], runs[base], strict=True)]
            row += f" {statistics.median(runs[name]):7.2f} {statistics.median(ratios):6.3f}"
        print(row + ("" if tokens[name] == tokens[base] else "  (other tokens)"))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
