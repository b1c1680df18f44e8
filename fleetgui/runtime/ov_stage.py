"""A stage that runs an exported OpenVINO shard in this process.

One InferRequest per stream holds that stream's KV state. OpenVINO releases the GIL while it
computes, so stages on different threads overlap. A route runs the stage synchronously
(:meth:`LocalStage.forward_blocking`) on its lane's worker thread, one request at a time in
arrival order (:mod:`fleetgui.runtime.lanes`), which is what interleaves streams across stages;
:meth:`LocalStage.forward` runs it off the event loop under the stage's lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino._pyopenvino import InferRequest as _RawInferRequest

from fleetgui.runtime.head_ops import run_head
from fleetgui.runtime.kv_mask import StreamMask
from fleetgui.runtime.stage import (
    BlockingStage,
    ForwardRequest,
    ForwardResult,
    LogitsHead,
    StageError,
    check_request,
    run_holding,
)
from fleetgui.shard import Shard

log = logging.getLogger(__name__)

PRECISION_HINTS = {"f32": "f32", "bf16": "bf16", "f16": "f16", "f32-dq": "f32"}
# "f32-dq" (chosen by ``loader.safe_stage_config``, not by users): f32 compute for int4/int8
# weights, whose activations the CPU plugin then quantizes to int8 on the fly (its default
# DYNAMIC_QUANTIZATION_GROUP_SIZE) for int8 matrix kernels; the KV cache keeps its default type.


@dataclass(frozen=True)
class StageConfig:
    """How to compile a stage on this PC."""

    device: str = "CPU"
    threads: int = 0  # OpenVINO inference threads; 0: the plugin's default
    precision: str = "auto"  # f32 | bf16 | f16 | auto (see loader.safe_stage_config) | f32-dq
    kv_cache_precision: str | None = None  # e.g. "f32" for bit-exact rewind/compaction tests
    # Pinning puts every compiled model's inference thread on the same first core, so stages in
    # one process would take turns instead of overlapping; let the OS place them.
    cpu_pinning: bool = False
    # several streams a pass with paged attention (runtime/paged_stage.py) where the model's
    # attention allows it (the assembler checks); False: one stream a pass, stateful
    paged: bool = True

    def ov_properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
        if self.device == "CPU":
            props["ENABLE_CPU_PINNING"] = self.cpu_pinning
        if self.threads:
            props["INFERENCE_NUM_THREADS"] = self.threads
        if self.precision != "auto":
            if self.precision not in PRECISION_HINTS:
                raise ValueError(
                    f"unknown precision {self.precision!r}: choose f32, bf16, f16 or auto"
                )
            props["INFERENCE_PRECISION_HINT"] = PRECISION_HINTS[self.precision]
        if self.kv_cache_precision:
            props["KV_CACHE_PRECISION"] = self.kv_cache_precision
        elif self.precision == "f32":
            props["KV_CACHE_PRECISION"] = "f32"
        if self.precision == "f32" and self.device == "CPU":
            # no int8 activations either: the plugin rounds them differently for different
            # numbers of positions a pass, so a K+1-position verify could disagree with
            # one-position decoding at a near-tie (int8 demo target with them on: 1 of 20
            # scripted-K runs differed from PP; with them off, none)
            props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
        return props


@dataclass
class _StreamSlot:
    requests: list[ov.InferRequest]  # one per part of the stage, in order
    mask: StreamMask = field(default_factory=StreamMask)

    @property
    def last(self) -> ov.InferRequest:
        return self.requests[-1]


def input_dtypes(compiled: ov.CompiledModel) -> dict[str, np.dtype[Any]]:
    """The numpy type of each input of ``compiled``, by name."""
    return {port.get_any_name(): port.get_element_type().to_dtype() for port in compiled.inputs}


def _as_tensors(inputs: dict[str, Any], dtypes: dict[str, np.dtype[Any]]) -> dict[str, ov.Tensor]:
    """``inputs`` as OpenVINO tensors over the same memory where they can be (arrays of the
    input's type, C-contiguous and writeable); other arrays are converted into a copy."""
    return {
        name: ov.Tensor(
            np.require(value, dtype=dtypes.get(name), requirements=("C", "W")),
            shared_memory=True,
        )
        for name, value in inputs.items()
    }


def infer_now(
    request: ov.InferRequest, inputs: dict[str, Any], dtypes: dict[str, np.dtype[Any]]
) -> None:
    """Run ``request`` on ``inputs`` (with ``dtypes`` from :func:`input_dtypes`) and wait for
    the result.

    The inputs become tensors over the caller's arrays (no copy; the caller keeps them alive and
    unchanged until this returns) and go straight to the C++ request: OpenVINO's Python input
    dispatcher looked every input tensor up on the request to check its type, about 0.2 ms a
    call, twice per token in a 2-stage pipeline (py-spy)."""
    _RawInferRequest.infer(request, _as_tensors(inputs, dtypes), True, False)


def keep_outputs(model: ov.Model, names: Collection[str]) -> ov.Model:
    """``model`` with only the outputs named ``names`` (its state and inputs unchanged)."""
    wanted = set(names)
    kept = [r for r in model.get_results() if r.output(0).get_names() & wanted]
    missing = wanted - {n for r in kept for n in r.output(0).get_names()}
    if missing:
        raise ValueError(
            f"the model {model.get_friendly_name()} has no output named {sorted(missing)}; "
            f"it has {sorted(o.get_any_name() for o in model.outputs)}"
        )
    return ov.Model(kept, model.get_sinks(), model.get_parameters(), model.get_friendly_name())


class LocalStage(BlockingStage):
    """An exported stage (``stage_*.xml`` or a monolithic model) compiled in this process.

    A stage exported in chunks has several models ("parts"); they run one after another on the
    same stream mask, each with its own KV state.
    """

    def __init__(
        self,
        index: int,
        shard: Shard,
        model_path: Path | Sequence[Path],
        config: StageConfig | None = None,
        *,
        core: ov.Core | None = None,
        outputs: Collection[str] | None = None,
    ) -> None:
        """``outputs``: keep only these outputs of the last part (the graph that feeds only
        the others is not compiled), e.g. ``{"logits"}`` for a draft, which never reads the
        top-1 head."""
        self.index = index
        self.shard = shard
        self.config = config or StageConfig()
        core = core or ov.Core()
        started = time.perf_counter()
        paths = [model_path] if isinstance(model_path, Path | str) else list(model_path)
        models: list[str | ov.Model] = [str(path) for path in paths]
        if outputs is not None:
            models[-1] = keep_outputs(core.read_model(str(paths[-1])), outputs)
        self._parts = [
            core.compile_model(model, self.config.device, self.config.ov_properties())
            for model in models
        ]
        self._inputs = [{port.get_any_name() for port in c.inputs} for c in self._parts]
        self._dtypes = [input_dtypes(c) for c in self._parts]
        self._outputs = {port.get_any_name() for port in self._parts[-1].outputs}
        self._hidden = _static_dim(self._parts[0], "hidden_in", 2)
        self._streams: dict[int, _StreamSlot] = {}
        self._lock = asyncio.Lock()
        # [batch, kv_heads, tokens, head_dim] per state: a token's key or value in one layer
        self._kv_elements = sum(
            int(state.state.shape[1]) * int(state.state.shape[3])
            for compiled in self._parts
            for state in compiled.create_infer_request().query_state()
        )
        log.info(
            "stage %d (%s) compiled on %s in %.1f s",
            index,
            shard,
            self.config.device,
            time.perf_counter() - started,
        )

    @property
    def is_first(self) -> bool:
        """Whether the stage starts the model (it takes token ids)."""
        return "input_ids" in self._inputs[0]

    @property
    def is_last(self) -> bool:
        return "logits" in self._outputs

    @property
    def outputs(self) -> frozenset[str]:
        """The names of the outputs the stage computes (of its last part)."""
        return frozenset(self._outputs)

    @property
    def hidden_width(self) -> int | None:
        """The width of the hidden states a non-first stage takes (None: not fixed)."""
        return self._hidden

    def _slot(self, stream_id: int) -> _StreamSlot:
        slot = self._streams.get(stream_id)
        if slot is None:
            slot = _StreamSlot([compiled.create_infer_request() for compiled in self._parts])
            self._streams[stream_id] = slot
        return slot

    def stream_ids(self) -> list[int]:
        """The streams that hold state on this stage."""
        return list(self._streams)

    def kv_token_bytes(self, element_bytes: int) -> int:
        """One token's KV in this stage's layers, at ``element_bytes`` an element."""
        return self._kv_elements * element_bytes

    def mask_of(self, stream_id: int) -> StreamMask:
        return self._slot(stream_id).mask

    def _compact(self, slot: _StreamSlot) -> None:
        keep = slot.mask.live_indices()
        for request in slot.requests:
            for state in request.query_state():
                data = state.state.data
                state.state = ov.Tensor(np.ascontiguousarray(data[:, :, keep, :]))
        slot.mask.compacted()

    @property
    def lock(self) -> asyncio.Lock:
        return self._lock

    def check(self, request: ForwardRequest) -> None:
        """Raise :class:`StageError` for a request outside this stage's contract, before it
        changes anything (:func:`~fleetgui.runtime.stage.check_request`)."""
        slot = self._streams.get(request.stream_id)
        live = slot.mask.live if slot is not None else 0
        check_request(
            request, index=self.index, first=self.is_first, hidden=self._hidden, live=live
        )

    def _begin(self, request: ForwardRequest) -> tuple[_StreamSlot, list[dict[str, Any]]]:
        """Apply the request's rewind and compaction and advance the stream's mask; the stream
        and the inputs of the first part (later parts take the previous part's output)."""
        self.check(request)
        slot = self._slot(request.stream_id)
        if request.keep is not None and slot.mask.live > request.keep:
            slot.mask.rewind(slot.mask.live - request.keep)
        if request.rewind:
            slot.mask.rewind(request.rewind)
        if request.compact and slot.mask.masked:  # nothing to drop, e.g. a fresh stream
            self._compact(slot)
        attention_mask, positions = slot.mask.advance(request.n_positions)
        attention_mask = attention_mask.copy()  # the mask buffer changes on rewind
        inputs = []
        for names in self._inputs:
            part: dict[str, Any] = {"attention_mask": attention_mask, "position_ids": positions}
            if "beam_idx" in names:
                part["beam_idx"] = np.zeros(1, dtype=np.int32)
            inputs.append(part)
        main = "input_ids" if "input_ids" in self._inputs[0] else "hidden_in"
        inputs[0][main] = request.payload
        return slot, inputs

    @staticmethod
    def _link(slot: _StreamSlot, inputs: list[dict[str, Any]], part: int) -> dict[str, Any]:
        """The inputs of ``part``: a later part takes the previous part's hidden states."""
        if part:
            inputs[part]["hidden_in"] = slot.requests[part - 1].get_tensor("hidden_out").data
        return inputs[part]

    def _finish(self, slot: _StreamSlot, request: ForwardRequest, started: float) -> ForwardResult:
        result = ForwardResult(request.stream_id)
        if self.is_last:
            if isinstance(request.head, LogitsHead):
                result.logits = slot.last.get_tensor("logits").data[0, -1].copy()
            elif request.head is not None:
                result.tokens, result.accepted, result.logprobs = run_head(
                    request.head, slot.last, has_top1="top1_ids" in self._outputs
                )
        else:
            result.payload = slot.last.get_tensor("hidden_out").data.copy()
        result.compute_ms[self.index] = (time.perf_counter() - started) * 1000
        return result

    def _failed(self, request: ForwardRequest, exc: Exception) -> StageError:
        return StageError(
            f"stage {self.index} ({self.shard}) failed on stream {request.stream_id}: {exc}"
        )

    async def forward(self, request: ForwardRequest) -> ForwardResult:
        return await run_holding([self], self.forward_blocking, request)

    def forward_blocking(self, request: ForwardRequest) -> ForwardResult:
        started = time.perf_counter()
        try:
            slot, inputs = self._begin(request)
            for part, infer in enumerate(slot.requests):
                infer_now(infer, self._link(slot, inputs, part), self._dtypes[part])
            return self._finish(slot, request, started)  # the head reads what the peer sent
        except StageError:
            raise
        except Exception as exc:
            raise self._failed(request, exc) from exc

    async def rewind(self, stream_id: int, n_positions: int) -> None:
        self._slot(stream_id).mask.rewind(n_positions)

    async def reset(self, stream_id: int) -> None:
        slot = self._slot(stream_id)
        async with self._lock:
            for infer in slot.requests:
                infer.reset_state()
            slot.mask.reset()

    async def release(self, stream_id: int) -> None:
        async with self._lock:
            self.release_blocking(stream_id)

    def release_blocking(self, stream_id: int) -> None:
        """:meth:`release` for a caller that runs the stage's passes itself."""
        self._streams.pop(stream_id, None)

    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        await run_holding([self], self.fork_blocking, source, stream_id, keep)

    def fork_blocking(self, source: int, stream_id: int, keep: int) -> None:
        """:meth:`fork`, synchronously (a copy of up to a few hundred MB), for a caller that
        holds :attr:`lock` or runs the stage's lane."""
        origin = self._streams.get(source)
        live = origin.mask.live if origin is not None else 0
        if origin is None or source == stream_id or not 0 < keep <= live:
            raise StageError(
                f"stage {self.index}: cannot start stream {stream_id} from {keep} positions of "
                f"stream {source}, which holds {live} here"
            )
        entries = origin.mask.live_indices()[:keep]
        slot = _StreamSlot([compiled.create_infer_request() for compiled in self._parts])
        for copy, original in zip(slot.requests, origin.requests, strict=True):
            states = {state.name: state for state in original.query_state()}
            for state in copy.query_state():
                data = states[state.name].state.data
                state.state = ov.Tensor(np.ascontiguousarray(data[:, :, entries, :]))
        slot.mask.advance(keep)
        self._streams[stream_id] = slot

    async def close(self) -> None:
        self._streams.clear()


def _static_dim(compiled: ov.CompiledModel, name: str, axis: int) -> int | None:
    """The static size of input ``name``'s ``axis``, or None (no such input, or dynamic)."""
    for port in compiled.inputs:
        if name in port.get_names():
            dim = port.get_partial_shape()[axis]
            return dim.get_length() if dim.is_static else None
    return None
