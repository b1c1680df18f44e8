"""The fleet wire format: round trips of every message kind, and one test per rejection path."""

from __future__ import annotations

import contextlib
import json
import random
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from wire_support import DIST_A, PARAMS, RNG, hidden, tokens, wire

from fleetgui.generation_config import GenerationConfig
from fleetgui.net.decode_codec import DecodeSteps, encode_decode
from fleetgui.net.forward_codec import decode_forward, decode_result, encode_forward, encode_result
from fleetgui.net.protocol import (
    HEADER,
    MAGIC,
    PROTOCOL_VERSION,
    TENSOR_DESCRIPTOR,
    ErrorCode,
    Flags,
    FrameLike,
    Limits,
    Message,
    Op,
    ProtocolError,
    ProtocolVersionError,
    RemoteError,
    decode,
    encode,
    error_message,
    raise_if_error,
)
from fleetgui.net.wire_dtypes import DType
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

DIST_B = SparseDist.from_dense([0.5, 0.5, 0.0, 0.0, 0.0], dtype=np.float64)


HEADS: dict[str, HeadOp | None] = {
    "none": None,
    "greedy": GreedyHead(),
    "logits": LogitsHead(),
    "sample": SampleHead(PARAMS, 0.25),
    "sample-unseeded": SampleHead(GenerationConfig(temperature=1.0), 0.0),
    "verify-greedy": VerifyGreedyHead((5, 7, 11)),
    "verify-greedy-k0": VerifyGreedyHead(()),
    "verify-sample": VerifySampleHead(PARAMS, (2, 0), (DIST_A, DIST_A), (0.1, 0.9), 0.5),
    "verify-sample-mixed": VerifySampleHead(PARAMS, (2, 1), (DIST_A, DIST_B), (0.3, 0.2), 0.7),
    "verify-sample-k0": VerifySampleHead(PARAMS, (), (), (), 0.5),
    # a constrained answer's heads carry a token mask row per position they decide
    "greedy-masked": GreedyHead(TokenMask.allowing([[3, 40, 99]], 100)),
    "sample-masked": SampleHead(PARAMS, 0.25, TokenMask.allowing([[0, 1]], 64)),
    "verify-greedy-masked": VerifyGreedyHead((5, 7), TokenMask.allowing([[5], [7, 8], [1]], 40)),
    "verify-sample-masked": VerifySampleHead(
        PARAMS, (2, 0), (DIST_A, DIST_A), (0.1, 0.9), 0.5, TokenMask.allowing([[2], [0], [9]], 33)
    ),
    # logprobs ask the last stage for the chosen token's log-probability (and the top ones)
    "greedy-logprobs": GreedyHead(logprobs=0),
    "sample-top-logprobs": SampleHead(PARAMS, 0.25, logprobs=20),
    "verify-greedy-masked-logprobs": VerifyGreedyHead(
        (5,), TokenMask.allowing([[5], [7]], 40), logprobs=3
    ),
}


@pytest.mark.parametrize("head", HEADS.values(), ids=HEADS.keys())
@pytest.mark.parametrize(
    "payload", [tokens(1), tokens(5), hidden(4), hidden(3, np.float16)], ids=str
)
def test_forward_request_round_trip(head: HeadOp | None, payload: np.ndarray) -> None:
    request = ForwardRequest(2**64 - 1, payload, rewind=3, compact=True, head=head)
    frames = encode_forward(request, request_id=77)
    masked = getattr(head, "mask", None) is not None
    assert len(frames) == 1 + (1 if not isinstance(head, VerifySampleHead) else 3) + masked
    decoded = decode_forward(wire(frames))
    assert decoded.stream_id == request.stream_id
    assert (decoded.rewind, decoded.compact, decoded.head) == (3, True, head)
    assert decoded.payload.dtype == payload.dtype
    np.testing.assert_array_equal(decoded.payload, payload)
    assert decode(wire(frames)).request_id == 77


