"""``ForwardRequest`` / ``ForwardResult`` (every ``HeadOp``) as fleet messages, and back.

Every field is checked on the way in (types, ranges, tensor roles), so a worker never runs a
request it cannot trust; a violation raises :class:`~fleetgui.net.protocol.ProtocolError` with
``ErrorCode.BAD_FIELD`` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from fleetgui.generation_config import MAX_TOP_LOGPROBS, GenerationConfig
from fleetgui.net.protocol import (
    DEFAULT_LIMITS,
    ErrorCode,
    Flags,
    FrameLike,
    Limits,
    Message,
    Op,
    ProtocolError,
    decode,
    encode,
)
from fleetgui.runtime.head import SparseDist
from fleetgui.runtime.stage import (
    ForwardRequest,
    ForwardResult,
    GreedyHead,
    HeadOp,
    LogitsHead,
    SampleHead,
    VerifyGreedyHead,
    VerifySampleHead,
)
from fleetgui.runtime.token_logprobs import LOGPROB_FLOOR, TokenLogprob
from fleetgui.runtime.token_mask import TokenMask


def _bad(path: str, why: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_FIELD, f"meta field {path!r}: {why}")


def _int(obj: Mapping[str, Any], key: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(key, f"need an integer in [{lo}, {hi}], got {value!r}"[:200])
    return value


def _float(obj: Mapping[str, Any], key: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value < hi:
        raise _bad(key, f"need a number in [{lo}, {hi}), got {value!r}"[:200])
    return float(value)


def _ints(obj: Mapping[str, Any], key: str, lo: int = 0, hi: int = 2**31 - 1) -> list[int]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi for v in value
    ):
        raise _bad(key, f"need a list of integers in [{lo}, {hi}]")
    return value


def _uniforms(obj: Mapping[str, Any], key: str) -> list[float]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1 for v in value
    ):
        raise _bad(key, "need a list of uniforms in [0, 1)")
    return [float(v) for v in value]


def _head_meta(head: HeadOp | None) -> tuple[dict[str, Any] | None, list[np.ndarray]]:
    """The JSON form of ``head`` and the tensors it needs (draft distributions, then its token
    mask if it has one)."""
    meta, tensors = _head_fields(head)
    mask = getattr(head, "mask", None)
    if meta is not None and mask is not None:
        meta["mask"] = True  # absent: an older worker reads the message as before
        tensors.append(mask.bits.view(np.int32))
    top = getattr(head, "logprobs", None)
    if meta is not None and top is not None:
        meta["logprobs"] = top
    return meta, tensors


def _head_fields(head: HeadOp | None) -> tuple[dict[str, Any] | None, list[np.ndarray]]:
    match head:
        case None:
            return None, []
        case GreedyHead():
            return {"kind": "greedy"}, []
        case LogitsHead():
            return {"kind": "logits"}, []
        case SampleHead(config=config, u=u):
            return {"kind": "sample", "params": _params_meta(config), "u": u}, []
        case VerifyGreedyHead(drafts=drafts):
            return {"kind": "verify_greedy", "drafts": list(drafts)}, []
        case VerifySampleHead():
            dists = head.draft_dists
            wide = np.float64 if any(d.probs.dtype == np.float64 for d in dists) else np.float32
            ids = np.concatenate([np.zeros(0, np.int32), *(d.ids for d in dists)])
            probs = np.concatenate([np.zeros(0, wide), *(d.probs.astype(wide) for d in dists)])
            meta = {
                "kind": "verify_sample",
                "params": _params_meta(head.config),
                "drafts": list(head.drafts),
                "u_accept": list(head.u_accept),
                "u_resample": head.u_resample,
                "dist_lengths": [len(d) for d in dists],
                "dist_f64": [d.probs.dtype == np.float64 for d in dists],
            }
            return meta, [ids, probs]
    raise ProtocolError(ErrorCode.BAD_FIELD, f"unknown head op {type(head).__name__}")


def _params_meta(config: GenerationConfig) -> dict[str, Any]:
    """The sampling fields of a request's configuration: all the head reads of it."""
    return {
        "temperature": config.temperature,
        "top_k": config.top_k,
        "top_p": config.top_p,
        "seed": config.seed,
    }


def _params_from(meta: Any) -> GenerationConfig:
    if not isinstance(meta, dict):
        raise _bad("params", "need an object")
    seed = None if meta.get("seed") is None else _int(meta, "seed", 0, 2**128)
    config = GenerationConfig(
        temperature=_float(meta, "temperature"),
        top_k=_int(meta, "top_k", 0, 2**31),
        top_p=_float(meta, "top_p"),
        seed=seed,
    )
    try:
        config.check_sampling()
    except ValueError as exc:
        raise _bad("params", str(exc)) from None
    return config


def _mask_from(bits: np.ndarray, rows: int) -> TokenMask:
    """The token mask tensor of a head deciding ``rows`` positions, checked."""
    if bits.dtype != np.int32 or bits.ndim != 2 or bits.shape[0] != rows:
        raise _bad("head.mask", f"need int32 [{rows}, words], got {bits.dtype} {bits.shape}")
    try:
        return TokenMask(bits)
    except ValueError as exc:
        raise _bad("head.mask", str(exc)) from None


