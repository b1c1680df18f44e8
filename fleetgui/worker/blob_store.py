"""The worker's shard file cache: files stored by their sha256, written in resumable chunks.

Layout under the cache folder::

    blobs/<sha256>            complete files whose hash was checked
    partial/<sha256>.part     a file being received (resumes at its current size)
    stages/<key>/<path>       a loaded stage's files, hard links into blobs/ (copies if the
                              file system has no hard links), named as in the export

A file moves from ``partial/`` to ``blobs/`` only after its sha256 matched, by an atomic rename,
so a half-written shard is never loaded. A blob is hashed again before it is loaded unless it
is unchanged (same size, mtime and inode) since it was last hashed, so a file damaged on disk is
caught and sent again.

A chunk is taken only if the rest of its file fits on the disk beside the rest of every other
file being received, so two uploads that together would overfill the disk are refused up front
(naming the sizes) instead of both filling it; a partial file untouched for
:data:`STALE_PARTIAL_S` is an abandoned upload and is removed when another one needs its room.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text, inside_path, sha256_file

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
VERIFIED_FILE = "verified.json"
MAX_FILE_BYTES = 1 << 40  # 1 TiB: larger announced sizes are refused before any disk is used
# A partial file untouched this long is an abandoned upload (a live one is written every chunk,
# seconds apart) and is removed when another upload needs its room; only then, not on start or
# by age alone, because until the room is needed it costs nothing and lets a deployment resume.
STALE_PARTIAL_S = 600.0


class BlobError(FleetguiError):
    """A shard file could not be stored or does not match its hash."""


class DiskFullError(BlobError):
    """The cache's disk has no room for (the rest of) a shard file: the worker's problem to
    fix by freeing space, not a fault of the request."""


@dataclass(frozen=True, slots=True)
class WantedFile:
    """A file of a stage: where it goes in the stage folder and what it must hash to."""

    path: str  # relative, forward slashes, as in the manifest
    sha256: str
    size: int


def check_sha(sha256: str) -> str:
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise BlobError(f"{sha256!r} is not a sha256 hex digest")
    return sha256


def check_relative(path: str) -> PurePosixPath:
    """A manifest path that stays inside the stage folder (:func:`~fleetgui.fsutil.inside_path`)."""
    try:
        return inside_path(path)
    except ValueError as exc:
        raise BlobError(str(exc)) from None


class BlobStore:
    """Content-addressed files for one worker (see module doc). Not thread-safe: one agent."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.blobs = self.root / "blobs"
        self.partial = self.root / "partial"
        self.stages = self.root / "stages"
        for folder in (self.blobs, self.partial, self.stages):
            folder.mkdir(parents=True, exist_ok=True)
        self._verified_path = self.root / VERIFIED_FILE
        self._verified = self._load_verified()
        # sha256 -> announced size of each partial file this process receives: what is still to
        # come for it is held back from the free space every other upload is checked against.
        # A partial from before a restart holds nothing until its upload resumes.
        self._announced: dict[str, int] = {}

    # -- verification stamps ------------------------------------------------------------------

    def _load_verified(self) -> dict[str, list[int]]:
        try:
            data = json.loads(self._verified_path.read_text(encoding="utf-8"))
            return {k: list(v) for k, v in data.items() if isinstance(v, list)}
        except (OSError, ValueError, AttributeError):
            return {}

    @staticmethod
    def _stamp(path: Path) -> list[int]:
        info = path.stat()
        return [info.st_size, info.st_mtime_ns, info.st_ino]

    def _remember(self, sha256: str, path: Path) -> None:
        self._verified[sha256] = self._stamp(path)
        atomic_write_text(self._verified_path, json.dumps(self._verified))

    # -- queries ------------------------------------------------------------------------------

    def blob_path(self, sha256: str) -> Path:
        return self.blobs / check_sha(sha256)

    def has(self, sha256: str, size: int, *, rehash: bool = False) -> bool:
        """Whether a good copy of the file is here; a damaged copy is deleted. A file whose
        size, mtime and inode match its last check counts as good unless ``rehash``."""
        path = self.blob_path(sha256)
        if not path.is_file():
            return False
        stamp_ok = self._verified.get(sha256) == self._stamp(path)
        if path.stat().st_size == size and stamp_ok and not rehash:
            return True
        if path.stat().st_size == size and sha256_file(path) == sha256:
            self._remember(sha256, path)
            return True
        log.warning("cached shard file %s is damaged; it will be received again", sha256[:12])
        path.unlink()
        self._verified.pop(sha256, None)
        return False

    def received(self, sha256: str) -> int:
        """Bytes of the file received so far (0 if none): where a resumed upload starts."""
        part = self._part(sha256)
        return part.stat().st_size if part.is_file() else 0

    def _part(self, sha256: str) -> Path:
        return self.partial / f"{check_sha(sha256)}.part"

    def reserved(self, except_sha256: str = "") -> tuple[int, int]:
        """Bytes still to come for the partial files being received (but ``except_sha256``),
        and how many such files there are."""
        total = count = 0
        for sha, size in list(self._announced.items()):
            try:
                held = self._part(sha).stat().st_size
            except OSError:  # finished, discarded or reclaimed meanwhile
                self._announced.pop(sha, None)
                continue
            if sha != except_sha256:
                total += max(0, size - held)
                count += 1
        return total, count

    def _stale_partials(self, keep: str) -> list[Path]:
        """Partial files (but ``keep``'s) untouched for :data:`STALE_PARTIAL_S`, oldest first."""
        cutoff = time.time() - STALE_PARTIAL_S
        found: list[tuple[float, Path]] = []
        for part in self.partial.glob("*.part"):
            try:
                mtime = part.stat().st_mtime
            except OSError:
                continue
            if part.stem != keep and mtime < cutoff:
                found.append((mtime, part))
        return [part for _, part in sorted(found)]

    def _ensure_room(self, sha256: str, needed: int) -> None:
        """Raise :class:`DiskFullError` unless ``needed`` more bytes of ``sha256`` fit on the
        disk beside what the other uploads still need, after removing abandoned partials."""
        stale: list[Path] | None = None  # looked for only when short of room
        while True:
            reserved, uploads = self.reserved(except_sha256=sha256)
            free = shutil.disk_usage(self.root).free
            if needed + reserved <= free:
                return
            if stale is None:
                stale = self._stale_partials(keep=sha256)
            if not stale:
                break
            part = stale.pop(0)
            log.info("removing the abandoned partial upload %s to make room", part.name)
            part.unlink(missing_ok=True)
            self._announced.pop(part.stem, None)
        held = (
            f", {_size(reserved)} of it held for {uploads} other upload(s) in progress (an "
            f"upload idle for {STALE_PARTIAL_S / 60:.0f} min gives up its room)"
            if uploads
            else ""
        )
        raise DiskFullError(
            f"not enough disk for shard file {sha256[:12]}: {_size(needed)} still to come, "
            f"{_size(free)} free in {self.root}{held}: free some space on the worker, then "
            "deploy again"
        )

    # -- writing ------------------------------------------------------------------------------

    def write_chunk(self, sha256: str, size: int, offset: int, data: memoryview | bytes) -> int:
        """Append ``data`` at ``offset`` of the partial file; returns the bytes now held.

        ``offset`` must be where the partial file ends (the sender resumes from
        :meth:`received`); anything else is refused so no gap or overlap is ever written.
        """
        check_sha(sha256)
        if not 0 < size <= MAX_FILE_BYTES:
            raise BlobError(f"file size {size} is out of range")
        current = self.received(sha256)
        if offset != current:
            raise BlobError(f"chunk at offset {offset}, but {current} bytes are held: resume there")
        if current + len(data) > size:
            raise BlobError(f"chunk runs past the announced size {size}")
        # every chunk, not only the first: a resumed upload, or one whose disk something else
        # filled meanwhile, is refused with the sizes instead of failing half-written
        self._ensure_room(sha256, size - current)
        self._announced[sha256] = size
        try:
            with open(self._part(sha256), "ab") as handle:
                handle.write(data)
        except OSError as exc:  # the check above raced with another writer on the disk
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise DiskFullError(
                f"the disk of {self.root} filled up while receiving shard file {sha256[:12]} "
                f"({_size(self.received(sha256))} of {_size(size)} held): free some space on "
                "the worker, then deploy again; the upload resumes where it stopped"
            ) from exc
        return current + len(data)

    def finish(self, sha256: str, size: int) -> None:
        """Check the received file's size and hash, then publish it atomically."""
        part = self.partial / f"{check_sha(sha256)}.part"
        held = self.received(sha256)
        if held != size:
            raise BlobError(f"file {sha256[:12]} has {held} of {size} bytes")
        actual = sha256_file(part)
        self._announced.pop(sha256, None)
        if actual != sha256:
            part.unlink()
            raise BlobError(
                f"file {sha256[:12]} arrived damaged (its sha256 is {actual[:12]}); it was "
                "discarded, send it again"
            )
        target = self.blob_path(sha256)
        os.replace(part, target)
        self._remember(sha256, target)

    def discard_partial(self, sha256: str) -> None:
        self._part(sha256).unlink(missing_ok=True)
        self._announced.pop(sha256, None)

    # -- stage folders ------------------------------------------------------------------------

    def materialize(self, key: str, files: Iterable[WantedFile]) -> Path:
        """A folder holding ``files`` under their export names (links to verified blobs).
        Raises :class:`BlobError` naming the files that are missing or damaged."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", key) or key in (".", ".."):
            raise BlobError(f"stage key {key!r} is not a plain name")
        wanted = list(files)
        # hashed on every load: a file damaged in place with its mtime kept passed the stamp
        # check and its stage gave wrong tokens
        missing = [f.path for f in wanted if not self.has(f.sha256, f.size, rehash=True)]
        if missing:
            raise BlobError(f"missing or damaged shard files: {', '.join(missing)}")
        folder = self.stages / key
        if folder.exists():
            shutil.rmtree(folder)
        for entry in wanted:
            target = folder / Path(*check_relative(entry.path).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = self.blob_path(entry.sha256)
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
        return folder


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
