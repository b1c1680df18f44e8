"""The stage interface the coordinator drives, in-process or on a remote worker.

A stage holds one contiguous layer range (a ``Shard``) and, per stream, its own KV state. The
coordinator sends it a ``ForwardRequest``: rewind the stream's cache by some positions (the
paper's mask-based rewind), optionally compact it, then run ``n`` new positions. Every stage of a
pipeline applies the same rewind and compaction to its own mask, so masks never travel. The last
stage runs a ``HeadOp`` on its logits, so only token ids (never full logits) leave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.head import SparseDist
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.token_mask import TokenMask
from fleetgui.shard import Shard

# Short work may run on the event loop's thread instead of going to a worker thread and back,
# which costs more than a small pass on this machine's virtual CPUs (a wake-up each way, and the
# GIL handed over): passes of at most SHORT_PASS_POSITIONS positions (decode steps, speculative
# verifies; not prompt chunks) that last took at most SHORT_WORK_MS. 5 ms holds up neither the
# app's window (a frame is 16 ms) nor another stream for long.
SHORT_PASS_POSITIONS = 32
SHORT_WORK_MS = 5.0


def fits_inline(expected_ms: float | None, budget_ms: float) -> bool:
    """Whether work expected to take ``expected_ms`` (None: not measured yet) may run on the
    event loop's thread under ``budget_ms``. Unmeasured work fits only an unlimited budget
    (``math.inf``); otherwise it goes to a thread once, which measures it."""
    return (math.inf if expected_ms is None else expected_ms) <= budget_ms


@dataclass(frozen=True, slots=True)
class GreedyHead:
    """Return the argmax token at the last position (prefill, plain decode)."""

    mask: TokenMask | None = None  # a constrained answer: the tokens it may take
    logprobs: int | None = None  # report the chosen tokens' log-probabilities, and this many top


@dataclass(frozen=True, slots=True)
class SampleHead:
    """Sample the token at the last position from the target's distribution with ``u``."""

    config: GenerationConfig  # the head reads its sampling fields
    u: float
    mask: TokenMask | None = None
    logprobs: int | None = None


@dataclass(frozen=True, slots=True)
class VerifyGreedyHead:
    """Speculative verification of ``drafts`` (the last ``len(drafts)`` positions) by argmax."""

    drafts: tuple[int, ...]
    mask: TokenMask | None = None  # a row per position: now, then after each draft
    logprobs: int | None = None


@dataclass(frozen=True, slots=True)
class VerifySampleHead:
    """Speculative sampling (Leviathan et al.) of ``drafts`` against the target's probabilities;
    ``draft_dists`` are the draft's distributions the drafts were sampled from."""

    config: GenerationConfig  # the head reads its sampling fields
    drafts: tuple[int, ...]
    draft_dists: tuple[SparseDist, ...]
    u_accept: tuple[float, ...]
    u_resample: float
    mask: TokenMask | None = None  # a row per position: now, then after each draft
    logprobs: int | None = None


@dataclass(frozen=True, slots=True)
class LogitsHead:
    """Return the last position's full logits. Only for a model in the coordinator's own process
    (the draft): logits never cross the network."""


HeadOp = GreedyHead | SampleHead | VerifyGreedyHead | VerifySampleHead | LogitsHead


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    """Run ``n_positions`` new positions of one stream through a stage."""

    stream_id: int
    payload: np.ndarray  # token ids [1, n] int64 (first stage) or hidden states [1, n, hidden]
    rewind: int = 0  # first mask out this many of the stream's newest live KV entries
    compact: bool = False  # then drop masked entries from the cache (before this forward)
    head: HeadOp | None = None  # last stage: what to return; None: nothing (prefill chunks)
    # before the rewind: mask out the live entries beyond the first ``keep`` (None: none). A
    # resumed stream's cache may hold steps a decode run computed ahead that nobody read; what
    # the coordinator knows is how many it fed, so it says how many to keep, not to drop.
    keep: int | None = None

    @property
    def n_positions(self) -> int:
        return int(self.payload.shape[1])


@dataclass(slots=True)
class ForwardResult:
    """What a stage returns: hidden states for the next stage, or the head's tokens."""

    stream_id: int
    payload: np.ndarray | None = None  # hidden states [1, n, hidden] (non-last stages)
    tokens: list[int] = field(default_factory=list)  # head output: new committed tokens
    accepted: int = 0  # speculative verification: drafts accepted
    logits: np.ndarray | None = None  # LogitsHead only: [vocab] of the last position
    compute_ms: dict[int, float] = field(default_factory=dict)  # stage index -> ms
    logprobs: tuple[TokenLogprob, ...] = ()  # of ``tokens``, when the head was asked


