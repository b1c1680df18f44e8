"""A stage that runs several streams in one pass: paged attention over a pool of KV blocks.

The stage's graph is converted to paged attention (:mod:`fleetgui.runtime.paged_graph`) and
compiled once; one InferRequest runs every pass. Each stream's KV lives in blocks of a pool the
stage owns (:class:`~fleetgui.runtime.kv_blocks.KvBlocks`), so a pass carries any mix of decode
steps, speculative verify windows and prompt chunks of streams of any lengths, laid end to end,
and costs about what its tokens cost, not one pass per stream. A rewind shortens a stream (the
next tokens overwrite the rejected ones: nothing stays masked, so compaction has nothing to do)
and a copied prefix shares the source's blocks until one side writes into them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from fleetgui.runtime.head_ops import run_head
from fleetgui.runtime.kv_blocks import KvBlocks, KvBlocksError
from fleetgui.runtime.ov_stage import StageConfig, infer_now, input_dtypes
from fleetgui.runtime.paged_graph import BLOCK_SIZE, cache_layouts, paged_model
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


@dataclass(frozen=True, slots=True)
class _Rows:
    """The outputs of one stream's tokens in a pass, shaped ``[1, n, ...]`` as a stage of one
    stream returns them, for :func:`~fleetgui.runtime.head_ops.run_head`."""

    request: ov.InferRequest
    begin: int
    end: int

    def get_tensor(self, name: str) -> _Data:
        return _Data(self.request.get_tensor(name).data[self.begin : self.end, 0][None])


@dataclass(frozen=True, slots=True)
class _Data:
    data: np.ndarray


class _Part:
    """One compiled model of the stage (a stage exported in chunks has several) and its
    cache tensors."""

    def __init__(self, compiled: ov.CompiledModel) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.dtypes = input_dtypes(compiled)
        self.layouts = cache_layouts(compiled)
        # each cache as OpenVINO holds it (bf16 has no numpy type: ``.data`` views its bytes)
        self.tensors: dict[str, ov.Tensor] = {}

    def grow(self, capacity: int) -> None:
        """Enlarge every cache to ``capacity`` blocks, keeping what the blocks hold."""
        for name, (block, element) in self.layouts.items():
            tensor = ov.Tensor(element, [capacity, *block])
            old = self.tensors.get(name)
            if old is not None:
                held = old.data
                tensor.data[: len(held)] = held  # same itemsize: the bytes as they are
            self.tensors[name] = tensor
            self.request.set_tensor(name, tensor)

    def copy_blocks(self, copies: Sequence[tuple[int, int]]) -> None:
        if not copies:
            return
        sources = [source for source, _ in copies]
        targets = [target for _, target in copies]
        for tensor in self.tensors.values():
            cache = tensor.data
            cache[targets] = cache[sources]


def _context_bound(longest: int) -> int:
    """What a pass tells the kernel its longest stream may be: the next power of two (256 at
    least). With the exact length every pass that started a KV block cost more, as if the
    kernel made its scratch buffers again whenever the bound grew (docs/performance.md)."""
    return max(256, 1 << (int(longest) - 1).bit_length())


class PagedStage(BlockingStage):
    """An exported stage compiled with paged attention (see module doc); the same contract as
    :class:`~fleetgui.runtime.ov_stage.LocalStage`, plus :meth:`forward_batch_blocking`."""

    def __init__(
        self,
        index: int,
        shard: Shard,
        model_path: Path | Sequence[Path],
        config: StageConfig | None = None,
        *,
        core: ov.Core | None = None,
    ) -> None:
        self.index = index
        self.shard = shard
        self.config = config or StageConfig()
        core = core or ov.Core()
        started = time.perf_counter()
        paths = [model_path] if isinstance(model_path, Path | str) else list(model_path)
        properties = self.config.ov_properties()
        # f16 unless set (f32 for exact runs): beside f32 it decoded 8 rows faster and holds
        # half; the plugin's u8 decoded one row 1.3x slower (docs/performance.md)
        properties.setdefault("KV_CACHE_PRECISION", "f16")
        self._parts = [
            _Part(
                core.compile_model(
                    paged_model(core.read_model(str(path))), self.config.device, properties
                )
            )
            for path in paths
        ]
        first = self._parts[0].compiled
        self._main = "input_ids" if "input_ids" in self._parts[0].dtypes else "inputs_embeds"
        self._hidden = None
        if self._main == "inputs_embeds":
            dim = next(p for p in first.inputs if p.get_any_name() == "inputs_embeds")
            width = dim.get_partial_shape()[1]
            self._hidden = width.get_length() if width.is_static else None
        self._outputs = {port.get_any_name() for port in self._parts[-1].compiled.outputs}
        self._kv_elements = sum(
            block[0] * block[-1] for part in self._parts for block, _ in part.layouts.values()
        )
        self._blocks = KvBlocks(BLOCK_SIZE, self._grow)
        self._lock = asyncio.Lock()
        # the block tables change on the pass's thread and, for release and close, on the
        # event loop's: each change is whole under this lock (never held while computing)
        self._books = threading.Lock()
        # one pass at a time: the stage has one request, and a pass may come from the event
        # loop's thread (a short one) while a lane's thread runs another
        self._computing = threading.Lock()
        log.info(
            "stage %d (%s) compiled with paged attention on %s in %.1f s",
            index,
            shard,
            self.config.device,
            time.perf_counter() - started,
        )

    # -- what the stage is --------------------------------------------------------------------

    @property
    def is_first(self) -> bool:
        return self._main == "input_ids"

    @property
    def hidden_width(self) -> int | None:
        """The width of the hidden states a non-first stage takes (None: not fixed)."""
        return self._hidden

    @property
    def is_last(self) -> bool:
        return "logits" in self._outputs

    @property
    def outputs(self) -> frozenset[str]:
        return frozenset(self._outputs)

    @property
    def lock(self) -> asyncio.Lock:
        return self._lock

    def stream_ids(self) -> list[int]:
        return self._blocks.streams()

    def held(self, stream_id: int) -> int:
        """Tokens of the stream's KV this stage holds."""
        return self._blocks.length(stream_id)

    def kv_token_bytes(self, element_bytes: int) -> int:
        """One token's KV in this stage's layers, at ``element_bytes`` an element."""
        return self._kv_elements * element_bytes

    @property
    def blocks_in_use(self) -> int:
        return self._blocks.blocks_in_use

    def _grow(self, capacity: int) -> None:
        for part in self._parts:
            part.grow(capacity)
        log.debug("stage %d: KV pool of %d blocks", self.index, capacity)

    # -- passes -------------------------------------------------------------------------------

    def check(self, request: ForwardRequest) -> None:
        """Raise :class:`StageError` for a request outside this stage's contract, before it
        changes anything."""
        live = self._blocks.length(request.stream_id)
        check_request(
            request, index=self.index, first=self.is_first, hidden=self._hidden, live=live
        )

    async def forward(self, request: ForwardRequest) -> ForwardResult:
        return await run_holding([self], self.forward_blocking, request)

    def forward_blocking(self, request: ForwardRequest) -> ForwardResult:
        return self.forward_batch_blocking([request])[0]

    def forward_batch_blocking(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        """One pass over every request's positions (each of another stream), on the calling
        thread; each stream's result as a pass of its own would return it."""
        started = time.perf_counter()
        streams = [request.stream_id for request in requests]
        if len(set(streams)) != len(streams):
            raise StageError(f"stage {self.index}: a pass carries stream(s) twice: {streams}")
        with self._computing:
            return self._forward_batch(requests, streams, started)

    def _forward_batch(
        self, requests: Sequence[ForwardRequest], streams: list[int], started: float
    ) -> list[ForwardResult]:
        try:
            with self._books:
                for request in requests:
                    self.check(request)
                lengths, tables = self._make_room(requests)
            ends = np.cumsum([request.n_positions for request in requests])
            self._run(requests, ends, lengths, tables)
            results = self._results(requests, ends, started)
            with self._books:  # a stream released meanwhile (the pipeline closing) stays so
                for request in requests:
                    if self._blocks.holds(request.stream_id):
                        self._blocks.advance(request.stream_id, request.n_positions)
            return results
        except StageError:
            raise
        except Exception as exc:
            raise StageError(
                f"stage {self.index} ({self.shard}) failed on stream(s) {streams}: {exc}"
            ) from exc

    def _make_room(self, requests: Sequence[ForwardRequest]) -> tuple[list[int], list[list[int]]]:
        """Apply each request's keep and rewind and reserve blocks for its positions; each
        stream's length before the pass and its block table."""
        for request in requests:
            held = self._blocks.length(request.stream_id)
            if request.keep is not None:
                held = min(held, request.keep)
            self._blocks.truncate(request.stream_id, held - request.rewind)
        copies = [
            copy
            for request in requests
            for copy in self._blocks.reserve(request.stream_id, request.n_positions)
        ]
        for part in self._parts:
            part.copy_blocks(copies)
        lengths = [self._blocks.length(request.stream_id) for request in requests]
        return lengths, [self._blocks.table(request.stream_id) for request in requests]

    def _run(
        self,
        requests: Sequence[ForwardRequest],
        ends: np.ndarray,
        lengths: list[int],
        tables: list[list[int]],
    ) -> None:
        sizes = [request.n_positions for request in requests]
        shared: dict[str, Any] = {
            "position_ids": np.concatenate(
                [
                    np.arange(held, held + n, dtype=np.int64)
                    for held, n in zip(lengths, sizes, strict=True)
                ]
            ),
            "past_lens": np.array(lengths, dtype=np.int32),
            "subsequence_begins": np.concatenate([[0], ends]).astype(np.int32),
            "block_indices_begins": np.cumsum([0] + [len(t) for t in tables]).astype(np.int32),
            "block_indices": np.array([b for table in tables for b in table], dtype=np.int32),
            "max_context_len": np.array(_context_bound(max(np.add(lengths, sizes))), np.int32),
        }
        main = np.concatenate([request.payload[0] for request in requests])
        for position, part in enumerate(self._parts):
            name = "input_ids" if position == 0 and self.is_first else "inputs_embeds"
            if position:
                main = self._parts[position - 1].request.get_tensor("hidden_out").data[:, 0]
            infer_now(part.request, {**shared, name: main}, part.dtypes)

    def _results(
        self, requests: Sequence[ForwardRequest], ends: np.ndarray, started: float
    ) -> list[ForwardResult]:
        last = self._parts[-1].request
        ms = (time.perf_counter() - started) * 1000
        results = []
        for request, end in zip(requests, ends, strict=True):
            begin = int(end) - request.n_positions
            result = ForwardResult(request.stream_id)
            if self.is_last:
                if isinstance(request.head, LogitsHead):
                    result.logits = last.get_tensor("logits").data[int(end) - 1, 0].copy()
                elif request.head is not None:
                    result.tokens, result.accepted, result.logprobs = run_head(
                        request.head,
                        _Rows(last, begin, int(end)),
                        has_top1="top1_ids" in self._outputs,
                    )
            else:
                result.payload = (
                    last.get_tensor("hidden_out").data[begin : int(end), 0][None].copy()
                )
            result.compute_ms[self.index] = ms
            results.append(result)
        return results

    # -- stream lifecycle ---------------------------------------------------------------------

    async def rewind(self, stream_id: int, n_positions: int) -> None:
        held = self._blocks.length(stream_id)
        if not 0 <= n_positions <= held:
            raise StageError(
                f"stage {self.index}: cannot rewind {n_positions} of stream {stream_id}'s "
                f"{held} positions"
            )
        with self._books:
            self._blocks.truncate(stream_id, held - n_positions)

    async def reset(self, stream_id: int) -> None:
        async with self._lock:
            with self._books:
                self._blocks.truncate(stream_id, 0)

    async def release(self, stream_id: int) -> None:
        async with self._lock:
            self.release_blocking(stream_id)

    def release_blocking(self, stream_id: int) -> None:
        """:meth:`release` for a caller that runs the stage's passes itself."""
        with self._books:
            self._blocks.release(stream_id)

    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        await run_holding([self], self.fork_blocking, source, stream_id, keep)

    def fork_blocking(self, source: int, stream_id: int, keep: int) -> None:
        """:meth:`fork`: the new stream shares the source's blocks (nothing is copied now)."""
        try:
            with self._books:
                self._blocks.fork(source, stream_id, keep)
        except KvBlocksError as exc:
            raise StageError(f"stage {self.index}: {exc}") from None

    async def close(self) -> None:
        with self._books:
            for stream_id in self._blocks.streams():
                self._blocks.release(stream_id)
