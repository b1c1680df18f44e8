"""The fleet wire format: one typed, versioned, checked message per ZeroMQ multipart message.

Frame 0 is a fixed little-endian header, a JSON "meta" object and one descriptor per tensor;
the frames after it are the tensors' raw little-endian bytes, in order, each tensor in one or
more frames of at most :attr:`Limits.max_frame_bytes` (an empty tensor in one empty frame)::

    header  <4sHHQQIIHH>  36 bytes
        magic b"FLGT" | version u16 | op u16 | stream id u64 | request id u64 | flags u32
        | meta length u32 | tensor count u16 | reserved u16 (0)
    meta    UTF-8 JSON object, ``meta length`` bytes
    tensor descriptor <BB6x4q>  40 bytes each
        dtype code u8 | ndim u8 | 6 zero bytes | 4 x dim i64 (unused dims 0)

Frames are capped because ZeroMQ's ``MAXMSGSIZE`` is the only limit libzmq applies before the
CURVE handshake ends: whatever a frame may hold, a stranger without a key can make a worker
buffer per connection (255 MiB frames took a worker from 103 to 1103 MB with 4 connections).
A tensor of one frame is received without copies; a larger one is joined once.

The magic and version come first and never move, so a peer of another version is always told
"other protocol version" instead of a garbled message. :func:`decode` checks every count, length,
shape and dtype against :class:`Limits` before it touches a tensor; it never copies tensor data
(arrays are read-only views of the received frames). :mod:`forward_codec` maps
``ForwardRequest`` / ``ForwardResult`` to messages and back.
"""

from __future__ import annotations

import enum
import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetgui.errors import FleetguiError
from fleetgui.net.wire_dtypes import CODE_BY_DTYPE, DTYPE_BY_CODE, NUMPY_DTYPES

MAGIC = b"FLGT"
PROTOCOL_VERSION = 2  # 2: a tensor may span several frames
HEADER = struct.Struct("<4sHHQQIIHH")
TENSOR_DESCRIPTOR = struct.Struct("<BB6x4q")
_PREFIX = struct.Struct("<4sH")  # magic and version: the part every version shares

FrameLike = bytes | bytearray | memoryview


class Op(enum.IntEnum):
    """What a message asks for or answers.

    A new op goes at the end. A peer that does not know an op answers it with a ``bad_op`` error
    that carries no request id, so a coordinator asks only for the ops a worker's HELLO lists
    under ``"ops"``; then a new op needs no new PROTOCOL_VERSION. Changing a frame or an existing
    op's meta does."""

    HELLO = 1  # coordinator -> worker: who I am, what I want (meta)
    HELLO_OK = 2
    ERROR = 3  # meta {"code": ErrorCode, "message": str}
    PAIR = 4  # unknown coordinator -> worker in pairing mode: meta {"code", "comment"}
    PAIR_OK = 5
    FORWARD = 10  # ForwardRequest
    RESULT = 11  # ForwardResult
    RESET = 12  # forget a stream's KV cache
    RELEASE = 13  # free a stream
    REWIND = 14  # meta {"n_positions"}
    LOAD_STAGE = 20
    STAGE_READY = 21
    PUT_CHUNK = 22  # one chunk of a shard file
    PUT_OK = 23
    HAVE_FILES = 24  # meta {"files": [{"sha256", "size"}]}; the reply says which are there
    RING = 25  # meta {"epoch", "next": {"endpoint", "public_key", "name"} | null, "peers": [key]}
    RING_OK = 26
    UNLOAD = 27  # drop the loaded stages
    HEARTBEAT = 30
    METRICS = 31
    # meta: worker.probe_timing.ProbeSpec; answered with PROFILE, meta ProbeTimings + "stage_device"
    PROFILE = 32
    # a worker holding the whole model runs plain decode steps by itself: meta {"epoch", "token",
    # "heads": [head], "stop_ids": [int]}; one RESULT per step, the last one flagged FINAL
    DECODE = 33
    STOP_DECODE = 34  # end a stream's DECODE after its step under way; answered once it ended
    # start the message's stream as a copy of another's first KV entries: meta {"source": stream
    # id, "keep": entries}; answered with FORK once every stage of the worker holds the copy
    FORK = 35
    # one pass of several streams (net/batch_codec.py): meta {"entries": [each stream's FORWARD
    # or RESULT meta with "stream", "n" and "own"], ...}, the payloads joined in one tensor
    FORWARD_BATCH = 36
    RESULT_BATCH = 37


class Flags(enum.IntFlag):
    """Header flags; any other bit is rejected."""

    NONE = 0
    REPLY_WANTED = 1  # the sender waits for an answer to this request id
    FINAL = 2  # last message of a sequence (e.g. the last PUT_CHUNK of a file)


