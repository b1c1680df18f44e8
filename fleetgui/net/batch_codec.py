"""A pass of several streams as one message per hop: FORWARD_BATCH and RESULT_BATCH.

A batch carries each stream's request (or result) as the single-stream codec does
(:mod:`fleetgui.net.forward_codec`), with the payloads laid end to end in one tensor
(``[1, total positions]`` token ids, ``[1, total, hidden]`` hidden states) and each entry's own
tensors after it; meta ``"entries"`` lists each one's fields, its positions (``"n"``) and how
many tensors of its own follow. Each entry is checked exactly as a FORWARD or RESULT is, so a
batch trusts nothing a single message would not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetgui.net.forward_codec import (
    forward_message,
    request_from_message,
    result_from_message,
    result_message,
)
from fleetgui.net.protocol import (
    DEFAULT_LIMITS,
    ErrorCode,
    FrameLike,
    Limits,
    Message,
    Op,
    ProtocolError,
    encode,
)
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

MAX_BATCH = 64  # streams a batched pass may carry
_ENTRY_TENSORS = 3  # the most tensors an entry has of its own (a head's dists and mask)


def _bad(why: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_FIELD, f"meta field 'entries': {why}")


def _joined(payloads: Sequence[np.ndarray | None]) -> tuple[list[int], np.ndarray | None]:
    present = [p for p in payloads if p is not None]
    if not present:
        return [0] * len(payloads), None
    if len(present) != len(payloads):
        raise ValueError("every entry of a batch has a payload, or none has")
    return [int(p.shape[1]) for p in present], np.concatenate(present, axis=1)


def _encode_batch(
    op: Op,
    messages: Sequence[Message],
    payloads: Sequence[np.ndarray | None],
    *,
    request_id: int,
    limits: Limits,
    extra_meta: Mapping[str, Any] | None,
) -> list[FrameLike]:
    """One message of ``op`` carrying ``messages`` (each stream's single message, its payload
    first when it has one) with ``payloads`` joined in one tensor."""
    if not 0 < len(messages) <= MAX_BATCH:
        raise ValueError(f"a batch carries 1 to {MAX_BATCH} streams, not {len(messages)}")
    payload_sizes, payload = _joined(payloads)
    entries, tensors = [], [] if payload is None else [payload]
    skip = 0 if payload is None else 1
    for message, n in zip(messages, payload_sizes, strict=True):
        own = message.tensors[skip:]
        entries.append({**message.meta, "stream": message.stream_id, "n": n, "own": len(own)})
        tensors.extend(own)
    meta = {**(extra_meta or {}), "entries": entries}
    return encode(
        Message(op, messages[0].stream_id, request_id, meta=meta, tensors=tuple(tensors)), limits
    )


def encode_forward_batch(
    requests: Sequence[ForwardRequest],
    *,
    request_id: int = 0,
    limits: Limits = DEFAULT_LIMITS,
    extra_meta: Mapping[str, Any] | None = None,
) -> list[FrameLike]:
    """The frames of a FORWARD_BATCH carrying one pass of ``requests`` (one per stream)."""
    singles = [forward_message(request) for request in requests]
    payloads = [request.payload for request in requests]
    return _encode_batch(
        Op.FORWARD_BATCH,
        singles,
        payloads,
        request_id=request_id,
        limits=limits,
        extra_meta=extra_meta,
    )


def encode_result_batch(
    results: Sequence[ForwardResult],
    *,
    request_id: int = 0,
    limits: Limits = DEFAULT_LIMITS,
    extra_meta: Mapping[str, Any] | None = None,
) -> list[FrameLike]:
    """The frames of a RESULT_BATCH carrying ``results``, in their requests' order."""
    singles = [result_message(result) for result in results]
    payloads = [result.payload for result in results]
    return _encode_batch(
        Op.RESULT_BATCH,
        singles,
        payloads,
        request_id=request_id,
        limits=limits,
        extra_meta=extra_meta,
    )


def _entries(message: Message, op: Op) -> tuple[list[Message], np.ndarray | None]:
    """Each entry of a batch as the single message it stands for (not yet checked)."""
    if message.op is not op:
        raise ProtocolError(ErrorCode.BAD_OP, f"expected {op.name}, got {message.op!r}")
    entries = message.meta.get("entries")
    if not isinstance(entries, list) or not 0 < len(entries) <= MAX_BATCH:
        raise _bad(f"need a list of 1 to {MAX_BATCH} objects")
    if not all(isinstance(entry, dict) for entry in entries):
        raise _bad("each entry is an object")
    sizes, owns, streams = [], [], []
    for entry in entries:
        n, own, stream = entry.get("n"), entry.get("own"), entry.get("stream")
        for value, hi in ((n, 2**31), (own, _ENTRY_TENSORS), (stream, 2**63 - 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
                raise _bad("each entry needs integers 'n', 'own' and 'stream' in range")
        sizes.append(n)
        owns.append(own)
        streams.append(stream)
    if len(set(streams)) != len(streams):
        raise _bad("a stream appears twice")
    with_payload = any(sizes)
    payload = message.tensors[0] if with_payload and message.tensors else None
    if with_payload and (payload is None or payload.ndim < 2 or payload.shape[1] != sum(sizes)):
        raise ProtocolError(ErrorCode.BAD_SHAPE, "the payload does not hold the entries' positions")
    if with_payload and not all(sizes):
        raise _bad("every entry has positions, or none has")
    extras = message.tensors[1 if with_payload else 0 :]
    if len(extras) != sum(owns):
        raise _bad(f"the entries own {sum(owns)} tensors, the message has {len(extras)}")
    singles, start, at = [], 0, 0
    base = {k: v for k, v in message.meta.items() if k != "entries"}
    for entry, n, own, stream in zip(entries, sizes, owns, streams, strict=True):
        mine = tuple(extras[at : at + own])
        at += own
        if payload is not None:
            mine = (payload[:, start : start + n], *mine)
            start += n
        meta = {k: v for k, v in entry.items() if k not in ("n", "own", "stream")}
        kind = Op.FORWARD if op is Op.FORWARD_BATCH else Op.RESULT
        singles.append(
            Message(kind, stream, message.request_id, meta={**base, **meta}, tensors=mine)
        )
    return singles, payload


def requests_from_message(message: Message) -> list[ForwardRequest]:
    """The requests a decoded FORWARD_BATCH carries, each checked as a FORWARD is."""
    singles, _ = _entries(message, Op.FORWARD_BATCH)
    return [request_from_message(single) for single in singles]


def results_from_message(message: Message) -> list[ForwardResult]:
    """The results a decoded RESULT_BATCH carries, each checked as a RESULT is."""
    singles, _ = _entries(message, Op.RESULT_BATCH)
    return [result_from_message(single) for single in singles]