@pytest.mark.parametrize(
    ("mask", "why"),
    [
        (np.zeros((2, 4), dtype=np.int32), "need int32 \\[1, words\\]"),  # a row too many
        (np.zeros((1, 4), dtype=np.float32), "need int32"),
        (np.zeros((1, 0), dtype=np.int32), "rows, words"),
    ],
)
def test_a_mask_that_does_not_fit_its_head_is_refused(mask: np.ndarray, why: str) -> None:
    frames = encode_forward(
        ForwardRequest(1, tokens(1), head=GreedyHead(TokenMask.allowing([[1]], 8)))
    )
    message = decode(wire(frames))
    forged = Message(message.op, 1, meta=message.meta, tensors=(message.tensors[0], mask))
    with pytest.raises(ProtocolError, match=why):
        decode_forward(wire(encode(forged)))
    unmasked = Message(message.op, 1, meta=message.meta, tensors=message.tensors[:1])
    with pytest.raises(ProtocolError, match=r"head\.mask"):
        decode_forward(wire(encode(unmasked)))  # says a mask, sends none
    with pytest.raises(ValueError, match="one FORWARD at a time"):
        encode_decode(
            DecodeSteps(1, 5, (GreedyHead(TokenMask.allowing([[1]], 8)),), frozenset()),
            request_id=1,
        )


@pytest.mark.parametrize(
    ("logprobs", "why"),
    [
        ([[5, -0.1, []]], "one \\[token, logprob, top\\] entry per returned token"),
        ([[5, -0.1, []], [6, -0.2, []]], "not \\[its token"),  # second token is 9
        ([[5, 0.5, []], [9, -0.2, []]], "log-probability in"),  # above 0
        ([[5, "x", []], [9, -0.2, []]], "log-probability in"),
        ([[5, -0.1, [[1, -0.1]] * 21], [9, -0.2, []]], "at most 20"),
        ([[5, -0.1, [[1.5, -0.1]]], [9, -0.2, []]], "not \\[id, logprob\\]"),
    ],
)
def test_forged_logprobs_in_a_result_are_refused(logprobs: list[Any], why: str) -> None:
    message = decode(wire(encode_result(ForwardResult(1, tokens=[5, 9]), request_id=2)))
    forged = Message(message.op, 2, meta={**message.meta, "logprobs": logprobs})
    with pytest.raises(ProtocolError, match=why):
        decode_result(wire(encode(forged)))


def test_logprobs_steps_are_not_batched_into_a_decode() -> None:
    with pytest.raises(ValueError, match="one FORWARD at a time"):
        encode_decode(DecodeSteps(1, 5, (GreedyHead(logprobs=2),), frozenset()), request_id=1)


def test_speculative_positions_travel_as_one_tensor() -> None:
    request = ForwardRequest(1, tokens(5), head=VerifyGreedyHead((1, 2, 3, 4)))
    assert len(encode_forward(request)) == 2  # header+meta, and the K+1 positions


@pytest.mark.parametrize(
    "result",
    [
        ForwardResult(1),
        ForwardResult(2, payload=hidden(3)),
        ForwardResult(3, tokens=[5, 6, 7], accepted=2, compute_ms={0: 1.5, 3: 0.25}),
        ForwardResult(4, logits=RNG.standard_normal(100).astype(np.float32)),
        ForwardResult(5, payload=hidden(2, np.float16), logits=np.zeros(3, np.float32)),
        ForwardResult(
            6,
            tokens=[5, 9],
            accepted=1,
            logprobs=(
                TokenLogprob(5, -0.25, ((5, -0.25), (2, -1.5))),
                TokenLogprob(9, LOGPROB_FLOOR, ((1, 0.0), (9, LOGPROB_FLOOR))),
            ),
        ),
    ],
    ids=["empty", "payload", "tokens", "logits", "both", "logprobs"],
)
def test_forward_result_round_trip(result: ForwardResult) -> None:
    decoded = decode_result(wire(encode_result(result, request_id=9)))
    assert decoded.stream_id == result.stream_id
    assert decoded.tokens == result.tokens and decoded.accepted == result.accepted
    assert decoded.compute_ms == result.compute_ms
    assert decoded.logprobs == result.logprobs
    for name in ("payload", "logits"):
        sent, got = getattr(result, name), getattr(decoded, name)
        assert (sent is None) == (got is None)
        if sent is not None:
            assert got.dtype == sent.dtype
            np.testing.assert_array_equal(got, sent)