_OPS = {int(op): op for op in Op}
_KNOWN_FLAGS = int(Flags.REPLY_WANTED | Flags.FINAL)
_FLAGS = {value: Flags(value) for value in range(_KNOWN_FLAGS + 1)}


class ErrorCode(enum.StrEnum):
    """Why a message was rejected; travels in ERROR replies."""

    BAD_MAGIC = "bad_magic"
    BAD_VERSION = "bad_version"
    TRUNCATED = "truncated"
    TRAILING_DATA = "trailing_data"
    TOO_LARGE = "too_large"
    TOO_MANY_TENSORS = "too_many_tensors"
    BAD_DTYPE = "bad_dtype"
    BAD_SHAPE = "bad_shape"
    BAD_META = "bad_meta"
    BAD_OP = "bad_op"
    BAD_FLAGS = "bad_flags"
    BAD_FIELD = "bad_field"
    UNAUTHORIZED = "unauthorized"
    PAIRING_FAILED = "pairing_failed"
    BAD_HASH = "bad_hash"  # a received file does not match its sha256: send it again
    MISSING_FILES = "missing_files"  # meta "missing": [sha256]: deploy them first
    NOT_LOADED = "not_loaded"  # no stages loaded, or another ring epoch
    STAGE_FAILED = "stage_failed"  # inference failed on the worker
    INTERNAL = "internal"


