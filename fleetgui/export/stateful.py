"""Hide a stage's explicit KV inputs/outputs in OpenVINO state, with optimum's beam_idx Gather.

The traced stage has ``past_key_values.{L}.key|value`` inputs and ``present.{L}.key|value``
outputs (``L`` the global layer index). ``make_stateful`` turns each pair into a
``ReadValue -> [Gather(beam_idx, axis 0)] -> ... -> Assign`` over a variable with the same name as
the past input, i.e. what optimum-intel's ``fuse_cache_reorder`` + ``make_stateful`` do, written
against the public OpenVINO API. The Gather is what lets the CPU plugin's ``StatefulSDPAFusion``
(and the GPU plugin's IndirectKVCache) fuse the cache into the attention node.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import openvino as ov
from openvino import opset13
from openvino.op.util import Variable, VariableInfo

log = logging.getLogger(__name__)

BEAM_IDX = "beam_idx"
# Runtime ``layerType`` of the CPU plugin's attention node, fused with its KV state or not.
SDPA_LAYER_TYPE = "ScaledDotProductAttention"


def _zero_state_init(
    batch: ov.Output, shape: ov.PartialShape, element_type: ov.Type, seq_axis: int
) -> ov.Node:
    """An all-zero ``[batch, ..., 0 (seq), ...]`` tensor: the value of a state before any write."""
    dims: list[ov.Output | ov.Node] = []
    for axis, dim in enumerate(shape):
        if axis == 0:
            dims.append(batch)
        elif axis == seq_axis:
            dims.append(opset13.constant(np.array([0], dtype=np.int64)))
        elif dim.is_static:
            dims.append(opset13.constant(np.array([dim.get_length()], dtype=np.int64)))
        else:
            raise ValueError(f"KV state axis {axis} of shape {shape} must be static")
    target = opset13.concat(dims, axis=0)
    return opset13.broadcast(opset13.constant(0.0, dtype=element_type), target)


def make_stateful(
    model: ov.Model,
    kv_pairs: Sequence[tuple[str, str]],
    main_input: str,
    *,
    beam_idx_gather: bool = True,
    seq_axis: int = 2,
) -> list[str]:
    """Replace each ``(past input, present output)`` pair of ``model`` by a state variable.

    The variable is named after the past input. With ``beam_idx_gather`` a ``beam_idx`` i32
    ``[batch]`` input is added and every ReadValue is reordered by ``Gather(beam_idx, axis=0)``
    before any use. The states start as zero-length along ``seq_axis``, with the batch size read
    from ``main_input``. Modifies ``model`` in place and returns the state names in order.
    """
    main = model.input(main_input)
    batch = opset13.gather(
        opset13.shape_of(main, output_type="i64"), opset13.constant([0]), opset13.constant(0)
    ).output(0)
    beam_idx = None
    if beam_idx_gather:
        beam_idx = opset13.parameter(ov.PartialShape([-1]), ov.Type.i32, name=BEAM_IDX)
        beam_idx.output(0).get_tensor().set_names({BEAM_IDX})
        model.add_parameters([beam_idx])
    state_names: list[str] = []
    for past_name, present_name in kv_pairs:
        past_port = model.input(past_name)
        parameter = past_port.get_node()
        result = model.output(present_name).get_node()
        info = VariableInfo()
        info.variable_id = past_name
        info.data_shape = parameter.get_output_partial_shape(0)
        info.data_type = parameter.get_output_element_type(0)
        variable = Variable(info)
        init = _zero_state_init(batch, info.data_shape, info.data_type, seq_axis)
        read = opset13.read_value(init, variable)
        source = read.output(0)
        if beam_idx is not None:
            source = opset13.gather(source, beam_idx, opset13.constant(0)).output(0)
        for consumer in past_port.get_target_inputs():
            consumer.replace_source_output(source)
        present = result.input_value(0)
        if present.get_index() != 0:  # Assign's Python binding takes a node, i.e. its output 0
            present = opset13.convert(present, info.data_type).output(0)
        assign = opset13.assign(present.get_node(), variable)
        model.remove_result(result)
        model.remove_parameter(parameter)
        model.add_variables([variable])
        model.add_sinks([assign])
        state_names.append(past_name)
    model.validate_nodes_and_infer_types()
    log.debug("made %d states (beam_idx gather: %s)", len(state_names), beam_idx_gather)
    return state_names


def _layer_type(node: ov.Node) -> str:
    info = node.get_rt_info()
    return str(info["layerType"].astype(str)) if "layerType" in info else ""


def fused_attention_nodes(compiled: ov.CompiledModel) -> int:
    """How many attention nodes the plugin fused with their stateful KV cache.

    On the CPU plugin (2026.4) ``StatefulSDPAFusion`` turns ``ReadValue -> Gather(beam_idx) ->
    Concat -> SDPA`` + ``Assign`` into one node whose ``layerType`` is still
    ``ScaledDotProductAttention`` but which reads the KV state itself (``MemoryInput`` inputs) and
    writes it (``MemoryOutput`` consumers). Without the fusion the stage keeps a Concat per KV
    tensor and the attention is either a plain SDPA node or decomposed into MatMul/Softmax.
    """
    count = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        if _layer_type(op) != SDPA_LAYER_TYPE:
            continue
        reads_state = any(
            _layer_type(port.get_source_output().get_node()) == "MemoryInput"
            for port in op.inputs()
        )
        writes_state = any(
            _layer_type(target.get_node()) == "MemoryOutput"
            for output in op.outputs()
            for target in output.get_target_inputs()
        )
        count += reads_state and writes_state
    return count
