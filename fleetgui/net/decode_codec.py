"""DECODE messages: a run of plain decode steps a worker chains itself (see
:mod:`~fleetgui.worker.decode_run`), checked on the way in as FORWARD's fields are (this module
shares :mod:`~fleetgui.net.forward_codec`'s field checks and head codec)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetgui.net.forward_codec import _bad, _head_from, _head_meta, _int, _ints
from fleetgui.net.protocol import ErrorCode, FrameLike, Message, Op, ProtocolError, encode
from fleetgui.runtime.stage import GreedyHead, SampleHead

#: The most steps one DECODE message may ask for: its heads then stay a few KiB of meta.
MAX_DECODE_STEPS = 256


@dataclass(frozen=True)
class DecodeSteps:
    """What a DECODE message asks: feed ``token``, then each step's token, with one head per
    step (greedy or sampled), ending early after a token in ``stop_ids``."""

    stream_id: int
    token: int
    heads: tuple[GreedyHead | SampleHead, ...]
    stop_ids: frozenset[int]


def encode_decode(
    steps: DecodeSteps, *, request_id: int, extra_meta: Mapping[str, Any] | None = None
) -> list[FrameLike]:
    """The frames of a DECODE message carrying ``steps``."""
    if not 1 <= len(steps.heads) <= MAX_DECODE_STEPS:
        raise ValueError(f"a DECODE runs 1 to {MAX_DECODE_STEPS} steps, not {len(steps.heads)}")
    if any(head.mask is not None or head.logprobs is not None for head in steps.heads):
        # a mask depends on the tokens before; log-probabilities go with each step's token
        raise ValueError(
            "a constrained answer's or logprobs' steps go one FORWARD at a time, not in a DECODE"
        )
    meta = {
        **(extra_meta or {}),
        "token": steps.token,
        "heads": [_head_meta(head)[0] for head in steps.heads],
        "stop_ids": sorted(steps.stop_ids),
    }
    return encode(Message(Op.DECODE, steps.stream_id, request_id, meta=meta))


def decode_steps_from_message(message: Message) -> DecodeSteps:
    """The ``DecodeSteps`` a decoded DECODE message carries (fields are checked)."""
    if message.op is not Op.DECODE or message.tensors:
        raise ProtocolError(
            ErrorCode.BAD_OP, f"expected DECODE without tensors, got {message.op!r}"
        )
    raw = message.meta.get("heads")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_DECODE_STEPS:
        raise _bad("heads", f"need a list of 1 to {MAX_DECODE_STEPS} heads")
    heads = []
    for head in (_head_from(item, ()) for item in raw):
        if not isinstance(head, GreedyHead | SampleHead):
            raise _bad("heads", "a DECODE step's head is greedy or sample")
        heads.append(head)
    return DecodeSteps(
        message.stream_id,
        _int(message.meta, "token", 0, 2**31 - 1),
        tuple(heads),
        frozenset(_ints(message.meta, "stop_ids")),
    )