class ProtocolError(FleetguiError):
    """A message that breaks the wire format; ``code`` says which rule."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class RefusedError(ProtocolError):
    """A request refused as it stands: the whole text, ``meta`` added to the ERROR reply."""

    def __init__(self, code: ErrorCode, message: str, **meta: object) -> None:
        super().__init__(code, message)
        self.meta = meta


class ProtocolVersionError(ProtocolError):
    """The peer speaks another protocol version (``peer_version``)."""

    def __init__(self, peer_version: int) -> None:
        super().__init__(
            ErrorCode.BAD_VERSION,
            f"got a message of fleetgui protocol version {peer_version}, but this side speaks "
            f"version {PROTOCOL_VERSION}: install the same fleetgui version on every PC",
        )
        self.peer_version = peer_version


class RemoteError(FleetguiError):
    """The peer answered with an ERROR message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Limits:
    """What :func:`decode` accepts; checked before any tensor is looked at."""

    max_meta_bytes: int = 64 * 1024  # JSON meta section
    max_tensors: int = 200  # tensor sections per message (a batch's heads have some each)
    max_ndim: int = 4  # dimensions per tensor (the descriptor has room for 4)
    max_tensor_bytes: int = 256 * 1024 * 1024  # one tensor
    max_total_bytes: int = 256 * 1024 * 1024  # all tensors of one message
    # the largest ZeroMQ frame (``zmq.MAXMSGSIZE``); tensors are split to fit it. 1 MiB keeps
    # decode steps (hidden states of a few KiB) in one frame and costs a prompt chunk's
    # activations (8 MiB for a 70B model's 256 tokens) one copy when joined
    max_frame_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        header = HEADER.size + self.max_meta_bytes + self.max_tensors * TENSOR_DESCRIPTOR.size
        if self.max_frame_bytes < header:
            raise ValueError(f"max_frame_bytes {self.max_frame_bytes} < largest header {header}")


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded message."""

    op: Op
    stream_id: int = 0
    request_id: int = 0
    flags: Flags = Flags.NONE
    meta: Mapping[str, Any] = field(default_factory=dict)
    tensors: tuple[np.ndarray, ...] = ()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in meta")


_JSON = json.JSONDecoder(parse_constant=_reject_constant)  # NaN and Infinity are not JSON


def encode(message: Message, limits: Limits = DEFAULT_LIMITS) -> list[FrameLike]:
    """The ZeroMQ frames of ``message``: header+meta, then one zero-copy frame per tensor."""
    try:
        meta = json.dumps(dict(message.meta), separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ProtocolError(ErrorCode.BAD_META, f"meta is not plain JSON: {exc}") from exc
    if len(meta) > limits.max_meta_bytes:
        raise ProtocolError(
            ErrorCode.TOO_LARGE, f"meta is {len(meta)} bytes, limit {limits.max_meta_bytes}"
        )
    if len(message.tensors) > limits.max_tensors:
        raise ProtocolError(
            ErrorCode.TOO_MANY_TENSORS,
            f"{len(message.tensors)} tensors, limit {limits.max_tensors}",
        )
    descriptors: list[bytes] = []
    data: list[FrameLike] = []
    total = 0
    for i, tensor in enumerate(message.tensors):
        code = CODE_BY_DTYPE.get(tensor.dtype) or CODE_BY_DTYPE.get(tensor.dtype.newbyteorder("="))
        if code is None:
            raise ProtocolError(ErrorCode.BAD_DTYPE, f"tensor {i}: dtype {tensor.dtype} not sent")
        if tensor.ndim > limits.max_ndim:
            raise ProtocolError(ErrorCode.BAD_SHAPE, f"tensor {i}: {tensor.ndim} dimensions")
        array = np.asarray(tensor, dtype=NUMPY_DTYPES[code])
        array = array if array.flags.c_contiguous else array.copy(order="C")  # keeps 0-d
        total += array.nbytes
        if array.nbytes > limits.max_tensor_bytes or total > limits.max_total_bytes:
            raise ProtocolError(ErrorCode.TOO_LARGE, f"tensor {i}: {array.nbytes} bytes")
        dims = list(array.shape) + [0] * (4 - array.ndim)
        descriptors.append(TENSOR_DESCRIPTOR.pack(code, array.ndim, *dims))
        data.extend(_split(array.reshape(-1).view(np.uint8).data, limits.max_frame_bytes))
    try:
        header = HEADER.pack(
            MAGIC,
            PROTOCOL_VERSION,
            int(message.op),
            message.stream_id,
            message.request_id,
            int(message.flags),
            len(meta),
            len(message.tensors),
            0,
        )
    except struct.error as exc:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"header field out of range: {exc}") from exc
    return [b"".join([header, meta, *descriptors]), *data]


def _split(view: memoryview, size: int) -> list[FrameLike]:
    """``view`` as frames of at most ``size`` bytes (one empty frame if it is empty)."""
    if view.nbytes <= size:
        return [view]
    return [view[start : start + size] for start in range(0, view.nbytes, size)]


def _fail(code: ErrorCode, message: str) -> ProtocolError:
    return ProtocolError(code, message)


def _bytes_view(frame: FrameLike) -> memoryview:
    view = memoryview(frame)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def decode(frames: Sequence[FrameLike], limits: Limits = DEFAULT_LIMITS) -> Message:
    """Check ``frames`` against the format and ``limits`` and return the message.

    Raises :class:`ProtocolError` (:class:`ProtocolVersionError` for another version) for any
    input that is not a valid message, and nothing else.
    """
    if not frames:
        raise _fail(ErrorCode.TRUNCATED, "empty message")
    head = _bytes_view(frames[0])
    if bytes(head[:4]) != MAGIC[: min(4, len(head))]:
        raise _fail(ErrorCode.BAD_MAGIC, "not a fleetgui message (bad magic)")
    if len(head) < _PREFIX.size:
        raise _fail(ErrorCode.TRUNCATED, f"first frame is only {len(head)} bytes")
    _, version = _PREFIX.unpack_from(head)
    if version != PROTOCOL_VERSION:
        raise ProtocolVersionError(version)
    if len(head) < HEADER.size:
        raise _fail(ErrorCode.TRUNCATED, f"header is {len(head)} bytes, need {HEADER.size}")
    _, _, op, stream_id, request_id, flags, meta_len, n_tensors, reserved = HEADER.unpack_from(head)
    if op not in _OPS:
        raise _fail(ErrorCode.BAD_OP, f"unknown op code {op}")
    if flags & ~_KNOWN_FLAGS or reserved:
        raise _fail(ErrorCode.BAD_FLAGS, f"unknown flags 0x{flags:x} or reserved {reserved}")
    if meta_len > limits.max_meta_bytes:
        raise _fail(ErrorCode.TOO_LARGE, f"meta is {meta_len} bytes, limit {limits.max_meta_bytes}")
    if n_tensors > limits.max_tensors:
        raise _fail(ErrorCode.TOO_MANY_TENSORS, f"{n_tensors} tensors, limit {limits.max_tensors}")
    expected = HEADER.size + meta_len + n_tensors * TENSOR_DESCRIPTOR.size
    if len(head) != expected:
        code = ErrorCode.TRUNCATED if len(head) < expected else ErrorCode.TRAILING_DATA
        raise _fail(code, f"first frame is {len(head)} bytes, header says {expected}")
    specs = _check_descriptors(head, HEADER.size + meta_len, n_tensors, limits)
    data = _tensor_data(frames, [nbytes for _, _, nbytes in specs], limits)
    meta = _decode_meta(head[HEADER.size : HEADER.size + meta_len])
    try:
        tensors = tuple(
            np.frombuffer(raw, dtype=dtype).reshape(shape)
            for raw, (dtype, shape, _) in zip(data, specs, strict=True)
        )
    except ValueError as exc:  # the checks above should leave none; a peer's bytes never crash
        raise _fail(ErrorCode.BAD_SHAPE, f"tensors do not match their shapes: {exc}") from None
    return Message(_OPS[op], stream_id, request_id, _FLAGS[flags], meta, tensors)


def _check_descriptors(
    head: memoryview, offset: int, n_tensors: int, limits: Limits
) -> list[tuple[np.dtype[Any], tuple[int, ...], int]]:
    """Each tensor's dtype, shape and size in bytes, checked against ``limits``."""
    specs: list[tuple[np.dtype[Any], tuple[int, ...], int]] = []
    total = 0
    for i in range(n_tensors):
        code, ndim, *dims = TENSOR_DESCRIPTOR.unpack_from(head, offset + i * 40)
        dtype = DTYPE_BY_CODE.get(code)
        if dtype is None:
            raise _fail(ErrorCode.BAD_DTYPE, f"tensor {i}: unknown dtype code {code}")
        if ndim > limits.max_ndim or any(d < 0 for d in dims) or any(dims[ndim:]):
            raise _fail(ErrorCode.BAD_SHAPE, f"tensor {i}: bad shape (ndim {ndim}, dims {dims})")
        nbytes = math.prod(dims[:ndim]) * dtype.itemsize  # Python ints: no overflow
        total += nbytes
        if nbytes > limits.max_tensor_bytes or total > limits.max_total_bytes:
            raise _fail(ErrorCode.TOO_LARGE, f"tensor {i}: {nbytes} bytes over the limit")
        # with a zero beside a huge dimension, (0, 2**62), the size is 0 bytes but numpy cannot
        # make the shape (which ended a worker): its extent, zeros counted as 1, must fit too
        if math.prod(max(d, 1) for d in dims[:ndim]) * dtype.itemsize > limits.max_tensor_bytes:
            raise _fail(ErrorCode.BAD_SHAPE, f"tensor {i}: empty, but shaped {dims[:ndim]}")
        specs.append((dtype, tuple(dims[:ndim]), nbytes))
    return specs


