"""Export decoder layers ``[start, end)`` of a HuggingFace model as one stateful OpenVINO IR stage.

Stage interface (batch and seq dynamic; ``L`` is the global layer index):

* inputs: ``input_ids`` [batch, seq] i64 on the first stage, ``hidden_in`` [batch, seq, hidden] f32
  on the others; ``attention_mask`` [batch, past+seq] i64; ``position_ids`` [batch, seq] i64;
  ``beam_idx`` [batch] i32 (unless exported with ``beam_idx_gather=False``).
* outputs: ``hidden_out`` [batch, seq, hidden] f32 on non-last stages; on the last stage
  ``logits`` [batch, seq, vocab] f32, ``top1_ids`` [batch, seq] i64 and ``top1_probs``
  [batch, seq] f32 (softmax probability of the argmax).
* states: ``past_key_values.{L}.key`` and ``past_key_values.{L}.value`` per stage layer,
  [batch, kv_heads, past, head_dim] f32.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import openvino as ov
import torch

from fleetgui.export.stage_io import (
    StageIO,
    past_name,
    present_name,
    quiet_openvino_telemetry,
    stage_io_names,
)
from fleetgui.export.stage_module import build_stage_module
from fleetgui.export.stateful import make_stateful
from fleetgui.shard import Shard

log = logging.getLogger(__name__)

# Example sizes used for tracing; all three are made dynamic, and none is 1 so that no
# broadcasting special case gets frozen into the graph.
_EXAMPLE_BATCH, _EXAMPLE_SEQ, _EXAMPLE_PAST = 2, 3, 4


def convert_stage(model_dir: Path, shard: Shard, *, beam_idx_gather: bool = True) -> ov.Model:
    """Trace and convert ``shard`` of the model in ``model_dir`` into a stateful ``ov.Model``."""
    started = time.perf_counter()
    module, config = build_stage_module(model_dir, shard)
    io = stage_io_names(shard, beam_idx_gather=beam_idx_gather)
    kv_heads = int(config.num_key_value_heads)
    head_dim = int(
        getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    )
    hidden = int(config.hidden_size)
    batch, seq, past = _EXAMPLE_BATCH, _EXAMPLE_SEQ, _EXAMPLE_PAST
    if shard.is_first:
        main = torch.randint(0, int(config.vocab_size), (batch, seq), dtype=torch.int64)
        main_spec = (ov.PartialShape([-1, -1]), ov.Type.i64)
    else:
        main = torch.randn(batch, seq, hidden, dtype=torch.float32)
        main_spec = (ov.PartialShape([-1, -1, hidden]), ov.Type.f32)
    example: list[torch.Tensor] = [
        main,
        torch.ones(batch, past + seq, dtype=torch.int64),
        torch.arange(past, past + seq, dtype=torch.int64).expand(batch, seq).contiguous(),
    ]
    specs = [
        main_spec,
        (ov.PartialShape([-1, -1]), ov.Type.i64),
        (ov.PartialShape([-1, -1]), ov.Type.i64),
    ]
    for _ in io.states:
        example.append(torch.zeros(batch, kv_heads, past, head_dim, dtype=torch.float32))
        specs.append((ov.PartialShape([-1, kv_heads, -1, head_dim]), ov.Type.f32))
    with torch.no_grad(), warnings.catch_warnings(), quiet_openvino_telemetry():
        # HF code turns a few shape checks into Python bools; the values are frozen on purpose
        # (e.g. sdpa's is_causal is always False here because a mask is always passed).
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # Tracing ourselves skips torch's trace check, a second full forward (~15% of the time).
        traced = torch.jit.trace(module, tuple(example), check_trace=False)
        model = ov.convert_model(traced, example_input=tuple(example), input=specs)
    del traced, module
    kv = [
        (layer, kind)
        for layer in range(shard.start_layer, shard.end_layer)
        for kind in ("key", "value")
    ]
    pairs = [(past_name(layer, kind), present_name(layer, kind)) for layer, kind in kv]
    input_names = [*io.inputs[:3], *(past for past, _ in pairs)]
    output_names = [*io.outputs, *(present for _, present in pairs)]
    if len(model.inputs) != len(input_names) or len(model.outputs) != len(output_names):
        raise RuntimeError(
            f"converted stage has {len(model.inputs)} inputs / {len(model.outputs)} outputs, "
            f"expected {len(input_names)} / {len(output_names)}"
        )
    for port, name in zip(model.inputs, input_names, strict=True):
        port.get_tensor().set_names({name})
    for port, name in zip(model.outputs, output_names, strict=True):
        port.get_tensor().set_names({name})
    make_stateful(model, pairs, io.inputs[0], beam_idx_gather=beam_idx_gather)
    model.set_rt_info(shard.model_id, ["fleetgui", "model_id"])
    model.set_rt_info(str(shard.start_layer), ["fleetgui", "start_layer"])
    model.set_rt_info(str(shard.end_layer), ["fleetgui", "end_layer"])
    model.set_rt_info(str(shard.n_layers), ["fleetgui", "n_layers"])
    model.set_rt_info(str(config.model_type), ["fleetgui", "model_type"])
    log.info("converted %s in %.1f s", shard, time.perf_counter() - started)
    return model


def export_stage(
    model_dir: Path,
    shard: Shard,
    out_xml: Path,
    *,
    beam_idx_gather: bool = True,
    compress_to_fp16: bool = False,
) -> StageIO:
    """Export layers ``[shard.start_layer, shard.end_layer)`` of ``model_dir`` to ``out_xml``.

    Weights are streamed from the safetensors checkpoint for this stage only. The IR is stateful
    (KV cache in variables named ``past_key_values.{L}.key|value``) and, with ``beam_idx_gather``,
    has the ``beam_idx`` input whose Gather lets the CPU/GPU plugins fuse attention with the
    cache. Weights are saved in fp32 unless ``compress_to_fp16``. Returns the stage's names.
    """
    model = convert_stage(model_dir, shard, beam_idx_gather=beam_idx_gather)
    out_xml.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, out_xml, compress_to_fp16=compress_to_fp16)
    io = stage_io_names(shard, beam_idx_gather=beam_idx_gather)
    log.info("wrote %s (%s)", out_xml, shard)
    return io
