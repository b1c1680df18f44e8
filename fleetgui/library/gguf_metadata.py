"""A GGUF file's facts from its header (:mod:`fleetgui.library.gguf_header`: the tensor data
is never read, except one block of each quantization type, which is how the exporter checks it
can dequantize them), and whether fleetgui can export it, by the exporter's own checks
(architecture, quantization types, tokenizer)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.export.gguf_source import (
    SUPPORTED_ARCHITECTURES,
    check_quantization,
    file_identity,
    model_name,
    view_folder,
)
from fleetgui.export.gguf_tokenizer import check_rebuildable
from fleetgui.library.entry import ModelFacts
from fleetgui.library.gguf_header import ArrayField, GGUFHeader, read_header

log = logging.getLogger(__name__)


def _int(fields: dict[str, Any], key: str) -> int | None:
    value = fields.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(fields: dict[str, Any], key: str) -> int:
    value = fields.get(key)
    return value.count if isinstance(value, ArrayField) else 0


def quantization_label(header: GGUFHeader) -> str:
    """llama.cpp's name for the file's quantization (``general.file_type``: Q4_K_M, ...), else
    the tensor type holding most of the weights."""
    file_type = _int(header.fields, "general.file_type")
    if file_type is not None:
        from gguf import LlamaFileType

        try:
            name = LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name and name != "GUESSED":
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    counts: Counter[str] = Counter()
    for tensor in header.tensors:
        counts[tensor.tensor_type.name] += tensor.n_elements
    return counts.most_common(1)[0][0] if counts else ""


def _problem(header: GGUFHeader, architecture: str) -> str | None:
    """Why the exporter would refuse the file, checked as it checks."""
    fields = header.fields
    parts = _int(fields, "split.count")
    if parts is not None and parts > 1:
        return (
            f"it is split into {parts} files, which fleetgui cannot read as one: merge them "
            "with llama.cpp's llama-gguf-split --merge, or use the model's HuggingFace folder"
        )
    if architecture not in SUPPORTED_ARCHITECTURES:
        return (
            f"GGUF architecture {architecture!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    try:
        check_quantization(header)  # the exporter's check: one block of each type
        check_rebuildable(
            str(fields.get("tokenizer.ggml.model", "")),
            str(fields.get("tokenizer.ggml.pre", "default")),
            tokens=_count(fields, "tokenizer.ggml.tokens"),
            scores=_count(fields, "tokenizer.ggml.scores"),
            merges=_count(fields, "tokenizer.ggml.merges"),
        )
    except FleetguiError as exc:
        return str(exc)
    return None


def gguf_facts(path: Path) -> ModelFacts:
    """The facts of the GGUF file ``path``."""
    if not path.is_file():
        return ModelFacts(problem=f"the file {path} is missing (a removed or unfinished download)")
    try:
        header = read_header(path)
    except FleetguiError as exc:
        return ModelFacts(problem=str(exc))
    architecture = str(header.fields.get("general.architecture", ""))
    return ModelFacts(
        architecture=architecture,
        n_parameters=sum(t.n_elements for t in header.tensors) or None,
        quantization=quantization_label(header),
        problem=_problem(header, architecture),
        n_layers=_int(header.fields, f"{architecture}.block_count"),
        hidden_size=_int(header.fields, f"{architecture}.embedding_length"),
    )


def gguf_identity(path: Path, views: Path | None) -> str | None:
    """The identity an export of the GGUF file carries (``Manifest.model_hash``): known once
    the file was opened for export, from its view folder in ``views``; None before that."""
    from fleetgui.export.model_source import open_model_source

    try:
        header = read_header(path)
        identity = file_identity(path, header)  # the exporter's: header and sampled bytes
        folder = view_folder(path, identity, views, name=model_name(path, header.fields))
        if not (folder / "config.json").is_file():
            return None
        return open_model_source(folder).identity_hash
    except (FleetguiError, OSError, ValueError) as exc:
        log.debug("no identity for %s: %s", path, exc)
        return None
