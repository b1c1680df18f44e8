"""A stage's stateful graph turned into a paged-attention graph, for several streams a pass.

OpenVINO's ``paged_attention_transformation`` (what OpenVINO GenAI's continuous batching runs
whole models with) replaces each attention and its KV state with a PagedAttention op that
reads and writes one pool of cache blocks, given per pass: the tokens of every stream laid end
to end (``input_ids [T]`` or ``inputs_embeds [T, hidden]``), their positions, and each stream's
cached length, token range and block table. A stage's ``hidden_in`` is renamed
``inputs_embeds`` first, since the transformation looks for one of the two names.

Only graphs whose attention is plain causal attention convert this way: a sliding window or a
soft cap lives in the stage's own mask and score ops, which the transformation drops, so
:func:`paged_attention_fits` keeps such models on stateful stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openvino as ov
from openvino._offline_transformations import paged_attention_transformation

BLOCK_SIZE = 32  # tokens a cache block holds: the CPU plugin's block size
KV_CACHE_PREFIXES = ("key_cache.", "value_cache.")


class PagedGraphError(RuntimeError):
    """The stage's graph does not convert to paged attention (the message says why)."""


def paged_attention_fits(config: Mapping[str, Any] | None) -> bool:
    """Whether a model with HF ``config`` attends plainly causally in every layer: no sliding
    window and no soft-capped scores (which the conversion would drop)."""
    if not config:
        return False
    if config.get("attn_logit_softcapping"):
        return False
    window = config.get("sliding_window")
    uses_window = config.get("use_sliding_window", True)
    layer_types = config.get("layer_types") or ()
    windowed = not layer_types or "sliding_attention" in layer_types
    return not (window and uses_window and windowed)


def paged_model(model: ov.Model, block_size: int = BLOCK_SIZE) -> ov.Model:
    """``model`` (a stage's stateful graph) with paged attention, its cache inputs
    ``key_cache.N``/``value_cache.N`` (N: the stage's Nth layer) shaped ``[blocks, kv_heads,
    block_size, head_dim]`` as the stage's KV states are, and typed f32 (compiling may change
    both: see :func:`cache_layouts`)."""
    layers = _state_layouts(model)
    embeds: ov.op.Parameter | None = None
    for parameter in model.get_parameters():
        name = parameter.output(0).get_any_name()
        if name == "input_ids":  # the transformation checks the friendly name
            parameter.set_friendly_name("input_ids")
        elif name == "hidden_in":
            parameter.set_friendly_name("inputs_embeds")
            parameter.output(0).get_tensor().set_names({"inputs_embeds"})
            embeds, width = parameter, parameter.get_partial_shape()[2]
    try:
        paged_attention_transformation(model)
    except RuntimeError as exc:
        raise PagedGraphError(f"paged attention does not apply: {exc}") from None
    if embeds is not None:  # the transformation leaves [?, ?]: keep the stage's own width
        embeds.set_partial_shape(ov.PartialShape([-1, width]))
    if any(op.get_type_name() == "ScaledDotProductAttention" for op in model.get_ops()):
        raise PagedGraphError("some attention layers stayed unpaged")
    for parameter in model.get_parameters():
        name = parameter.output(0).get_any_name()
        if not name.startswith(KV_CACHE_PREFIXES):
            continue
        layer = int(name.split(".")[1])
        if layer >= len(layers):
            raise PagedGraphError(f"cache input {name} has no KV state of its layer")
        kv_heads, head_size = layers[layer]
        parameter.set_element_type(ov.Type.f32)
        parameter.set_partial_shape(ov.PartialShape([-1, kv_heads, block_size, head_size]))
    model.validate_nodes_and_infer_types()
    return model


def _state_layouts(model: ov.Model) -> list[tuple[int, int]]:
    """(KV heads, head size) of each of the stage's layers, in order, from its key states
    (``past_key_values.{layer}.key``, ``[batch, kv_heads, tokens, head_dim]``)."""
    found: dict[int, tuple[int, int]] = {}
    for variable in model.get_variables():
        name = variable.get_info().variable_id
        parts = name.split(".")
        if len(parts) != 3 or parts[2] != "key" or not parts[1].isdigit():
            continue
        shape = variable.get_info().data_shape
        if shape.rank.get_length() != 4 or not (shape[1].is_static and shape[3].is_static):
            raise PagedGraphError(f"the KV state {name} is not [batch, heads, tokens, dim]")
        found[int(parts[1])] = (shape[1].get_length(), shape[3].get_length())
    if not found:
        raise PagedGraphError("the stage has no KV states named past_key_values.N.key")
    return [found[layer] for layer in sorted(found)]


def cache_layouts(compiled: ov.CompiledModel) -> dict[str, tuple[tuple[int, ...], ov.Type]]:
    """Each cache input's block shape (without the block count) and element type, as compiled
    (the CPU plugin may store quantized keys with their scales in extra rows, or bf16)."""
    layouts: dict[str, tuple[tuple[int, ...], ov.Type]] = {}
    for port in compiled.inputs:
        name = port.get_any_name()
        if name.startswith(KV_CACHE_PREFIXES):
            dims = list(port.get_partial_shape())[1:]
            if not all(dim.is_static for dim in dims):
                raise PagedGraphError(f"the compiled cache input {name} is not fully shaped")
            layouts[name] = (tuple(dim.get_length() for dim in dims), port.get_element_type())
    return layouts