def _head_from(meta: Any, extra: tuple[np.ndarray, ...]) -> HeadOp | None:
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise _bad("head", "need an object or null")
    masked = meta.get("mask", False)
    if not isinstance(masked, bool) or (masked and not extra):
        raise _bad("head.mask", "need true with a mask tensor last, or absent")
    head = _unmasked_head_from(meta, extra[:-1] if masked else extra)
    asks = meta.get("logprobs") is not None
    if not (masked or asks):
        return head
    if isinstance(head, LogitsHead | None):
        raise _bad("head", "only a head that chooses tokens takes a mask or logprobs")
    if asks:
        head = replace(head, logprobs=_int(meta, "logprobs", 0, MAX_TOP_LOGPROBS))
    if masked:
        head = replace(head, mask=_mask_from(extra[-1], len(getattr(head, "drafts", ())) + 1))
    return head


def _unmasked_head_from(meta: dict[str, Any], extra: tuple[np.ndarray, ...]) -> HeadOp | None:
    kind = meta.get("kind")
    if kind == "greedy" and not extra:
        return GreedyHead()
    if kind == "logits" and not extra:
        return LogitsHead()
    if kind == "sample" and not extra:
        return SampleHead(_params_from(meta.get("params")), _float(meta, "u", 0, 1))
    if kind == "verify_greedy" and not extra:
        return VerifyGreedyHead(tuple(_ints(meta, "drafts")))
    if kind != "verify_sample" or len(extra) != 2:
        raise _bad("head.kind", f"unknown kind {kind!r} or wrong tensor count ({len(extra)})")
    drafts = tuple(_ints(meta, "drafts"))
    lengths = _ints(meta, "dist_lengths", 1)
    wide = meta.get("dist_f64")
    if not isinstance(wide, list) or not all(isinstance(w, bool) for w in wide):
        raise _bad("dist_f64", "need a list of booleans")
    ids, probs = extra
    if (
        len(lengths) != len(drafts)
        or len(wide) != len(drafts)
        or ids.ndim != 1
        or ids.dtype != np.int32
        or probs.ndim != 1
        or probs.dtype.kind != "f"
        or ids.shape != probs.shape
        or sum(lengths) != ids.shape[0]
    ):
        raise _bad("dist_lengths", "draft distributions do not match the drafts or tensors")
    ends = np.cumsum([0, *lengths])
    try:
        dists = tuple(
            SparseDist(ids[a:b], probs[a:b].astype(np.float64 if w else np.float32))
            for a, b, w in zip(ends[:-1], ends[1:], wide, strict=True)
        )
        return VerifySampleHead(
            _params_from(meta.get("params")),
            drafts,
            dists,
            tuple(_uniforms(meta, "u_accept")),
            _float(meta, "u_resample", 0, 1),
        )
    except ValueError as exc:
        raise _bad("head", str(exc)) from None


def encode_forward(
    request: ForwardRequest,
    *,
    request_id: int = 0,
    limits: Limits = DEFAULT_LIMITS,
    extra_meta: Mapping[str, Any] | None = None,
) -> list[FrameLike]:
    """The frames of a FORWARD message carrying ``request`` (K+1 positions are one tensor).
    ``extra_meta`` adds transport fields (ring epoch, timings so far)."""
    return encode(forward_message(request, request_id=request_id, extra_meta=extra_meta), limits)


def forward_message(
    request: ForwardRequest, *, request_id: int = 0, extra_meta: Mapping[str, Any] | None = None
) -> Message:
    """The FORWARD message :func:`encode_forward` encodes."""
    head, extra = _head_meta(request.head)
    meta = {
        **(extra_meta or {}),
        "rewind": request.rewind,
        "compact": request.compact,
        "head": head,
    }
    if request.keep is not None:  # absent: an older worker reads the message as before
        meta["keep"] = request.keep
    tensors = (np.asarray(request.payload), *extra)
    return Message(Op.FORWARD, request.stream_id, request_id, meta=meta, tensors=tensors)


def request_from_message(message: Message) -> ForwardRequest:
    """The ``ForwardRequest`` a decoded FORWARD message carries (fields are checked)."""
    if message.op is not Op.FORWARD or not message.tensors:
        raise ProtocolError(
            ErrorCode.BAD_OP, f"expected FORWARD with a payload, got {message.op!r}"
        )
    payload = message.tensors[0]
    if not (payload.ndim == 2 and payload.dtype.kind == "i") and not (
        payload.ndim == 3 and payload.dtype.kind == "f"
    ):
        raise ProtocolError(
            ErrorCode.BAD_SHAPE,
            f"payload must be token ids [1, n] (integers) or hidden states [1, n, hidden] "
            f"(floats), got {payload.dtype} {payload.shape}",
        )
    compact = message.meta.get("compact")
    if not isinstance(compact, bool):
        raise _bad("compact", "need a boolean")
    head = _head_from(message.meta.get("head"), message.tensors[1:])
    keep = None if message.meta.get("keep") is None else _int(message.meta, "keep", 0, 2**31)
    return ForwardRequest(
        message.stream_id,
        payload,
        _int(message.meta, "rewind", 0, 2**31),
        compact,
        head,
        keep=keep,
    )