def _tensor_data(
    frames: Sequence[FrameLike], sizes: Sequence[int], limits: Limits
) -> list[FrameLike]:
    """Each tensor's bytes from the frames after the header: a tensor of one frame as a view
    of it, a longer one joined. A tensor of n bytes comes in ceil(n / max_frame_bytes) frames
    (one if empty), all full but its last, so the frame count is checked before any is read."""
    step = limits.max_frame_bytes
    counts = [max(1, -(-nbytes // step)) for nbytes in sizes]
    if len(frames) != 1 + sum(counts):
        code = ErrorCode.TRUNCATED if len(frames) < 1 + sum(counts) else ErrorCode.TRAILING_DATA
        raise _fail(code, f"{len(frames)} frames, the tensors' shapes need {1 + sum(counts)}")
    data: list[FrameLike] = []
    index = 1
    for i, (nbytes, count) in enumerate(zip(sizes, counts, strict=True)):
        parts = [_bytes_view(frame) for frame in frames[index : index + count]]
        index += count
        want = [step] * (count - 1) + [nbytes - step * (count - 1)]
        got = [part.nbytes for part in parts]
        if got != want:
            code = ErrorCode.TRAILING_DATA if sum(got) > nbytes else ErrorCode.TRUNCATED
            raise _fail(code, f"tensor {i}: frames of {got[:4]} bytes, its shape needs {want[:4]}")
        data.append(parts[0] if count == 1 else b"".join(parts))
    return data


def _decode_meta(raw: memoryview) -> dict[str, Any]:
    if not raw.nbytes:
        return {}
    try:
        meta = _JSON.decode(bytes(raw).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # also UnicodeDecodeError, too many digits
        raise _fail(ErrorCode.BAD_META, f"meta is not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise _fail(ErrorCode.BAD_META, f"meta must be a JSON object, got {type(meta).__name__}")
    return meta


def error_message(
    code: ErrorCode | str, message: str, *, stream_id: int = 0, request_id: int = 0
) -> Message:
    """An ERROR reply (``raise_if_error`` turns it back into :class:`RemoteError`)."""
    return Message(Op.ERROR, stream_id, request_id, meta={"code": str(code), "message": message})


def raise_if_error(message: Message, peer: str) -> Message:
    """Return ``message`` unless it is an ERROR reply; then raise :class:`RemoteError`."""
    if message.op is not Op.ERROR:
        return message
    code = str(message.meta.get("code", ErrorCode.INTERNAL))[:64]
    text = str(message.meta.get("message", "no details"))[:2000]
    raise RemoteError(code, f"{peer} refused the request ({code}): {text}")