def test_message_round_trip_every_dtype_and_shape() -> None:
    tensors: tuple[np.ndarray, ...] = (
        np.arange(6, dtype=np.int64).reshape(2, 3),
        np.array(7, dtype=np.int32),  # 0-d
        np.zeros((0, 4), dtype=np.float32),  # empty
        np.ones((1, 2, 3, 4), dtype=np.float16),
        np.arange(5, dtype=np.uint8),
        np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),  # not C-contiguous
        np.arange(3, dtype=">i4"),  # big-endian input is sent little-endian
    )
    message = Message(Op.METRICS, 1, 2, Flags.REPLY_WANTED | Flags.FINAL, {"a": [1, "x"]}, tensors)
    decoded = decode(wire(encode(message)))
    assert (decoded.op, decoded.stream_id, decoded.request_id) == (Op.METRICS, 1, 2)
    assert decoded.flags == Flags.REPLY_WANTED | Flags.FINAL
    assert decoded.meta == {"a": [1, "x"]}
    for sent, got in zip(tensors, decoded.tensors, strict=True):
        assert got.shape == sent.shape and got.dtype == sent.dtype.newbyteorder("<")
        np.testing.assert_array_equal(got, sent)


TINY_FRAMES = Limits(max_meta_bytes=1024, max_tensors=8, max_frame_bytes=4096)


