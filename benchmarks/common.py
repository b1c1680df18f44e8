"""Helpers shared by the benchmark scripts: models, timing, printing figures."""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fleetgui.torch_env import hide_torchvision

hide_torchvision()  # before anything imports transformers
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the model factory lives with the tests

log = logging.getLogger("benchmarks")


def bench_cache() -> Path:
    """Where benchmark models and exports are kept between runs."""
    from fleetgui.paths import shards_cache_dir

    path = shards_cache_dir() / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bench_llama() -> Path:
    """The ~245M-parameter random Llama, built once."""
    from model_factory import build_bench_llama

    path = bench_cache() / "bench-llama"
    if not (path / "config.json").is_file():
        tmp = path.with_name(".bench-llama.tmp")
        build_bench_llama(tmp)
        tmp.rename(path)
    return path


def ensure_export(model: Path, name: str, **request: Any) -> Path:
    """Export ``model`` once into the bench cache (re-runs reuse it)."""
    from fleetgui.export.exporter import ExportRequest, export_model

    out = bench_cache() / name
    export_model(ExportRequest(model, out, **request))
    return out


@contextmanager
def timed(label: str) -> Iterator[dict[str, float]]:
    result: dict[str, float] = {}
    start = time.perf_counter()
    yield result
    result["seconds"] = time.perf_counter() - start
    log.info("%s: %.2f s", label, result["seconds"])


def paired(runs: dict[str, list[float]], over: str, under: str) -> float:
    """Median over repeats (or rounds) of ``over / under`` within each: a ratio free of the
    machine's drift between repeats."""
    return statistics.median(a / b for a, b in zip(runs[over], runs[under], strict=True))


def decode_throughput(results: Sequence[Any]) -> float:
    """Concurrent requests' decode tokens (each one's tokens after its first) a second, over
    the span from the first first token to the last token: the rate while they decode, without
    the prompts' prefill (which TTFT reports). For one request, its decode rate. ``results``:
    ``GenerationResult``s of requests started together."""
    firsts = [r.ttft_ms for r in results]
    ends = [r.ttft_ms + 1000.0 * (len(r.token_ids) - 1) / r.tokens_per_s for r in results]
    return sum(len(r.token_ids) - 1 for r in results) * 1000.0 / (max(ends) - min(firsts))


def demo_run_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """A demo-model benchmark's arguments: ``--export`` (default: the demo's SmolLM2 export,
    made if missing), benchmark logging at INFO, and this process (the client, beside the
    coordinator as on a user's PC) on core 0."""
    parser.add_argument("--export", type=Path, help="a 2-stage export (default: the demo's)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    if args.export is None:
        from fleetgui.demo.models import export_real

        args.export = export_real()
    os.sched_setaffinity(0, {0})
    return args


def print_figures(title: str, rows: list[tuple[str, str]], as_json: dict[str, Any]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n== {title} ==")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print("json:", json.dumps(as_json, sort_keys=True))


def auto_k_choices() -> dict[str, Callable[[], Any]]:
    """Choices of K besides a number: K auto as the product runs it, and without the brakes it
    applies when several streams generate (no switch margin, the acceptance
    estimate believed up to 0.99: a lone stream's choice), to compare them."""
    from fleetgui.runtime.auto_k import AutoK

    return {"auto": AutoK, "auto-unbraked": lambda: AutoK(switch_gain=0.0, max_alpha=0.99)}


def k_choice(text: str) -> tuple[int | None, Callable[[], Any]]:
    """A ``--k``-style benchmark argument: (fixed K or None, the maker of each stream's K
    chooser): a number, or a name in :func:`auto_k_choices`."""
    from fleetgui.runtime.auto_k import AutoK, check_k

    choices = auto_k_choices()
    if text in choices:
        return None, choices[text]
    if not text.isdigit():
        raise SystemExit(f"K {text!r}: give a number or one of {', '.join(choices)}")
    return check_k(int(text)), AutoK
