"""The monolithic baseline: ``openvino_genai.LLMPipeline`` on the unsplit model, on this PC.

It runs on one OpenVINO thread, as each fleet PC's stage does, at the faster of the plugin's
default precision and f32 compute (with int8 or int4 weights the CPU quantizes activations to
int8 either way; which one wins depends on the CPU), with greedy decoding and the same prompts.
With fp32/fp16 weights on one thread it runs at f32 only, as a stage does
(:func:`genai_properties`).
Its rate is genai's own decode throughput and its TTFT genai's.

The demo model comes as a GGUF file, which optimum-intel cannot export as one piece: its
weights are dequantized into a temporary HuggingFace folder once and exported from there.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from fleetgui import paths
from fleetgui.export.manifest import read_manifest

log = logging.getLogger(__name__)

FIT_FACTOR = 2.0  # the model's files times this must be free: weights, compiled graph, KV cache
PRECISIONS: dict[str, dict[str, Any]] = {"default": {}, "f32": {"INFERENCE_PRECISION_HINT": "f32"}}


def _forced_f32(threads: int, weight_format: str) -> bool:
    """Whether the plugin's default precision must not run: the loader's rule for stages
    (``safe_stage_config``), fp32/fp16 weights on one thread, where bf16 dies with SIGFPE."""
    from fleetgui.runtime.loader import safe_stage_config
    from fleetgui.runtime.ov_stage import StageConfig

    chosen = safe_stage_config(StageConfig(threads=threads), weight_format)
    return chosen.precision == "f32"


def genai_properties(precision: str, threads: int, weight_format: str) -> dict[str, Any]:
    """The ``openvino_genai.LLMPipeline`` properties of a baseline run at ``precision`` (a
    :data:`PRECISIONS` name) on ``threads`` threads with ``weight_format`` weights."""
    props: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, **PRECISIONS[precision]}
    if _forced_f32(threads, weight_format):
        # INFERENCE_PRECISION_HINT f32, as the loader sets for a stage: OpenVINO's CPU plugin
        # dies (SIGFPE) at its default bf16 on one thread with fp32/fp16 weights (AMX Xeon)
        props["INFERENCE_PRECISION_HINT"] = "f32"
    return props


def baseline_precisions(threads: int, weight_format: str) -> tuple[str, ...]:
    """The :data:`PRECISIONS` a baseline runs: both, or only f32 where the default would be
    f32 too (:func:`genai_properties`), so the same run is not made twice."""
    return ("f32",) if _forced_f32(threads, weight_format) else tuple(PRECISIONS)


@dataclass(frozen=True)
class BaselineRun:
    tokens_per_s: float
    ttft_ms: float
    new_tokens: int
    precision: str  # which of PRECISIONS ran


def fits(mono_dir: Path) -> str | None:
    """Why the monolithic model cannot run on this PC, or None when it fits in memory."""
    size = sum(p.stat().st_size for p in Path(mono_dir).glob("*.bin"))
    free = psutil.virtual_memory().available
    if size * FIT_FACTOR > free:
        return (
            f"the unsplit model ({size / 2**30:.1f} GB) does not fit in this PC's free memory "
            f"({free / 2**30:.1f} GB): that is what the fleet is for"
        )
    return None


def check_monolithic(mono_dir: Path) -> None:
    """Raise ``FleetguiError`` unless ``mono_dir`` is a monolithic export."""
    manifest = read_manifest(mono_dir)
    if manifest.layout != "monolithic":
        from fleetgui.errors import FleetguiError

        raise FleetguiError(
            f"{mono_dir} is a stage export; --baseline takes a monolithic one "
            "(fleetgui export MODEL --monolithic)"
        )


@dataclass
class Baseline:
    """genai pipelines on one monolithic export, made once and run in each repeat."""

    mono_dir: Path
    threads: int = 1
    _pipes: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, list[float]] = field(default_factory=dict)  # precision -> tok/s per repeat

    @property
    def weight_format(self) -> str:
        return read_manifest(self.mono_dir).weight_format

    def _pipe(self, precision: str) -> Any:
        if precision not in self._pipes:
            import openvino_genai

            props = genai_properties(precision, self.threads, self.weight_format)
            self._pipes[precision] = openvino_genai.LLMPipeline(str(self.mono_dir), "CPU", **props)
        return self._pipes[precision]

    def _generate(self, precision: str, prompt: str, n_tokens: int) -> tuple[float, float, int]:
        import openvino_genai

        config = openvino_genai.GenerationConfig()
        config.max_new_tokens = n_tokens
        config.do_sample = False
        config.apply_chat_template = False  # the prompt is already in the chat template
        result = self._pipe(precision).generate([prompt], config)
        metrics = result.perf_metrics
        return (
            float(metrics.get_throughput().mean),
            float(metrics.get_ttft().mean),
            int(metrics.get_num_generated_tokens()),
        )

    def run(self, prompt: str, n_tokens: int) -> BaselineRun:
        """Both precisions on ``prompt``; the one that has been faster over the repeats so
        far (a precision's median, not the best of each repeat, which noise would inflate)."""
        measured = {}
        for precision in baseline_precisions(self.threads, self.weight_format):
            measured[precision] = self._generate(precision, prompt, n_tokens)
            self.runs.setdefault(precision, []).append(measured[precision][0])
        best = max(self.runs, key=lambda name: statistics.median(self.runs[name]))
        rate, ttft, tokens = measured[best]
        return BaselineRun(rate, ttft, tokens, best)

    def close(self) -> None:
        self._pipes.clear()


def demo_monolithic(gguf: Path, weights: str) -> Path:
    """The demo model's monolithic export with ``weights`` in the shard cache (made once from
    its GGUF file; see module doc). Needs the export extra (torch, transformers, optimum)."""
    from fleetgui.export.exporter import ExportRequest, export_model
    from fleetgui.export.gguf_source import GGUFCheckpoint
    from fleetgui.export.sources import resolve_model

    out = paths.shards_cache_dir() / f"demo-smollm2-mono-{weights}"
    if (out / "manifest.json").is_file():
        return out
    view = resolve_model(gguf)
    with tempfile.TemporaryDirectory(prefix=".smollm2-hf-", dir=paths.shards_cache_dir()) as tmp:
        folder = Path(tmp)
        for file in view.iterdir():
            if file.is_file() and file.suffix == ".json" and file.name != "gguf_view.json":
                shutil.copy(file, folder / file.name)
        _write_weights(GGUFCheckpoint(view), folder / "model.safetensors")
        log.info("exporting the demo model unsplit for the monolithic baseline (once)")
        export_model(ExportRequest(folder, out, monolithic=True, weights=weights))
    return out


def _write_weights(checkpoint: Any, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {name: checkpoint.get(name) for name in checkpoint.view["tensors"]}
    save_file(tensors, str(path), metadata={"format": "pt"})