def decode_forward(frames: Sequence[FrameLike], limits: Limits = DEFAULT_LIMITS) -> ForwardRequest:
    """Decode and check a FORWARD message."""
    return request_from_message(decode(frames, limits))


def encode_result(
    result: ForwardResult,
    *,
    request_id: int = 0,
    limits: Limits = DEFAULT_LIMITS,
    extra_meta: Mapping[str, Any] | None = None,
    flags: Flags = Flags.NONE,
) -> list[FrameLike]:
    """The frames of a RESULT message carrying ``result`` (``flags``: FINAL ends a DECODE's
    results)."""
    return encode(result_message(result, request_id, extra_meta, flags), limits)


def result_message(
    result: ForwardResult,
    request_id: int = 0,
    extra_meta: Mapping[str, Any] | None = None,
    flags: Flags = Flags.NONE,
) -> Message:
    """The RESULT message :func:`encode_result` encodes."""
    named = [("payload", result.payload), ("logits", result.logits)]
    roles = [name for name, value in named if value is not None]
    tensors = tuple(np.asarray(value) for _, value in named if value is not None)
    meta: dict[str, Any] = {
        "tokens": [int(t) for t in result.tokens],
        "accepted": int(result.accepted),
        "compute_ms": {str(int(k)): float(v) for k, v in result.compute_ms.items()},
        "tensors": roles,
        **(extra_meta or {}),
    }
    if result.logprobs:  # [token, logprob, [[id, logprob], ...]] per token
        meta["logprobs"] = [
            [lp.token, lp.logprob, [[i, v] for i, v in lp.top]] for lp in result.logprobs
        ]
    return Message(Op.RESULT, result.stream_id, request_id, flags, meta, tensors)


def result_from_message(message: Message) -> ForwardResult:
    """The ``ForwardResult`` a decoded RESULT message carries (fields are checked)."""
    if message.op is not Op.RESULT:
        raise ProtocolError(ErrorCode.BAD_OP, f"expected RESULT, got {message.op!r}")
    roles = message.meta.get("tensors")
    if roles not in ([], ["payload"], ["logits"], ["payload", "logits"]) or len(roles) != len(
        message.tensors
    ):
        raise _bad("tensors", f"bad tensor roles {roles!r} for {len(message.tensors)} tensors")
    arrays = dict(zip(roles, message.tensors, strict=True))
    tokens = _ints(message.meta, "tokens")
    return ForwardResult(
        message.stream_id,
        arrays.get("payload"),
        tokens,
        _int(message.meta, "accepted", 0, 2**31),
        arrays.get("logits"),
        compute_ms_from(message.meta),
        _logprobs_from(message.meta.get("logprobs"), tokens),
    )


def _logprob(value: Any, path: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (LOGPROB_FLOOR <= value <= 0)
    ):
        raise _bad(path, f"need a log-probability in [{LOGPROB_FLOOR}, 0], got {value!r}"[:200])
    return float(value)


def _logprobs_from(raw: Any, tokens: list[int]) -> tuple[TokenLogprob, ...]:
    """A result's log-probabilities: one entry per token it returns, each checked."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) != len(tokens):
        raise _bad("logprobs", "need one [token, logprob, top] entry per returned token")
    out = []
    for entry, token in zip(raw, tokens, strict=True):
        if not isinstance(entry, list) or len(entry) != 3 or entry[0] != token:
            raise _bad("logprobs", "an entry is not [its token, logprob, top]")
        top = entry[2]
        if not isinstance(top, list) or len(top) > MAX_TOP_LOGPROBS:
            raise _bad("logprobs", f"top needs at most {MAX_TOP_LOGPROBS} [id, logprob] pairs")
        pairs = []
        for pair in top:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int)):
                raise _bad("logprobs", "a top entry is not [id, logprob]")
            pairs.append((pair[0], _logprob(pair[1], "logprobs")))
        out.append(TokenLogprob(token, _logprob(entry[1], "logprobs"), tuple(pairs)))
    return tuple(out)


def compute_ms_from(meta: Mapping[str, Any]) -> dict[int, float]:
    """The checked ``compute_ms`` field (stage index -> milliseconds); empty if absent in a
    FORWARD, required in a RESULT."""
    timings = meta.get("compute_ms", {})
    if not isinstance(timings, dict) or not all(
        isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 6 for k in timings
    ):
        raise _bad("compute_ms", "need an object of stage index -> milliseconds")
    return {int(k): _float(timings, k, 0) for k in timings}


def decode_result(frames: Sequence[FrameLike], limits: Limits = DEFAULT_LIMITS) -> ForwardResult:
    """Decode and check a RESULT message."""
    return result_from_message(decode(frames, limits))