class StageError(RuntimeError):
    """A stage failed to run a request (the message names the stage and the stream)."""


def check_request(
    request: ForwardRequest, *, index: int, first: bool, hidden: int | None, live: int
) -> None:
    """Raise :class:`StageError` for a request outside stage ``index``'s contract (``first``:
    it takes token ids, else hidden states of width ``hidden``; ``live``: the positions it
    holds of the stream), before it changes anything: a peer's FORWARD with a batch of 2
    reached OpenVINO, broke the stream's state for every later request and, later, the
    worker process."""
    payload = request.payload
    if first:
        wanted = "token ids [1, n]"
        fits = payload.ndim == 2 and payload.dtype.kind in "iu"
    else:
        wanted = f"hidden states [1, n, {hidden or 'hidden'}]"
        fits = payload.ndim == 3 and payload.dtype.kind == "f"
        fits = fits and hidden in (None, payload.shape[2])
    if not fits or payload.shape[0] != 1 or payload.shape[1] < 1:
        raise StageError(
            f"stage {index} takes {wanted}, got {payload.dtype} {tuple(payload.shape)}"
        )
    if request.keep is not None:
        if not 0 <= request.keep <= live:
            raise StageError(
                f"stage {index}: cannot keep {request.keep} of stream "
                f"{request.stream_id}'s {live} positions"
            )
        live = request.keep
    if not 0 <= request.rewind <= live:
        raise StageError(
            f"stage {index}: cannot rewind {request.rewind} of stream "
            f"{request.stream_id}'s {live} positions"
        )


class Stage(ABC):
    """One pipeline stage: a layer range with per-stream KV state."""

    index: int
    shard: Shard

    @abstractmethod
    async def forward(self, request: ForwardRequest) -> ForwardResult:
        """Apply the request's rewind/compaction, run its positions, return the output."""

    @abstractmethod
    async def rewind(self, stream_id: int, n_positions: int) -> None:
        """Mask out the stream's ``n_positions`` newest live KV entries."""

    @abstractmethod
    async def reset(self, stream_id: int) -> None:
        """Forget the stream's KV cache (keep its resources for reuse)."""

    @abstractmethod
    async def release(self, stream_id: int) -> None:
        """Free everything the stream holds on this stage."""

    @abstractmethod
    async def fork(self, source: int, stream_id: int, keep: int) -> None:
        """Start ``stream_id`` (whatever it held is dropped) with a copy of the first ``keep``
        live KV entries of stream ``source``, which stays as it is; raises
        :class:`StageError` when ``source`` does not hold ``keep`` live entries here."""

    @abstractmethod
    async def close(self) -> None:
        """Release every stream and the stage's model."""


class BlockingStage(Stage):
    """A stage that can also run a forward synchronously, on a thread other than the event
    loop's, while its caller holds :attr:`lock`.

    Every wake-up of another thread costs here (0.3-0.4 ms on this machine's virtual CPUs), and
    a forward from the loop takes two: the worker thread's start and the loop's wake-up. A
    caller with several forwards in a row (a local route's stages, a draft's K proposals) runs
    them all on one thread instead.
    """

    @property
    @abstractmethod
    def lock(self) -> asyncio.Lock:
        """Held by whoever runs this stage; :meth:`forward` takes it itself."""

    @abstractmethod
    def stream_ids(self) -> list[int]:
        """The streams that hold state on this stage."""

    @abstractmethod
    def forward_blocking(self, request: ForwardRequest) -> ForwardResult:
        """:meth:`forward`, synchronously, off the loop; the caller runs nothing else on this
        stage meanwhile (it holds :attr:`lock`, or is the stage's lane in a local route)."""

    def forward_batch_blocking(self, requests: Sequence[ForwardRequest]) -> list[ForwardResult]:
        """Each request (of another stream each) as :meth:`forward_blocking` runs it; a stage
        that computes several streams in one pass overrides this."""
        return [self.forward_blocking(request) for request in requests]


_T = TypeVar("_T")


async def run_off_loop(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` on the loop's default executor. If the caller is cancelled, ``fn`` still
    runs to its end (it holds stage state) before the cancellation goes on."""
    future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise


async def run_holding(stages: Sequence[BlockingStage], fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` off the loop (:func:`run_off_loop`) while holding every stage's
    :attr:`~BlockingStage.lock`, taken in the stages' order (the order every caller takes
    them in, so two callers never wait on each other's half)."""
    async with contextlib.AsyncExitStack() as held:
        for stage in stages:
            await held.enter_async_context(stage.lock)
        return await run_off_loop(fn, *args)
