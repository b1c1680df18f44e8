"""The worker's file cache: a stage's files are checked by content every time it is loaded, and
an upload is taken only if it fits beside the rest of the others."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest
from fleet_support import mounted_tmpfs

from fleetgui.worker.blob_store import (
    MAX_FILE_BYTES,
    STALE_PARTIAL_S,
    BlobError,
    BlobStore,
    DiskFullError,
    WantedFile,
)


def test_a_file_damaged_in_place_with_its_mtime_kept_is_not_loaded(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "cache")
    data = b"stage weights " * 1000
    sha = hashlib.sha256(data).hexdigest()
    store.write_chunk(sha, len(data), 0, data)
    store.finish(sha, len(data))
    wanted = [WantedFile("stage_0-2.bin", sha, len(data))]
    assert (store.materialize("first", wanted) / "stage_0-2.bin").read_bytes() == data

    blob = store.blob_path(sha)
    before = blob.stat()
    with blob.open("r+b") as file:  # one byte flipped, size and mtime as they were
        file.seek(10)
        file.write(b"X")
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert store.has(sha, len(data))  # deployment's quick question cannot tell...
    with pytest.raises(BlobError, match="damaged"):  # ...but loading hashes the files
        store.materialize("second", wanted)
    assert not blob.exists()  # deleted: the next deployment sends it again
    assert not store.has(sha, len(data))


def _sha(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def test_the_rest_of_every_upload_in_progress_is_held_back_from_the_free_space(
    tmp_path: Path,
) -> None:
    """Sizes relative to the disk's free space, so nothing big is written: an upload announcing
    3/4 of it holds that room, a second one announcing 1/2 is refused before it writes, naming
    the sizes; once the first one's partial has idled past STALE_PARTIAL_S, it gives way."""
    store = BlobStore(tmp_path / "cache")
    free = shutil.disk_usage(store.root).free
    if free * 3 // 4 > MAX_FILE_BYTES:
        pytest.skip("more free disk than one shard file may announce")
    first, second = _sha(1), _sha(2)
    assert store.write_chunk(first, free * 3 // 4, 0, b"0123456789") == 10
    assert store.reserved() == (free * 3 // 4 - 10, 1)
    with pytest.raises(DiskFullError, match=r"still to come.*held for 1 other upload"):
        store.write_chunk(second, free // 2, 0, b"x")
    assert store.received(second) == 0 and not (store.partial / f"{second}.part").exists()

    idle = time.time() - STALE_PARTIAL_S - 60
    os.utime(store.partial / f"{first}.part", (idle, idle))
    assert store.write_chunk(second, free // 2, 0, b"x") == 1  # the abandoned one made room
    assert not (store.partial / f"{first}.part").exists()
    assert store.reserved() == (free // 2 - 1, 1)  # the reclaimed one holds nothing
    assert store.reserved(except_sha256=second) == (0, 0)  # an upload is not its own rival
    store.discard_partial(second)
    assert store.reserved() == (0, 0)


def test_a_disk_that_fills_between_the_check_and_the_write_is_named(tmp_path: Path) -> None:
    """No inode left on a tmpfs with bytes to spare: the room check passes, creating the
    partial file fails with ENOSPC, and the error says the disk filled up (not an OSError)."""
    with mounted_tmpfs(tmp_path / "cache", "4m", inodes=16) as folder:
        store = BlobStore(folder)
        with pytest.raises(OSError) as full:
            for n in range(100):
                (folder / f"f{n}").touch()
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(DiskFullError, match="filled up while receiving"):
            store.write_chunk(_sha(3), 1000, 0, b"x" * 1000)
