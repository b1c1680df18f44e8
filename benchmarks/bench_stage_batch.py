"""What a stage pass costs with B streams in it, by the two mechanisms continuous batching
could use, side by side.

One stage of the demo's SmolLM2 export (stage 0, layers 0-15, int8 weights computed in f32
with int8 activations as ``precision auto`` compiles them), one OpenVINO thread on one core.

- *Batched stateful*: the stage's own stateful graph run with B rows at once (``input_ids
  [B, 1]``, one attention mask row per stream, ``beam_idx`` picking each row's cache), after a
  ``--history``-token prefill of every row: no graph change, but every stream of a pass shares
  one cache length (shorter ones mask their gaps), a stream joins by copying the whole batch's
  cache, and a prompt chunk pads every row to its length.
- *Paged* (what fleetgui runs, ``runtime/paged_stage.py``): the stage converted to paged
  attention, B streams of different lengths (``--history`` + 7 x i tokens) in one pass of
  ``PagedStage.forward_batch_blocking``, Python included, KV in f16 (the default).

Printed: ms per decode pass against B, and the time a single-stream prefill pass of 64 and
256 tokens holds the stage after ``--history`` cached tokens.

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


def paged_curve(export: Path, history: int, steps: int, batches: list[int]) -> dict[str, Any]:
    """The same figures for a :class:`PagedStage` (streams of different lengths)."""
    from fleetgui.export.manifest import read_manifest
    from fleetgui.runtime.ov_stage import StageConfig
    from fleetgui.runtime.paged_stage import PagedStage
    from fleetgui.runtime.stage import ForwardRequest

    manifest = read_manifest(export)
    files = [export / part for part in manifest.stages[0].model_files]
    stage = PagedStage(0, manifest.shard(0), files, StageConfig(threads=1, precision="f32-dq"))
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    streams = 0
    for rows in batches:
        ids = list(range(streams, streams + rows))
        streams += rows
        for i, stream in enumerate(ids):
            prompt = rng.integers(100, 40000, size=(1, history + 7 * i), dtype=np.int64)
            stage.forward_blocking(ForwardRequest(stream, prompt))
        times = []
        for _ in range(steps):
            step = [ForwardRequest(s, rng.integers(100, 40000, size=(1, 1))) for s in ids]
            started = time.perf_counter()
            stage.forward_batch_blocking(step)
            times.append((time.perf_counter() - started) * 1000)
        out[str(rows)] = statistics.median(times[2:])
        log.info("paged B=%d: %.2f ms a pass", rows, out[str(rows)])
    for n in (64, 256):
        times = []
        for _ in range(3):
            stage.forward_blocking(ForwardRequest(streams, rng.integers(100, 40000, (1, history))))
            started = time.perf_counter()
            stage.forward_blocking(ForwardRequest(streams, rng.integers(100, 40000, (1, n))))
            times.append((time.perf_counter() - started) * 1000)
            streams += 1
        out[f"prefill {n}"] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=512, help="cached tokens per row")
    parser.add_argument("--steps", type=int, default=20, help="decode passes per B")
    parser.add_argument("--batches", default="1,2,4,8,16")
    args = demo_run_args(parser)
    batches = [int(b) for b in args.batches.split(",")]
    out = {
        "stateful": curve(compiled_stage(args.export), args.history, args.steps, batches),
        "paged": paged_curve(args.export, args.history, args.steps, batches),
    }
    rows = []
    for name, run in out.items():
        one = run["1"]
        rows += [
            (
                f"{name}: decode pass, B={b} (x B=1)",
                f"{run[str(b)]:.2f} ms ({run[str(b)] / one:.2f}x)",
            )
            for b in batches
        ]
        rows += [
            (f"{name}: prefill pass of {n} tokens, one stream", f"{run[f'prefill {n}']:.1f} ms")
            for n in (64, 256)
        ]
    out["history"] = args.history
    print_figures(
        f"Stage 0 of SmolLM2 int8, 1 thread, {args.history} cached tokens a row", rows, out
    )


if __name__ == "__main__":
    main()
