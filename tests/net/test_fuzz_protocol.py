"""Fuzzing what a peer can send (hypothesis): the frame decoder in-process, and every op with
random meta and tensors against a real worker process, which must answer each message and keep
serving. Examples are derandomized, so CI runs the same bounded set every time."""

from __future__ import annotations

import asyncio
import contextlib
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fleet_support import WorkerProcess

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fleetgui.net.decode_codec import decode_steps_from_message  # noqa: E402
from fleetgui.net.forward_codec import decode_forward, decode_result  # noqa: E402
from fleetgui.net.keys import KeyPair  # noqa: E402
from fleetgui.net.protocol import (  # noqa: E402
    HEADER,
    MAGIC,
    PROTOCOL_VERSION,
    TENSOR_DESCRIPTOR,
    Flags,
    Message,
    Op,
    ProtocolError,
    decode,
)
from fleetgui.net.secure_socket import SecureClient  # noqa: E402
from fleetgui.net.wire_dtypes import DTYPE_BY_CODE  # noqa: E402

#: Field names the worker's ops read (agent, hosted_stages, forward_codec, probe_timing), so
#: generated metas reach the handlers' checks rather than stopping at a missing key.
KEYS = (
    "code", "comment", "compact", "device", "end_layer", "epoch", "files", "first", "head",
    "heads", "index", "kind", "model_file", "model_files", "model_id", "ms_per_layer", "n_layers",
    "n_positions", "next", "offset", "params", "path", "payload", "peers", "precision",
    "public_key", "endpoint", "name", "seed", "sha256", "size", "stages", "start_layer",
    "stop_ids", "threads", "token", "weight_format",
)  # fmt: skip
DTYPES = (np.uint8, np.int32, np.int64, np.float16, np.float32)
SERVED = (
    Op.FORWARD, Op.HELLO, Op.HEARTBEAT, Op.HAVE_FILES, Op.PUT_CHUNK, Op.LOAD_STAGE, Op.UNLOAD,
    Op.RING, Op.RESET, Op.RELEASE, Op.PROFILE, Op.DECODE, Op.STOP_DECODE,
)  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
    | st.sampled_from(["../x", "/etc/passwd", "tcp://127.0.0.1:1", "a" * 64, "0" * 64]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
metas = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), json_values, max_size=6)


@st.composite
def tensors(draw: Any) -> np.ndarray:
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 6), max_size=3)))
    values = draw(st.integers(0, 255))
    return np.full(shape, values, dtype=dtype)


@st.composite
def messages(draw: Any) -> Message:
    return Message(
        draw(st.sampled_from(list(Op))),
        stream_id=draw(st.integers(0, 2**63)),
        flags=Flags(draw(st.sampled_from([int(f) for f in Flags]))),
        meta=draw(metas),
        tensors=tuple(draw(st.lists(tensors(), max_size=3))),
    )


# -- the decoder ---------------------------------------------------------------------------------


@st.composite
def raw_frames(draw: Any) -> list[bytes]:
    """A header that passes magic and version, then anything in its fields and descriptors.
    Most examples keep every other field valid (op, flags, meta and its length, the frame
    count, tensor frames as long as their descriptors say) so the checks after the sizes, and
    the making of the arrays, are reached; the rest fuzz every field at once."""
    valid = draw(st.integers(0, 4)) > 0
    n = draw(st.integers(0, 9))
    meta = b"{}" if valid else draw(st.binary(max_size=40))
    fields = (
        (int(draw(st.sampled_from(list(Op)))), 0, len(meta), 0)
        if valid
        else (
            draw(st.integers(0, 2**16 - 1)),
            draw(st.integers(0, 2**32 - 1)),
            draw(st.sampled_from([len(meta), draw(st.integers(0, 2**32 - 1))])),
            draw(st.integers(0, 1)),
        )
    )
    op, flags, meta_len, reserved = fields
    ids = draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 2**64 - 1))
    head = HEADER.pack(MAGIC, PROTOCOL_VERSION, op, *ids, flags, meta_len, n, reserved)
    dims = st.sampled_from([0, 1, 3, 2**31, 2**62, -1])
    descriptors, bodies = [], []
    for _ in range(n):
        code = draw(st.sampled_from(sorted(DTYPE_BY_CODE)) if valid else st.integers(0, 255))
        ndim = draw(st.integers(0, 4) if valid else st.integers(0, 255))
        shape = draw(st.tuples(*[dims if valid else st.integers(-(2**63), 2**63 - 1)] * 4))
        descriptors.append(TENSOR_DESCRIPTOR.pack(code, ndim, *shape))
        dtype = DTYPE_BY_CODE.get(code)
        nbytes = math.prod(shape[: min(ndim, 4)]) * (dtype.itemsize if dtype else 1)
        exact = 0 <= nbytes <= 4096 and (valid or draw(st.booleans()))
        bodies.append(bytes(nbytes) if exact else draw(st.binary(max_size=64)))
    if not valid:
        bodies += draw(st.lists(st.binary(max_size=8), max_size=1))  # sometimes one too many
    return [head + meta + b"".join(descriptors), *bodies]


