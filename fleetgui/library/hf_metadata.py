"""A HuggingFace model folder's facts from ``config.json`` and its safetensors headers, and
whether fleetgui can export it, by the exporter's own checks (architecture adapters, weight
files, tokenizer)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fleetgui.export.architectures import UnsupportedArchitectureError, adapter_for
from fleetgui.export.model_source import ModelSourceError, read_safetensors_header, weight_files
from fleetgui.library.entry import ModelFacts
from fleetgui.library.parameters import estimate_parameters

log = logging.getLogger(__name__)

REQUIRED_KEYS = ("model_type", "num_hidden_layers", "hidden_size", "vocab_size")
TOKENIZERS = ("tokenizer.json", "tokenizer.model")


def read_config(folder: Path) -> dict[str, Any]:
    """``config.json`` of ``folder``; ``ModelSourceError`` saying what is wrong with it."""
    path = folder / "config.json"
    if not path.is_file():
        raise ModelSourceError(
            "config.json is missing: an unfinished download, or not a HuggingFace model folder"
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"config.json is unreadable ({exc})") from exc
    if not isinstance(config, dict):
        raise ModelSourceError("config.json is not a JSON object")
    return config


def _weights_summary(folder: Path) -> tuple[int, str]:
    """Parameters and the dominant dtype, from the safetensors headers (a few KB each)."""
    dtypes: Counter[str] = Counter()
    total = 0
    for file in weight_files(folder):
        for name, entry in read_safetensors_header(file).items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in entry.get("shape", ()):
                count *= int(dim)
            total += count
            dtypes[str(entry.get("dtype", "?"))] += count
    return total, (dtypes.most_common(1)[0][0] if dtypes else "")


def _problem(folder: Path, config: dict[str, Any]) -> str | None:
    """Why the exporter would refuse ``folder``, checked as it checks (cheapest first)."""
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        return f"config.json lacks {', '.join(missing)}: not a decoder language model"
    quantized = config.get("quantization_config")
    if isinstance(quantized, dict):
        method = quantized.get("quant_method", "quantized")
        return (
            f"its weights are pre-quantized ({method}); fleetgui exports from full-precision "
            "weights: use the original, unquantized model"
        )
    try:
        adapter_for(SimpleNamespace(**config))
    except UnsupportedArchitectureError as exc:
        return str(exc)
    if not any((folder / name).is_file() for name in TOKENIZERS):
        return "it has no tokenizer (tokenizer.json or tokenizer.model)"
    return None


def hf_facts(folder: Path) -> ModelFacts:
    """The facts of the HuggingFace model folder ``folder``; never reads tensor data."""
    try:
        config = read_config(folder)
    except ModelSourceError as exc:
        return ModelFacts(problem=str(exc))
    architecture = str(config.get("model_type", ""))
    problem = _problem(folder, config)
    n_parameters = estimate_parameters(config)
    quantization = str(config.get("torch_dtype") or config.get("dtype") or "")
    try:
        counted, dtype = _weights_summary(folder)
        if counted:
            n_parameters, quantization = counted, dtype
    except ModelSourceError as exc:  # no or missing safetensors: the exporter refuses it too
        problem = problem or str(exc)
    except (AttributeError, TypeError, ValueError) as exc:  # a header of an unexpected shape
        problem = problem or f"its safetensors headers are malformed ({exc}): re-download it"
    quantized = config.get("quantization_config")
    if isinstance(quantized, dict):
        quantization = str(quantized.get("quant_method", quantization))
    layers, hidden = config.get("num_hidden_layers"), config.get("hidden_size")
    return ModelFacts(
        architecture=architecture,
        n_parameters=n_parameters,
        quantization=quantization,
        problem=problem,
        n_layers=layers if isinstance(layers, int) else None,
        hidden_size=hidden if isinstance(hidden, int) else None,
    )


def hf_identity(folder: Path) -> str | None:
    """The identity an export of ``folder`` carries (``Manifest.model_hash``): config, tensor
    names and shapes, and a few sampled bytes per tensor. None when it cannot be read."""
    from fleetgui.export.model_source import open_model_source

    try:
        return open_model_source(folder).identity_hash
    except ModelSourceError as exc:
        log.debug("no identity for %s: %s", folder, exc)
        return None
