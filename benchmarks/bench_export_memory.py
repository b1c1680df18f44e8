"""Export memory benchmark: peak RSS of ``fleetgui export`` against the model's size.

Export streams weights stage by stage from the safetensors files, so its peak memory follows
the largest stage, not the model. This builds a ~1.0B-parameter random Llama (fp16 safetensors),
exports it in 4 stages with int4 weights in a child process, and prints that process's peak
RSS beside the model's size in fp16 and in fp32 (what loading it whole would take).

With ``--gguf`` the same model is first written as a Q8_0 GGUF file (llama.cpp's layout, as
Ollama and LM Studio keep models) and that file is exported: each stage's tensors are read and
dequantized from the memory-mapped file, so the peak again follows a stage, not the model.

Run: ``.venv/bin/python benchmarks/bench_export_memory.py [--stages 4] [--weights int4] [--gguf]``
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import bench_cache, print_figures

from fleetgui.export.manifest import read_manifest
from fleetgui.export.model_source import open_model_source


def _status_kb(pid: int, field: str) -> int:
    """A memory field of /proc/PID/status in kB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--weights", default="int4")
    parser.add_argument(
        "--max-chunk-layers",
        type=int,
        default=None,
        help="layers converted at once (default: auto)",
    )
    parser.add_argument(
        "--gguf", action="store_true", help="export the model from a Q8_0 GGUF file of it"
    )
    args = parser.parse_args()
    from model_factory import BILLION_DIMS, build_bench_llama

    model = bench_cache() / "llama-1b"
    if not (model / "config.json").is_file():
        tmp = model.with_name(".llama-1b.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        build_bench_llama(tmp, dims=BILLION_DIMS)
        tmp.rename(model)
    source = open_model_source(model)
    exported = _gguf_of(model) if args.gguf else model
    kind = "gguf-" if args.gguf else ""
    out = bench_cache() / f"llama-1b-{kind}{args.stages}s-{args.weights}"
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "fleetgui",
        "--log-level",
        "warning",
        "export",
        str(exported),
        "--out",
        str(out),
        "--stages",
        str(args.stages),
        "--weights",
        args.weights,
        "--no-verify",
        *(["--max-chunk-layers", str(args.max_chunk_layers)] if args.max_chunk_layers else []),
    ]
    started = time.perf_counter()
    child = subprocess.Popen(command)
    peaks = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    while child.poll() is None:  # sample the child's memory: anonymous vs file-backed pages
        peaks = {k: max(v, _status_kb(child.pid, k) * 1024) for k, v in peaks.items()}
        time.sleep(0.1)
    if child.returncode:
        raise SystemExit(f"export failed with exit code {child.returncode}")
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # kB on Linux
    fp16, fp32 = source.n_parameters * 2, source.n_parameters * 4
    largest_stage = max(
        sum(source.layer_parameters(i) for i in range(s.start_layer, s.end_layer))
        for s in read_manifest(out).shards
    )
    rows = [
        ("model", f"{source.n_parameters / 1e9:.2f}B parameters, {source.n_layers} layers"),
        ("model size fp16 / fp32", f"{fp16 / 1e9:.2f} GB / {fp32 / 1e9:.2f} GB"),
        (
            "exported from",
            f"{exported.name} ({exported.stat().st_size / 1e9:.2f} GB)"
            if exported.is_file()
            else "safetensors (fp16)",
        ),
        (
            "export",
            f"{args.stages} stages, {args.weights}, chunks of "
            f"{args.max_chunk_layers or 'auto'} layers, {seconds:.0f} s",
        ),
        ("peak RSS of the export process", f"{peak / 1e9:.2f} GB"),
        ("peak RSS / model fp32 size", f"{peak / fp32:.2f}"),
        ("peak anonymous memory (RssAnon)", f"{peaks['RssAnon'] / 1e9:.2f} GB"),
        ("peak anonymous / model fp32 size", f"{peaks['RssAnon'] / fp32:.2f}"),
        ("peak file-backed pages (RssFile: mmapped weights)", f"{peaks['RssFile'] / 1e9:.2f} GB"),
        ("largest stage's decoder weights fp32", f"{largest_stage * 4 / 1e9:.2f} GB"),
    ]
    print_figures(
        "export memory",
        rows,
        {
            "n_parameters": source.n_parameters,
            "peak_rss_bytes": peak,
            "fp32_bytes": fp32,
            "fp16_bytes": fp16,
            "seconds": round(seconds, 1),
            "stages": args.stages,
            "source": "gguf-q8_0" if args.gguf else "safetensors-fp16",
        },
    )


def _gguf_of(model: Path) -> Path:
    """``model`` written once as a Q8_0 GGUF file (norms fp32) beside it."""
    from gguf_support import write_llama_gguf

    path = model.with_name(f"{model.name}.Q8_0.gguf")
    if not path.is_file():
        tmp = path.with_name(f".{path.name}.tmp")
        write_llama_gguf(
            model, tmp, quantize=lambda name: "F32" if name.endswith("norm.weight") else "Q8_0"
        )
        tmp.rename(path)
    return path


if __name__ == "__main__":
    main()