@settings(max_examples=1500, derandomize=True, database=None, deadline=None)
@given(raw_frames())
def test_the_decoder_raises_only_protocol_errors(frames: list[bytes]) -> None:
    with contextlib.suppress(ProtocolError):
        message = decode(frames)
        if message.op is Op.FORWARD:
            decode_forward(frames)
        elif message.op is Op.RESULT:
            decode_result(frames)
        elif message.op is Op.DECODE:
            decode_steps_from_message(message)


@settings(max_examples=1000, derandomize=True, database=None, deadline=None)
@given(st.lists(st.binary(max_size=80), min_size=1, max_size=4))
def test_random_bytes_after_the_magic_raise_only_protocol_errors(frames: list[bytes]) -> None:
    frames = [struct.pack("<4sH", MAGIC, PROTOCOL_VERSION) + frames[0], *frames[1:]]
    with contextlib.suppress(ProtocolError):
        decode(frames)


# -- a real worker ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker(
    start_workers: Callable[..., list[WorkerProcess]], identity: KeyPair
) -> tuple[WorkerProcess, KeyPair]:
    (started,) = start_workers("fz")
    return started, identity


@pytest.mark.slow
def test_a_worker_answers_every_fuzzed_message_and_keeps_serving(
    worker: tuple[WorkerProcess, KeyPair],
) -> None:
    """Random ops, metas (the ops' own field names with values of any JSON type, paths outside
    the cache, unreachable endpoints) and tensors: every message gets a reply, an ERROR or the
    op's answer, within the timeout, and the worker stays up."""
    process, identity = worker
    loop = asyncio.new_event_loop()
    client = SecureClient(identity, process.info["public_key"], name="fz", timeout_s=30)
    loop.run_until_complete(client.connect(process.endpoint.endpoint, timeout_s=10))
    seen: dict[str, int] = {}

    @settings(
        max_examples=500,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(messages(), st.sampled_from(SERVED) | st.sampled_from(list(Op)))
    def one(message: Message, op: Op) -> None:
        message = Message(op, message.stream_id, 0, message.flags, message.meta, message.tensors)
        try:
            reply = loop.run_until_complete(client.request(message, timeout_s=30))
            seen[reply.op.name] = seen.get(reply.op.name, 0) + 1
        except ProtocolError as exc:  # refused by the worker: an ERROR reply, or ours to send
            seen[type(exc).__name__] = seen.get(type(exc).__name__, 0) + 1
        except Exception as exc:  # an answered error
            if "did not answer" in str(exc) or process.process is None:
                raise
            seen["error"] = seen.get("error", 0) + 1
        assert process.process is not None and process.process.poll() is None, "worker died"

    try:
        one()
        hello = loop.run_until_complete(client.request(Message(Op.HELLO), timeout_s=10))
        assert hello.op is Op.HELLO_OK
    finally:
        client.close()
        loop.close()
    assert sum(seen.values()) >= 500, seen