def test_a_tensor_larger_than_a_frame_spans_full_frames_and_comes_back_whole() -> None:
    """No frame exceeds max_frame_bytes, the cap the worker's sockets enforce before the
    encrypted handshake; a tensor of several frames is rebuilt exactly, small ones stay views."""
    step = TINY_FRAMES.max_frame_bytes
    big = RNG.standard_normal(step // 4 * 3 + 5).astype(np.float32)  # 3 full frames and 20 bytes
    small, empty = tokens(3), np.zeros((0, 4), np.float16)
    frames = encode(Message(Op.FORWARD, tensors=(big, small, empty)), TINY_FRAMES)
    sizes = [memoryview(f).nbytes for f in frames[1:]]
    assert sizes == [step, step, step, 20, small.nbytes, 0]
    decoded = decode(frames, TINY_FRAMES)
    np.testing.assert_array_equal(decoded.tensors[0], big)
    np.testing.assert_array_equal(decoded.tensors[1], small)
    assert decoded.tensors[2].shape == (0, 4)
    with pytest.raises(ProtocolError) as wrong:  # the receiver's cap is the sender's
        decode(frames)
    assert wrong.value.code == ErrorCode.TRAILING_DATA  # more frames than 1 MiB ones need


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda f: f[:-1], ErrorCode.TRUNCATED),
        (lambda f: [*f, b"x"], ErrorCode.TRAILING_DATA),
        (
            lambda f: [f[0], f[1][:-4], bytes(memoryview(f[2])) + bytes(4), f[3]],
            ErrorCode.TRUNCATED,
        ),
        (lambda f: [f[0], b"".join(map(bytes, f[1:3])), f[3], b""], ErrorCode.TRUNCATED),
    ],
    ids=["a frame missing", "a frame too many", "a short frame mid-tensor", "an oversized frame"],
)
def test_a_split_tensor_must_come_in_full_frames(
    change: Callable[[list[FrameLike]], list[FrameLike]], code: ErrorCode
) -> None:
    big = np.ones(TINY_FRAMES.max_frame_bytes // 4 * 2 + 1, np.float32)
    frames = encode(Message(Op.FORWARD, tensors=(big,)), TINY_FRAMES)
    assert len(frames) == 4
    with pytest.raises(ProtocolError) as info:
        decode(change(frames), TINY_FRAMES)
    assert info.value.code == code


def test_error_reply_becomes_remote_error() -> None:
    reply = decode(wire(encode(error_message(ErrorCode.BAD_SHAPE, "payload rank 5"))))
    with pytest.raises(RemoteError, match=r"worker-2 refused the request.*payload rank 5") as info:
        raise_if_error(reply, "worker-2")
    assert info.value.code == "bad_shape"
    ok = Message(Op.HELLO_OK)
    assert raise_if_error(ok, "w") is ok


# --------------------------------------------------------------------------------------------
# Rejection paths: raw frames built by hand, one case per rule


def raw(
    *,
    magic: bytes = MAGIC,
    version: int = PROTOCOL_VERSION,
    op: int = Op.FORWARD,
    flags: int = 0,
    reserved: int = 0,
    meta: bytes = b"{}",
    meta_len: int | None = None,
    tensors: tuple[tuple[int, int, tuple[int, ...], bytes], ...] = (),
    n_tensors: int | None = None,
    head_extra: bytes = b"",
    frames_extra: tuple[bytes, ...] = (),
) -> list[bytes]:
    """Frames with every header field under the test's control: tensors are
    ``(dtype code, ndim, dims (padded to 4), data)``."""
    header = HEADER.pack(
        magic,
        version,
        op,
        1,
        2,
        flags,
        len(meta) if meta_len is None else meta_len,
        len(tensors) if n_tensors is None else n_tensors,
        reserved,
    )
    descriptors = b"".join(
        TENSOR_DESCRIPTOR.pack(code, ndim, *(dims + (0,) * (4 - len(dims))))
        for code, ndim, dims, _ in tensors
    )
    return [header + meta + descriptors + head_extra, *(t[3] for t in tensors), *frames_extra]


F32_2x2 = (int(DType.F32), 2, (2, 2), bytes(16))
PARAMS_META = {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 1}
SMALL = Limits(max_tensor_bytes=64, max_total_bytes=100)

REJECTIONS: dict[str, tuple[Callable[[], Any], ErrorCode]] = {
    "no frames": (lambda: decode([]), ErrorCode.TRUNCATED),
    "empty frame": (lambda: decode([b""]), ErrorCode.TRUNCATED),
    "bad magic": (lambda: decode(raw(magic=b"HTTP")), ErrorCode.BAD_MAGIC),
    "garbage short": (lambda: decode([b"GET /"]), ErrorCode.BAD_MAGIC),
    "magic only": (lambda: decode([MAGIC + b"\x01"]), ErrorCode.TRUNCATED),
    "other version": (lambda: decode(raw(version=PROTOCOL_VERSION + 1)), ErrorCode.BAD_VERSION),
    "short header": (lambda: decode([raw()[0][:20]]), ErrorCode.TRUNCATED),
    "unknown op": (lambda: decode(raw(op=999)), ErrorCode.BAD_OP),
    "unknown flag": (lambda: decode(raw(flags=0x80)), ErrorCode.BAD_FLAGS),
    "reserved set": (lambda: decode(raw(reserved=1)), ErrorCode.BAD_FLAGS),
    "meta too long": (lambda: decode(raw(meta_len=0xFFFFFFFF)), ErrorCode.TOO_LARGE),
    "too many tensors": (lambda: decode(raw(n_tensors=201)), ErrorCode.TOO_MANY_TENSORS),
    "max tensors field": (lambda: decode(raw(n_tensors=0xFFFF)), ErrorCode.TOO_MANY_TENSORS),
    "meta truncated": (lambda: decode(raw(meta_len=10)), ErrorCode.TRUNCATED),
    "header trailing": (lambda: decode(raw(head_extra=b"x")), ErrorCode.TRAILING_DATA),
    "tensor frame missing": (
        lambda: decode(raw(tensors=(F32_2x2,))[:1]),
        ErrorCode.TRUNCATED,
    ),
    "extra frame": (lambda: decode(raw(frames_extra=(b"zz",))), ErrorCode.TRAILING_DATA),
    "unknown dtype": (
        lambda: decode(raw(tensors=((99, 1, (4,), bytes(4)),))),
        ErrorCode.BAD_DTYPE,
    ),
    "ndim too big": (
        lambda: decode(raw(tensors=((int(DType.U8), 5, (1, 1, 1, 1), b"x"),))),
        ErrorCode.BAD_SHAPE,
    ),
    "negative dim": (
        lambda: decode(raw(tensors=((int(DType.U8), 1, (-1,), b""),))),
        ErrorCode.BAD_SHAPE,
    ),
    "unused dim set": (
        lambda: decode(raw(tensors=((int(DType.U8), 1, (1, 7), b"x"),))),
        ErrorCode.BAD_SHAPE,
    ),
    "overflowing dims": (
        lambda: decode(raw(tensors=((int(DType.I64), 4, (2**62,) * 4, b""),))),
        ErrorCode.TOO_LARGE,
    ),
    "a zero beside a huge dim": (
        lambda: decode(raw(tensors=((int(DType.F32), 2, (0, 2**62), b""),))),
        ErrorCode.BAD_SHAPE,
    ),
    "tensor over limit": (
        lambda: decode(raw(tensors=((int(DType.U8), 1, (65,), bytes(65)),)), SMALL),
        ErrorCode.TOO_LARGE,
    ),
    "total over limit": (
        lambda: decode(raw(tensors=((int(DType.U8), 1, (60,), bytes(60)),) * 2), SMALL),
        ErrorCode.TOO_LARGE,
    ),
    "data truncated": (
        lambda: decode(raw(tensors=((int(DType.F32), 2, (2, 2), bytes(15)),))),
        ErrorCode.TRUNCATED,
    ),
    "data trailing": (
        lambda: decode(raw(tensors=((int(DType.F32), 2, (2, 2), bytes(17)),))),
        ErrorCode.TRAILING_DATA,
    ),
    "meta not json": (lambda: decode(raw(meta=b"{nope")), ErrorCode.BAD_META),
    "meta not utf-8": (lambda: decode(raw(meta=b'{"a":"\xff"}')), ErrorCode.BAD_META),
    "meta not object": (lambda: decode(raw(meta=b"[1]")), ErrorCode.BAD_META),
    "meta nan": (lambda: decode(raw(meta=b'{"a":NaN}')), ErrorCode.BAD_META),
    "meta deep": (lambda: decode(raw(meta=b"[" * 60000)), ErrorCode.BAD_META),
    "meta huge int": (lambda: decode(raw(meta=b'{"a":' + b"9" * 5000 + b"}")), ErrorCode.BAD_META),
    "forward wrong op": (
        lambda: decode_forward(wire(encode_result(ForwardResult(1)))),
        ErrorCode.BAD_OP,
    ),
    "forward float ids": (
        lambda: decode_forward(raw(meta=b'{"rewind":0,"compact":false}', tensors=(F32_2x2,))),
        ErrorCode.BAD_SHAPE,
    ),
    "forward negative rewind": (
        lambda: decode_forward(fwd_with(rewind=-1)),
        ErrorCode.BAD_FIELD,
    ),
    "forward compact not bool": (
        lambda: decode_forward(fwd_with(compact=1)),
        ErrorCode.BAD_FIELD,
    ),
    "unknown head kind": (
        lambda: decode_forward(fwd_with(head={"kind": "beam"})),
        ErrorCode.BAD_FIELD,
    ),
    "bad sampling params": (
        lambda: decode_forward(
            fwd_with(head={"kind": "sample", "u": 0.5, "params": {**PARAMS_META, "top_p": 2.0}})
        ),
        ErrorCode.BAD_FIELD,
    ),
    "uniform out of range": (
        lambda: decode_forward(fwd_with(head={"kind": "sample", "u": 1.0, "params": PARAMS_META})),
        ErrorCode.BAD_FIELD,
    ),
    "negative draft": (
        lambda: decode_forward(fwd_with(head={"kind": "verify_greedy", "drafts": [1, -2]})),
        ErrorCode.BAD_FIELD,
    ),
    "dists do not match drafts": (
        lambda: decode_forward(tamper_verify_sample(dist_lengths=[2, 2, 1])),
        ErrorCode.BAD_FIELD,
    ),
    "dist not normalised": (
        lambda: decode_forward(tamper_verify_sample(probs=np.full(6, 0.9, np.float32))),
        ErrorCode.BAD_FIELD,
    ),
    "result roles mismatch": (
        lambda: decode_result(result_with(tensors=["payload"])),
        ErrorCode.BAD_FIELD,
    ),
    "result bad timing key": (
        lambda: decode_result(result_with(compute_ms={"²": 1.0})),
        ErrorCode.BAD_FIELD,
    ),
    "encode bad dtype": (
        lambda: encode(Message(Op.METRICS, tensors=(np.zeros(2, np.complex64),))),
        ErrorCode.BAD_DTYPE,
    ),
    "encode too many tensors": (
        lambda: encode(Message(Op.METRICS, tensors=(np.zeros(1),) * 201)),
        ErrorCode.TOO_MANY_TENSORS,
    ),
    "encode meta too large": (
        lambda: encode(Message(Op.HELLO, meta={"x": "y" * 70000})),
        ErrorCode.TOO_LARGE,
    ),
    "encode stream id too big": (
        lambda: encode(Message(Op.RESET, stream_id=2**64)),
        ErrorCode.BAD_FIELD,
    ),
}


def fwd_with(**meta: Any) -> list[bytes]:
    base: dict[str, Any] = {"rewind": 0, "compact": False, "head": None, **meta}
    ids = (int(DType.I64), 2, (1, 2), bytes(16))
    return raw(meta=json.dumps(base).encode(), tensors=(ids,))


def tamper_verify_sample(**changes: Any) -> list[bytes]:
    head = VerifySampleHead(PARAMS, (2, 0), (DIST_A, DIST_A), (0.1, 0.9), 0.5)
    message = decode(wire(encode_forward(ForwardRequest(1, tokens(3), head=head))))
    meta = {**message.meta, "head": {**message.meta["head"], **changes}}
    tensors = list(message.tensors)
    if "probs" in changes:
        meta["head"].pop("probs")
        tensors[2] = changes["probs"]
    return wire(encode(Message(Op.FORWARD, 1, meta=meta, tensors=tuple(tensors))))


def result_with(**changes: Any) -> list[bytes]:
    meta = {"tokens": [], "accepted": 0, "compute_ms": {}, "tensors": [], **changes}
    return wire(encode(Message(Op.RESULT, 1, meta=meta)))


@pytest.mark.parametrize("case", REJECTIONS.values(), ids=REJECTIONS.keys())
def test_rejection(case: tuple[Callable[[], Any], ErrorCode]) -> None:
    action, code = case
    with pytest.raises(ProtocolError) as info:
        action()
    assert info.value.code == code, str(info.value)
    assert str(info.value)


def test_other_version_names_both_versions() -> None:
    with pytest.raises(ProtocolVersionError) as info:
        decode(raw(version=PROTOCOL_VERSION + 1))
    assert info.value.peer_version == PROTOCOL_VERSION + 1
    assert f"version {PROTOCOL_VERSION + 1}" in str(info.value)
    assert "same fleetgui version" in str(info.value)


# --------------------------------------------------------------------------------------------
# Fuzz-ish: any bytes give a message or a ProtocolError, never anything else


def valid_messages() -> list[list[bytes]]:
    head = VerifySampleHead(PARAMS, (2, 1), (DIST_A, DIST_B), (0.3, 0.2), 0.7)
    return [
        wire(encode_forward(ForwardRequest(3, hidden(2), rewind=1, head=head))),
        wire(encode_forward(ForwardRequest(3, tokens(4), head=SampleHead(PARAMS, 0.5)))),
        wire(encode_result(ForwardResult(4, tokens=[1, 2], accepted=1, compute_ms={1: 2.0}))),
    ]


def decode_any(frames: list[bytes]) -> None:
    """Decode ``frames`` as the worker would: generic, then as a forward request/result."""
    message = decode(frames)
    if message.op is Op.FORWARD:
        decode_forward(frames)
    elif message.op is Op.RESULT:
        decode_result(frames)


def test_truncation_at_every_offset_is_rejected() -> None:
    for frames in valid_messages():
        for index, frame in enumerate(frames):
            for cut in range(len(frame)):
                broken = [*frames[:index], frame[:cut], *frames[index + 1 :]]
                with pytest.raises(ProtocolError):
                    decode_any(broken)
            with pytest.raises(ProtocolError):
                decode_any(frames[:index])  # whole frames missing


def test_corrupted_bytes_never_escape_as_other_errors() -> None:
    rand = random.Random(1234)
    for frames in valid_messages():
        for offset in range(len(frames[0])):
            for value in (0x00, 0xFF, 0x80, rand.randrange(256)):
                head = bytearray(frames[0])
                head[offset] = value
                with contextlib.suppress(ProtocolError):
                    decode_any([bytes(head), *frames[1:]])


def test_random_bytes_are_rejected() -> None:
    rand = random.Random(99)
    prefix = struct.pack("<4sH", MAGIC, PROTOCOL_VERSION)
    for i in range(3000):
        body = rand.randbytes(rand.randrange(0, 200))
        first = prefix + body if i % 2 else body  # half of them get past magic and version
        frames = [first, *(rand.randbytes(rand.randrange(0, 64)) for _ in range(i % 4))]
        with contextlib.suppress(ProtocolError):
            decode_any(frames)


ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    -1,
    0,
    2**70,
    1.5,
    -0.0,
    "x",
    "",
    [],
    {},
    [1.5],
    [-1],
    ["a"],
    [True],
    {"a": 1},
)


def meta_paths(meta: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path in a nested JSON object."""
    paths = []
    for key, value in meta.items():
        paths.append((*prefix, key))
        if isinstance(value, dict):
            paths += meta_paths(value, (*prefix, key))
    return paths


def test_every_meta_field_with_odd_values() -> None:
    """Each field of real forward/result metas replaced by values of the wrong type or range."""
    for frames in valid_messages():
        message = decode(frames)
        for path in meta_paths(dict(message.meta)):
            for value in ODD_VALUES:
                meta = json.loads(json.dumps(message.meta))
                target = meta
                for key in path[:-1]:
                    target = target[key]
                target[path[-1]] = value
                changed = Message(message.op, 1, meta=meta, tensors=message.tensors)
                with contextlib.suppress(ProtocolError):
                    decode_any(wire(encode(changed)))
