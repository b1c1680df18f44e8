"""The worker's service (``fleetgui.worker.service``): a real worker refuses a coordinator it
does not trust and malformed frames, and answers every request it cannot serve, at once and
naming why, and keeps serving: a full or read-only disk, a path outside its cache, a chunk
without data, a ring it cannot join, a FORWARD outside its stage's contract. Before, the
coordinator waited out its 30 s (900 s for LOAD_STAGE) and was never told; two uploads that
together overfilled the disk left both partial files behind and every retry failed.

The disks are small tmpfs mounts (root only: root's writes ignore file modes).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fleet_support import (
    WorkerProcess,
    mounted_tmpfs,
    remount,
    worker_process,
)
from runtime_support import EXACT, reference_greedy

from fleetgui.export.manifest import read_manifest
from fleetgui.fleet.ring.shard_push import load_meta, stage_files
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.forward_codec import result_from_message
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import Flags, Message, Op, RemoteError, encode
from fleetgui.net.secure_socket import SecureClient, WorkerRefusedKeyError
from fleetgui.runtime.generation import GenerationResult
from fleetgui.runtime.stage import ForwardRequest
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of
from fleetgui.worker.blob_store import STALE_PARTIAL_S
from fleetgui.worker.service import free_port_pair

pytestmark = pytest.mark.slow

ANSWER_S = 5.0  # an error must come this fast: far below the coordinator's 30 s timeout
MiB = 1 << 20
CHUNK = 2 * MiB  # two full frames: what deploy sends, in 8 MiB-disk-sized steps
PROMPT = "def add(a, b):\n    return"
N_NEW = 16


@pytest.fixture(scope="module")
def exports(tiny_export: Callable[..., Path]) -> dict[str, Path]:
    return {"2": tiny_export(2), "mono": tiny_export(1)}


@pytest.fixture(scope="module")
def worker(start_workers: Callable[..., list[WorkerProcess]]) -> WorkerProcess:
    """A worker with an ordinary cache, shared by the tests that leave it as it was."""
    (started,) = start_workers("plain")
    return started


@pytest.fixture
def small_disk_worker(tmp_path: Path, authorized_keys: Path) -> Iterator[WorkerProcess]:
    """A worker whose cache is an 8 MiB tmpfs of its own."""
    with mounted_tmpfs(tmp_path / "small" / "cache", "8m"):
        started = worker_process(tmp_path, "small", authorized_keys).start()
        try:
            yield started
        finally:
            started.stop()  # before the mount goes


_request_ids = itertools.count(1000)


@asynccontextmanager
async def connected(worker: WorkerProcess, identity: KeyPair) -> AsyncIterator[SecureClient]:
    client = SecureClient(identity, worker.info["public_key"], name=worker.name)
    try:
        await client.connect(worker.endpoint.endpoint, timeout_s=10)
        yield client
    finally:
        client.close()


async def ask(client: SecureClient, message: Message, timeout_s: float = ANSWER_S) -> Message:
    """The reply to ``message``, an ERROR included; RequestTimeoutError if none comes in
    ``timeout_s``."""
    request_id = next(_request_ids)
    await client.send(encode(replace(message, request_id=request_id)))
    deadline = time.monotonic() + timeout_s
    while True:
        reply = await client.recv(timeout_s=max(0.0, deadline - time.monotonic()))
        if reply.request_id == request_id:
            return reply


def assert_refused(reply: Message, code: str, *words: str) -> None:
    assert reply.op is Op.ERROR, reply
    assert reply.meta["code"] == code, reply.meta
    for word in words:
        assert word in reply.meta["message"], reply.meta["message"]


async def assert_serving(client: SecureClient, worker: WorkerProcess) -> None:
    hello = await ask(client, Message(Op.HELLO))
    assert hello.op is Op.HELLO_OK and hello.meta["info"]["name"] == worker.name
    assert worker.process is not None and worker.process.poll() is None


def chunk(data: bytes, offset: int, length: int = CHUNK) -> Message:
    """The PUT_CHUNK of ``data`` (a whole file) at ``offset``."""
    piece = data[offset : offset + length]
    final = offset + len(piece) >= len(data)
    meta = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "offset": offset}
    return Message(
        Op.PUT_CHUNK,
        flags=Flags.FINAL if final else Flags.NONE,
        meta=meta,
        tensors=(np.frombuffer(piece, np.uint8),),
    )


async def upload(client: SecureClient, data: bytes, start: int = 0) -> Message:
    """Send ``data`` from ``start`` in chunks; the last reply (an ERROR stops)."""
    offset = start
    while True:
        reply = await ask(client, chunk(data, offset))
        if reply.op is Op.ERROR or reply.meta["complete"]:
            return reply
        offset = reply.meta["received"]


def fill(path: Path) -> None:
    """Write ``path`` until its disk is full."""
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(bytes(MiB))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def partials(worker: WorkerProcess) -> list[str]:
    return sorted(p.name for p in (worker.home / "cache" / "partial").iterdir())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- PUT_CHUNK ---------------------------------------------------------------------------------


def test_a_disk_that_fills_mid_upload_is_named_and_the_upload_resumes(
    small_disk_worker: WorkerProcess, identity: KeyPair
) -> None:
    """Something else fills the disk while a file arrives: the next chunk is refused with the
    sizes and where to resume (an OSError before, with neither); once room is made, the upload
    resumes there and completes."""
    worker = small_disk_worker
    cache = worker.home / "cache"
    data = np.random.default_rng(1).bytes(3 * MiB)

    async def main() -> None:
        async with connected(worker, identity) as client:
            first = await ask(client, chunk(data, 0))
            assert first.op is Op.PUT_OK and first.meta["received"] == CHUNK
            fill(cache / "filler")  # something else takes the rest of the disk
            full = await ask(client, chunk(data, CHUNK))
            assert_refused(full, "internal", "not enough disk", "still to come", "MB free")
            assert full.meta["received"] == CHUNK  # where to resume
            await assert_serving(client, worker)
            (cache / "filler").unlink()
            files = [{"sha256": sha(data), "size": len(data)}]
            have = await ask(client, Message(Op.HAVE_FILES, meta={"files": files}))
            assert have.meta["received"] == {sha(data): CHUNK}
            done = await upload(client, data, start=CHUNK)
            assert done.op is Op.PUT_OK and done.meta["complete"], done.meta

    asyncio.run(main())
    assert (cache / "blobs" / sha(data)).read_bytes() == data
    assert partials(worker) == []


def test_two_uploads_that_would_overfill_the_disk(
    small_disk_worker: WorkerProcess, identity: KeyPair
) -> None:
    """8 MiB disk, 2 MiB of it taken, two 3.5 MiB files: the second upload is refused before
    it writes anything, naming the sizes and the upload holding the room. The first one's
    coordinator goes away; once its partial file has been idle long enough, the next upload
    that needs the room removes it. The first file again, from the start: refused until room
    is made, then it goes through. No partial file is left."""
    worker = small_disk_worker
    cache = worker.home / "cache"
    (cache / "other data").write_bytes(bytes(2 * MiB))
    rng = np.random.default_rng(2)
    a, b = rng.bytes(7 * MiB // 2), rng.bytes(7 * MiB // 2)

    async def main() -> None:
        async with connected(worker, identity) as client:
            assert (await ask(client, chunk(a, 0))).op is Op.PUT_OK
            refused = await ask(client, chunk(b, 0))
            assert_refused(refused, "internal", "not enough disk", "held for 1 other upload")
            assert refused.meta["received"] == 0
            assert partials(worker) == [f"{sha(a)}.part"]  # nothing of b was written
            await assert_serving(client, worker)

            # a's upload was abandoned: its partial idles past the limit (set back its clock)
            part = cache / "partial" / f"{sha(a)}.part"
            idle = time.time() - STALE_PARTIAL_S - 60
            os.utime(part, (idle, idle))
            done = await upload(client, b)
            assert done.op is Op.PUT_OK and done.meta["complete"], done.meta
            assert partials(worker) == []  # a's room went to b

            again = await ask(client, chunk(a, 0))
            assert_refused(again, "internal", "not enough disk", "free some space")
            (cache / "other data").unlink()  # the user makes room
            done = await upload(client, a)
            assert done.op is Op.PUT_OK and done.meta["complete"], done.meta

    asyncio.run(main())
    assert partials(worker) == []
    assert (cache / "blobs" / sha(a)).read_bytes() == a
    assert (cache / "blobs" / sha(b)).read_bytes() == b


@pytest.mark.parametrize("tensors", ["none", "floats"])
def test_a_chunk_without_bytes_is_refused(
    tensors: str, worker: WorkerProcess, identity: KeyPair
) -> None:
    sent = () if tensors == "none" else (np.zeros(4, np.float32),)
    meta = {"sha256": "ab" * 32, "size": 16, "offset": 0}

    async def main() -> None:
        async with connected(worker, identity) as client:
            reply = await ask(client, Message(Op.PUT_CHUNK, meta=meta, tensors=sent))
            assert_refused(reply, "bad_field", "a chunk is one tensor of bytes")
            assert reply.meta["received"] == 0
            await assert_serving(client, worker)

    asyncio.run(main())


# -- LOAD_STAGE --------------------------------------------------------------------------------


def _stage_1(export_dir: Path) -> tuple[dict[str, Any], list[bytes]]:
    """The LOAD_STAGE meta of stage 1 of ``export_dir``, and its files."""
    manifest = read_manifest(export_dir)
    files = [(export_dir / f.path).read_bytes() for f in stage_files(manifest, [1])]
    return load_meta(manifest, [1], threads=1, precision="f32"), files


def test_load_stage_on_a_read_only_cache_is_answered(
    small_disk_worker: WorkerProcess, identity: KeyPair, exports: dict[str, Path]
) -> None:
    """The stage's files arrived; then the cache turns read-only. LOAD_STAGE says so, and
    loads once the cache is writable again."""
    worker = small_disk_worker
    meta, files = _stage_1(exports["2"])

    async def main() -> None:
        async with connected(worker, identity) as client:
            for data in files:
                assert (await upload(client, data)).op is Op.PUT_OK
            remount(worker.home / "cache", "ro")
            try:
                reply = await ask(client, Message(Op.LOAD_STAGE, meta=meta))
                assert_refused(reply, "stage_failed", "Read-only file system", "make it writable")
                await assert_serving(client, worker)
            finally:
                remount(worker.home / "cache", "rw")
            ready = await ask(client, Message(Op.LOAD_STAGE, meta=meta), timeout_s=120)
            assert ready.op is Op.STAGE_READY, ready.meta

    asyncio.run(main())


def test_load_stage_naming_a_path_outside_the_cache_is_refused(
    worker: WorkerProcess, identity: KeyPair, exports: dict[str, Path]
) -> None:
    meta, _ = _stage_1(exports["2"])
    stage = meta["stages"][0]
    escaped = "../../outside.bin"
    stage["files"][0]["path"] = escaped
    stage["model_files"] = [escaped]

    async def main() -> None:
        async with connected(worker, identity) as client:
            reply = await ask(client, Message(Op.LOAD_STAGE, meta=meta))
            assert_refused(reply, "bad_field", repr(escaped), "leaves the folder")
            await assert_serving(client, worker)

    asyncio.run(main())
    assert not (worker.home / "cache" / "stages" / escaped).resolve().exists()


# -- RING --------------------------------------------------------------------------------------


def _ring(epoch: int, endpoint: str, public_key: str) -> Message:
    nxt = {"endpoint": endpoint, "public_key": public_key, "name": "next"}
    return Message(Op.RING, meta={"epoch": epoch, "next": nxt, "peers": []})


def test_ring_with_a_next_worker_nobody_listens_for_is_answered_at_once(
    worker: WorkerProcess, identity: KeyPair
) -> None:
    """A closed port: ZMQ retried quietly and the worker answered only when its 10 s
    handshake wait ran out; a refused connection is reported as soon as it is refused."""
    closed = f"tcp://127.0.0.1:{free_port_pair()}"

    async def main() -> None:
        async with connected(worker, identity) as client:
            started = time.monotonic()
            reply = await ask(client, _ring(777, closed, KeyPair.generate().public))
            assert time.monotonic() - started < 3.0
            assert_refused(reply, "bad_field", closed, "nothing listens", "connection refused")
            await assert_serving(client, worker)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("endpoint", "key", "words"),
    [
        ("tcp://127.0.0.1:5555", "not-a-key", ("public key", "'not-a-key'", "not a CURVE")),
        ("tcp://127.0.0.1:5555", "A" * 39 + "~", ("public key", "not a CURVE")),
        ("127.0.0.1:5555", None, ("endpoint", "'127.0.0.1:5555'", "tcp://host:port")),
        ("tcp://127.0.0.1", None, ("endpoint", "tcp://host:port")),
    ],
    ids=["key", "key character", "endpoint scheme", "endpoint port"],
)
def test_ring_with_a_malformed_key_or_endpoint_is_refused_and_changes_nothing(
    endpoint: str,
    key: str | None,
    words: tuple[str, ...],
    worker: WorkerProcess,
    identity: KeyPair,
) -> None:
    async def main() -> None:
        async with connected(worker, identity) as client:
            before = await ask(client, Message(Op.HEARTBEAT))
            epoch = before.meta["epoch"] + 1
            reply = await ask(client, _ring(epoch, endpoint, key or KeyPair.generate().public))
            assert_refused(reply, "bad_field", *words)
            after = await ask(client, Message(Op.HEARTBEAT))
            assert after.meta["epoch"] == before.meta["epoch"]  # the ring as it was
            await assert_serving(client, worker)

    asyncio.run(main())


# -- FORWARD -----------------------------------------------------------------------------------


def test_forwards_outside_the_stage_contract_are_answered_and_other_streams_go_on(
    worker: WorkerProcess, identity: KeyPair, exports: dict[str, Path]
) -> None:
    """The coordinator runs stage 0, the worker stage 1. While a generation runs, a FORWARD
    with a batch of 2 is refused naming the stage's contract, and compacting a fresh stream
    is a no-op answered like the same request without it; the generation, and the next one,
    give the reference tokens (a batch of 2 broke every later FORWARD, then the worker)."""
    tokenizer = Tokenizer(tokenizer_dir_of(exports["2"]))
    ids = tokenizer.encode(PROMPT)
    reference = reference_greedy(exports["mono"], ids, N_NEW)
    greedy = GenerationConfig(max_new_tokens=N_NEW)

    async def main() -> None:
        session = FleetSession(identity, CoordinatorConfig(local=EXACT))
        await session.connect([worker.endpoint])
        await session.deploy(exports["2"])
        try:
            ring = session.deployment.ring
            assert ring is not None and [m.name for m in ring.members] == [worker.name]
            link = ring.members[0]
            first = ring.local[0]
            hidden = (await first.forward(ForwardRequest(900, np.array([ids])))).payload
            await first.release(900)
            assert hidden is not None and hidden.shape[0] == 1

            greedy_head = {"kind": "greedy"}

            async def forward(stream: int, payload: np.ndarray, compact: bool) -> Message:
                meta = {"epoch": ring.epoch, "rewind": 0, "compact": compact, "head": greedy_head}
                message = Message(Op.FORWARD, stream, meta=meta, tensors=(payload,))
                return await link.call(message, timeout_s=ANSWER_S)

            seen, result = 0, None
            async for item in session.pipeline().stream(PROMPT, greedy):
                if isinstance(item, GenerationResult):
                    result = item
                    continue
                seen += 1
                if seen != 4:  # mid-generation: the stream holds state on the worker
                    continue
                with pytest.raises(RemoteError, match="stage 1 takes hidden states") as refused:
                    await forward(901, np.repeat(hidden, 2, axis=0), compact=False)
                assert refused.value.code == "stage_failed"
                compacted = result_from_message(await forward(902, hidden, compact=True))
                plain = result_from_message(await forward(903, hidden, compact=False))
                assert compacted.tokens == plain.tokens and len(plain.tokens) == 1
            assert result is not None and result.token_ids == reference
            again = await session.pipeline().complete(PROMPT, greedy)
            assert again.token_ids == reference
        finally:
            await session.close()

    asyncio.run(main())
    assert worker.process is not None and worker.process.poll() is None


def test_forks_outside_the_contract_are_refused_and_a_copy_computes_as_its_source(
    worker: WorkerProcess, identity: KeyPair, exports: dict[str, Path]
) -> None:
    """FORK (start a stream from a copy of another's first KV entries) with meta a peer should
    not send (no source, keep 0 or not a number, more entries than the source holds, a source
    that is not there, itself) is answered with an error at once; a good one gives a stream
    whose next token is the source's, and the worker goes on serving."""
    tokenizer = Tokenizer(tokenizer_dir_of(exports["2"]))
    ids = tokenizer.encode(PROMPT)

    async def main() -> None:
        session = FleetSession(identity, CoordinatorConfig(local=EXACT))
        await session.connect([worker.endpoint])
        await session.deploy(exports["2"])
        try:
            ring = session.deployment.ring
            assert ring is not None
            link = ring.members[0]
            assert "FORK" in link.hello["ops"]
            hidden = (await ring.local[0].forward(ForwardRequest(910, np.array([ids])))).payload
            assert hidden is not None

            async def forward(stream: int, payload: np.ndarray) -> list[int]:
                meta = {"epoch": ring.epoch, "rewind": 0, "compact": False,
                        "head": {"kind": "greedy"}}  # fmt: skip
                message = Message(Op.FORWARD, stream, meta=meta, tensors=(payload,))
                return result_from_message(await link.call(message, timeout_s=ANSWER_S)).tokens

            async def fork(stream: int, **meta: object) -> Message:
                return await link.call(Message(Op.FORK, meta=meta), ANSWER_S, stream_id=stream)

            whole = await forward(911, hidden)  # stream 911 holds the prompt on the worker
            for meta, code in (
                ({"keep": 1}, "bad_field"),
                ({"source": 911, "keep": 0}, "bad_field"),
                ({"source": 911, "keep": True}, "bad_field"),
                ({"source": "911", "keep": 2}, "bad_field"),
                ({"source": 911, "keep": len(ids) + 1}, "stage_failed"),
                ({"source": 999, "keep": 1}, "stage_failed"),
            ):
                with pytest.raises(RemoteError) as refused:
                    await fork(912, **meta)
                assert refused.value.code == code, meta
            with pytest.raises(RemoteError, match="from itself"):
                await fork(911, source=911, keep=1)
            assert (await fork(912, source=911, keep=len(ids) - 1)).op is Op.FORK
            assert await forward(912, hidden[:, -1:]) == whole  # the copy's next token
            assert await forward(911, hidden[:, -1:]) != []  # the source is still there
        finally:
            await session.close()

    asyncio.run(main())
    assert worker.process is not None and worker.process.poll() is None


def test_unpaired_coordinator_is_refused(live_workers: list[WorkerProcess]) -> None:
    async def main() -> None:
        stranger = SecureClient(KeyPair.generate(), live_workers[0].info["public_key"], name="w1")
        try:
            with pytest.raises(WorkerRefusedKeyError, match="refused this coordinator's key"):
                await stranger.connect(live_workers[0].endpoint.endpoint, timeout_s=5)
        finally:
            stranger.close()

    asyncio.run(main())


BAD_FRAMES = {
    "wrong version": [b"FLGT\x09\x00" + bytes(30)],
    "huge meta length": [
        b"FLGT\x01\x00\x1e\x00" + bytes(16) + b"\x00\x00\x00\x00\xff\xff\xff\x7f" + bytes(4)
    ],
    "truncated": [b"FLGT\x01\x00\x0a"],
    "random bytes": [bytes(np.random.default_rng(0).integers(0, 256, 200, dtype=np.uint8))],
    # built below: tensor descriptors whose shapes cannot be (a negative dim; a zero beside a
    # huge one, 0 bytes by size, which ended the worker before the shape's extent was checked)
    "negative dims": None,
    "zero and huge dims, FORWARD": None,
    "zero and huge dims, HELLO": None,
}


def _bad_dims(case: str) -> list[bytes]:
    import struct

    from fleetgui.net.protocol import HEADER, MAGIC, PROTOCOL_VERSION, TENSOR_DESCRIPTOR

    meta = b"{}"
    op = Op.HELLO if "HELLO" in case else Op.FORWARD
    header = HEADER.pack(MAGIC, PROTOCOL_VERSION, int(op), 1, 1, 0, len(meta), 1, 0)
    if case == "negative dims":
        descriptor = TENSOR_DESCRIPTOR.pack(3, 2, 1, -4, 0, 0)
        return [header + meta + descriptor, struct.pack("<4f", 1, 2, 3, 4)]
    descriptor = TENSOR_DESCRIPTOR.pack(3, 2, 0, 2**62, 0, 0)
    return [header + meta + descriptor, b""]


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_malformed_frames_are_rejected_and_worker_keeps_serving(
    case: str, live_workers: list[WorkerProcess], identity: KeyPair
) -> None:
    frames = BAD_FRAMES[case] or _bad_dims(case)

    async def main() -> None:
        client = SecureClient(identity, live_workers[0].info["public_key"], name="w1")
        try:
            await client.connect(live_workers[0].endpoint.endpoint, timeout_s=5)
            await client.send(frames)
            reply = await client.recv(timeout_s=5)
            assert reply.op is Op.ERROR
            assert reply.meta["code"] in {
                "bad_version",
                "too_large",
                "truncated",
                "bad_magic",
                "bad_shape",
            }
            hello = await client.request(Message(Op.HELLO), timeout_s=5)
            assert hello.op is Op.HELLO_OK and hello.meta["info"]["name"] == "w1"
        finally:
            client.close()

    asyncio.run(main())
