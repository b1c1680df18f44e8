"""The worker's file cache: a stage's files are checked by content every time it is loaded."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from fleetgui.fleet.blob_store import BlobError, BlobStore, WantedFile


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
