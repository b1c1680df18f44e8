"""What a stage pass costs with B streams' rows in it: the cost curve continuous batching
(issue 40) would plan its token budget from.

One stage of the demo's SmolLM2 export (stage 0, layers 0-15, int8 weights computed in f32
with int8 activations as ``precision auto`` compiles them), one OpenVINO thread on one core.
*Batched stateful*: the stage's own stateful graph run with B rows at once (``input_ids
[B, 1]``, one attention mask row per stream, ``beam_idx`` picking each row's cache), after a
``--history``-token prefill of every row: the mechanism that needs no graph change, where
streams of different lengths would share one cache length and mask their gaps. Printed: ms
per decode pass against B, and the time a single-row prefill pass of 64 and 256 tokens holds
the stage.

Run: ``.venv/bin/python benchmarks/bench_stage_batch.py [--history 512] [--steps 20]``
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import demo_run_args, print_figures

log = logging.getLogger("benchmarks")


def compiled_stage(export: Path) -> Any:
    import openvino as ov

    from fleetgui.runtime.ov_stage import StageConfig

    xml = sorted(export.glob("stage_0-*.xml"))[0]
    core = ov.Core()
    props = StageConfig(threads=1, precision="f32-dq").ov_properties()
    return core.compile_model(core.read_model(xml), "CPU", props)


def pass_ms(request: Any, tokens: np.ndarray, past: int, repeats: int) -> list[float]:
    """Feed ``tokens`` [B, n] ``repeats`` times after ``past`` positions (the cache grows)."""
    rows, n = tokens.shape
    times = []
    for i in range(repeats):
        length = past + (i + 1) * n
        inputs = {
            "input_ids": tokens,
            "attention_mask": np.ones((rows, length), dtype=np.int64),
            "position_ids": np.broadcast_to(
                np.arange(length - n, length, dtype=np.int64), (rows, n)
            ).copy(),
            "beam_idx": np.arange(rows, dtype=np.int32),
        }
        started = time.perf_counter()
        request.infer(inputs)
        times.append((time.perf_counter() - started) * 1000)
    return times


def curve(compiled: Any, history: int, steps: int, batches: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    for rows in batches:
        request = compiled.create_infer_request()
        request.reset_state()
        prompt = rng.integers(100, 40000, size=(rows, history), dtype=np.int64)
        pass_ms(request, prompt, 0, 1)  # the history: one pass of every row
        ms = pass_ms(request, prompt[:, -1:], history, steps)
        out[str(rows)] = statistics.median(ms[2:])
        log.info("B=%d: %.2f ms a pass", rows, out[str(rows)])
    for n in (64, 256):
        request = compiled.create_infer_request()
        request.reset_state()
        prompt = rng.integers(100, 40000, size=(1, history), dtype=np.int64)
        pass_ms(request, prompt, 0, 1)
        out[f"prefill {n}"] = statistics.median(pass_ms(request, prompt[:, :n], history, 3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=512, help="cached tokens per row")
    parser.add_argument("--steps", type=int, default=20, help="decode passes per B")
    parser.add_argument("--batches", default="1,2,4,8,16")
    args = demo_run_args(parser)
    batches = [int(b) for b in args.batches.split(",")]
    out = curve(compiled_stage(args.export), args.history, args.steps, batches)
    one = out["1"]
    rows = [
        (f"decode pass, B={b} (x B=1)", f"{out[str(b)]:.2f} ms ({out[str(b)] / one:.2f}x)")
        for b in batches
    ]
    rows += [
        (f"prefill pass of {n} tokens, one row", f"{out[f'prefill {n}']:.1f} ms") for n in (64, 256)
    ]
    out["history"] = args.history
    print_figures(
        f"Stage 0 of SmolLM2 int8, 1 thread, {args.history} cached tokens a row", rows, out
    )


if __name__ == "__main__":
    main()
