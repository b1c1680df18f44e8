"""Model profile: the sizes the planner needs, from a HuggingFace model folder or an export folder.

Weight bytes per parameter at each format: fp32 4, fp16 2, int8 1 plus a per-channel scale and
zero point (~1.02), int4 0.5 plus an fp16 scale per group of 128 (~0.52). For an HF folder the
parameter counts come from the safetensors headers; for an export folder from the config in its
manifest, then scaled so that the sizes of the exported ``.bin`` files are reproduced.

The KV cache holds ``2 * kv_heads * head_dim * kv_bytes`` per token per layer (``kv_bytes`` 2:
OpenVINO keeps the cache in f16 by default, or smaller), for ``context_length`` tokens and each of
``streams`` sequences. An activation hop carries ``hidden_size * 4`` bytes (f32) per position.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
BYTES_PER_PARAMETER = {"fp32": 4.0, "fp16": 2.0, "int8": 1.02, "int4": 0.52}
DEFAULT_CONTEXT = 4096  # tokens planned for when the caller does not say
DEFAULT_KV_BYTES = 2  # bytes per KV element (f16)
ACTIVATION_BYTES = 4  # hidden states travel between stages as f32
HF_DEFAULT_FORMAT = "int4"  # what ``fleetgui export`` writes unless told otherwise


class ModelProfileError(FleetguiError):
    """The folder is neither a HuggingFace model folder nor a fleetgui export."""


@dataclass(frozen=True)
class ModelProfile:
    """Sizes of one model at one weight format, for one workload (context and streams)."""

    model_id: str  # ``name@hash``, as on every Shard of the model
    n_layers: int  # decoder layers
    weight_format: str  # "fp32", "fp16", "int8" or "int4"
    layer_parameters: int  # parameters of the largest decoder layer
    embedding_parameters: int  # token embedding (on the first stage)
    lm_head_parameters: int  # final norm and lm_head (on the last stage; a copy when tied)
    kv_elements_per_token_per_layer: int  # 2 * kv_heads * head_dim
    hidden_size: int
    vocab_size: int
    context_length: int = DEFAULT_CONTEXT  # tokens of KV cache planned per stream
    streams: int = 1  # sequences decoded at once; each needs its own KV cache
    kv_bytes: int = DEFAULT_KV_BYTES  # bytes per KV element
    bytes_scale: float = 1.0  # measured/estimated weight bytes (1 unless calibrated on an export)

    def __post_init__(self) -> None:
        if self.weight_format not in BYTES_PER_PARAMETER:
            raise ValueError(f"unknown weight format {self.weight_format!r}")
        if self.n_layers < 1 or self.layer_parameters < 1:
            raise ValueError("a model needs at least one decoder layer with parameters")
        if self.context_length < 1 or self.streams < 1:
            raise ValueError("context_length and streams must be at least 1")

    def _bytes(self, parameters: int) -> int:
        return math.ceil(parameters * BYTES_PER_PARAMETER[self.weight_format] * self.bytes_scale)

    @property
    def layer_weight_bytes(self) -> int:
        """Weights of one decoder layer at the weight format."""
        return self._bytes(self.layer_parameters)

    @property
    def embedding_bytes(self) -> int:
        return self._bytes(self.embedding_parameters)

    @property
    def lm_head_bytes(self) -> int:
        return self._bytes(self.lm_head_parameters)

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        return self.kv_elements_per_token_per_layer * self.kv_bytes

    @property
    def layer_kv_bytes(self) -> int:
        """KV cache of one layer for the whole workload (context x streams)."""
        return self.kv_bytes_per_token_per_layer * self.context_length * self.streams

    @property
    def layer_memory_bytes(self) -> int:
        """Memory one decoder layer takes on a device: weights plus its KV cache."""
        return self.layer_weight_bytes + self.layer_kv_bytes

    @property
    def activation_bytes(self) -> int:
        """Bytes one hop carries per decoded token (one position of f32 hidden state)."""
        return self.hidden_size * ACTIVATION_BYTES

    @property
    def total_bytes(self) -> int:
        """Memory of the whole model for the workload, without runtime overhead."""
        return self.n_layers * self.layer_memory_bytes + self.embedding_bytes + self.lm_head_bytes

    @property
    def lm_head_layer_ratio(self) -> float:
        """lm_head compute in units of one layer (decode is memory-bound: time ~ weight bytes)."""
        return self.lm_head_parameters / self.layer_parameters

    def with_weight_format(self, weight_format: str) -> ModelProfile:
        """The same model at another weight format (the calibration scale is kept)."""
        return replace(self, weight_format=weight_format)

    def with_workload(self, *, context_length: int, streams: int) -> ModelProfile:
        return replace(self, context_length=context_length, streams=streams)

    def describe(self) -> str:
        gb = self.total_bytes / 1e9
        return (
            f"{self.model_id}: {self.n_layers} layers, {self.weight_format} weights, "
            f"{gb:.2f} GB for {self.context_length} tokens x {self.streams} stream(s)"
        )


def config_parameters(config: dict[str, Any]) -> tuple[int, int, int]:
    """(largest layer, embedding, lm_head) parameter counts of a Llama-like decoder config."""
    hidden = int(config["hidden_size"])
    heads = int(config.get("num_attention_heads", 1))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    intermediate = int(config.get("intermediate_size") or 4 * hidden)
    vocab = int(config["vocab_size"])
    bias = bool(config.get("attention_bias")) or config.get("model_type") == "qwen2"
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    attention += (heads + 2 * kv_heads) * head_dim if bias else 0
    mlp = 3 * hidden * intermediate
    norms = 4 * hidden + 2 * head_dim
    return attention + mlp + norms, vocab * hidden, vocab * hidden + hidden


def _kv_elements(config: dict[str, Any]) -> int:
    hidden = int(config["hidden_size"])
    heads = int(config.get("num_attention_heads", 1))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    return 2 * kv_heads * head_dim


def _context(config: dict[str, Any], context_length: int | None) -> int:
    if context_length is not None:
        return context_length
    return min(DEFAULT_CONTEXT, int(config.get("max_position_embeddings") or DEFAULT_CONTEXT))


def profile_from_model_source(
    model_dir: Path,
    *,
    weight_format: str = HF_DEFAULT_FORMAT,
    context_length: int | None = None,
    streams: int = 1,
) -> ModelProfile:
    """Profile a HuggingFace model folder (reads only config.json and safetensors headers)."""
    from fleetgui.export.model_source import open_model_source

    source = open_model_source(model_dir)
    layers = [source.layer_parameters(i) for i in range(source.n_layers)]
    embedding = sum(t.n_elements for n, t in source.tensors.items() if "embed_tokens" in n)
    rest = sum(
        t.n_elements
        for n, t in source.tensors.items()
        if not n.startswith("model.layers.") and "embed_tokens" not in n
    )
    if not any(n.startswith("lm_head.") for n in source.tensors):
        rest += embedding  # tied: the last stage holds its own copy of the embedding matrix
    if min(layers) <= 0 or embedding <= 0:
        estimated = config_parameters(source.config)
        layers = [p or estimated[0] for p in layers]
        embedding = embedding or estimated[1]
        log.warning("%s: unusual weight names, layer sizes partly estimated", model_dir)
    return ModelProfile(
        model_id=source.model_id,
        n_layers=source.n_layers,
        weight_format=weight_format,
        layer_parameters=max(layers),
        embedding_parameters=embedding,
        lm_head_parameters=rest,
        kv_elements_per_token_per_layer=_kv_elements(source.config),
        hidden_size=source.hidden_size,
        vocab_size=source.vocab_size,
        context_length=_context(source.config, context_length),
        streams=streams,
    )


def profile_from_export(
    export_dir: Path, *, context_length: int | None = None, streams: int = 1
) -> ModelProfile:
    """Profile an export folder: sizes from its manifest, scaled to its stage files' sizes."""
    from fleetgui.export.manifest import read_manifest

    manifest = read_manifest(export_dir)
    config = manifest.config or {
        "hidden_size": manifest.hidden_size,
        "vocab_size": manifest.vocab_size,
    }
    layer, embedding, lm_head = config_parameters({**config, "vocab_size": manifest.vocab_size})
    profile = ModelProfile(
        model_id=manifest.model_id,
        n_layers=manifest.n_layers,
        weight_format=manifest.weight_format,
        layer_parameters=layer,
        embedding_parameters=embedding,
        lm_head_parameters=lm_head,
        kv_elements_per_token_per_layer=_kv_elements(config),
        hidden_size=manifest.hidden_size,
        vocab_size=manifest.vocab_size,
        context_length=_context(config, context_length),
        streams=streams,
    )
    actual = sum(f.size for s in manifest.stages for f in s.files if f.path.endswith(".bin"))
    predicted = sum(
        s.n_stage_layers * profile.layer_weight_bytes
        + (profile.embedding_bytes if s.is_first else 0)
        + (profile.lm_head_bytes if s.is_last else 0)
        for s in manifest.shards
    )
    if actual > 0 and predicted > 0 and manifest.layout == "stages":
        profile = replace(profile, bytes_scale=actual / predicted)
        log.debug("%s: weight sizes calibrated by x%.3f", export_dir, profile.bytes_scale)
    return profile


def load_model_profile(
    folder: Path,
    *,
    weight_format: str | None = None,
    context_length: int | None = None,
    streams: int = 1,
) -> ModelProfile:
    """Profile an export folder (has ``manifest.json``), a HuggingFace model folder, a GGUF
    file or a hub id.

    An HF folder is planned at ``weight_format`` (default int4, what ``fleetgui export`` writes);
    an export folder at the format it was exported with.
    """
    from fleetgui.export.sources import resolve_model

    folder = resolve_model(folder)  # a .gguf file or a hub id: the folder it is read from
    if (folder / "manifest.json").is_file():
        profile = profile_from_export(folder, context_length=context_length, streams=streams)
        if weight_format is not None and weight_format != profile.weight_format:
            raise ModelProfileError(
                f"{folder} was exported with {profile.weight_format} weights, not {weight_format}"
            )
        return profile
    if (folder / "config.json").is_file():
        return profile_from_model_source(
            folder,
            weight_format=weight_format or HF_DEFAULT_FORMAT,
            context_length=context_length,
            streams=streams,
        )
    raise ModelProfileError(
        f"{folder} is neither a fleetgui export (manifest.json) nor a HuggingFace model folder "
        "(config.json)"
    )
