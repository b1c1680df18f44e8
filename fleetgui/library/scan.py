"""One scan of the library: find the models in every root, read each one's facts (reusing
what an earlier scan read while the files are unchanged) and link models to their exports."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from fleetgui.library.entry import Candidate, Format, ModelEntry, ModelFacts, Source
from fleetgui.library.exports import export_facts, find_exports
from fleetgui.library.gguf_metadata import gguf_facts, gguf_identity
from fleetgui.library.hf_cache import find_hf_cache
from fleetgui.library.hf_metadata import hf_facts, hf_identity
from fleetgui.library.ollama import find_ollama
from fleetgui.library.roots import LibraryRoots
from fleetgui.library.walk import find_in_folder, gguf_files

log = logging.getLogger(__name__)

_SOURCE_ORDER = {source: index for index, source in enumerate(Source)}
_UNKNOWN = "?"  # identity not computed yet (it is only needed when an export could match)


def discover(roots: LibraryRoots) -> list[Candidate]:
    """Every model in ``roots``, in source order, each path once (the first source wins: a
    folder the user added inside LM Studio's stays LM Studio's)."""
    found: list[Candidate] = []
    if roots.hf_hub is not None:
        found += find_hf_cache(roots.hf_hub)
    for folder in roots.lmstudio:
        found += [Candidate(g.stem, Source.LM_STUDIO, Format.GGUF, g) for g in gguf_files(folder)]
    if roots.ollama is not None:
        found += find_ollama(roots.ollama)
    for folder in roots.folders:
        found += find_in_folder(folder, Source.FOLDER, origin=folder)
    if roots.exports is not None:
        found += find_exports(roots.exports)
    seen: set[str] = set()
    unique: list[Candidate] = []
    for candidate in found:
        key = os.path.realpath(candidate.path)
        if key not in seen:
            seen.add(key)
            unique.append(candidate)
    return unique


def _signature(candidate: Candidate) -> tuple[int, ...]:
    """Changes when the model's files do (a missing file has its own)."""
    path = candidate.path
    marker = {Format.EXPORT: "manifest.json", Format.HUGGINGFACE: "config.json"}.get(
        candidate.format
    )
    out: list[int] = []
    for file in (path, path / marker) if marker else (path,):
        try:
            stat = file.stat()
            out += [stat.st_size, stat.st_mtime_ns]
        except OSError:
            out += [-1, -1]
    return tuple(out)


def disk_size(path: Path) -> int:
    """Bytes on disk of a file or a folder's files (symlinks followed, as the HF cache's point
    at its blobs; each file counted once)."""
    try:
        if path.is_file():
            return path.stat().st_size
    except OSError:
        return 0
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                stat = Path(folder, name).stat()
            except OSError:
                continue  # a dangling link: an unfinished download
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


@dataclass
class _Read:
    signature: tuple[int, ...]
    facts: ModelFacts
    size: int
    identity: str | None = _UNKNOWN  # export rows: the model_hash they were made from


class Library:
    """Scans :class:`LibraryRoots` into :class:`ModelEntry` rows. It remembers what it read
    per path, so a rescan reads only new or changed models. Not thread-safe: one scan at a
    time (the app runs them one after another off the GUI thread)."""

    def __init__(self) -> None:
        self._read: dict[Path, _Read] = {}

    def scan(self, roots: LibraryRoots) -> list[ModelEntry]:
        candidates = discover(roots)
        reads = {c.path: self._read_one(c) for c in candidates}
        self._read = reads  # models gone since the last scan are forgotten
        exports = [c for c in candidates if c.format is Format.EXPORT]
        entries = [self._entry(c, reads, exports, roots) for c in candidates]
        entries.sort(key=lambda e: (not e.supported, _SOURCE_ORDER[e.source], e.name.lower()))
        log.info(
            "model library: %d models (%d usable)",
            len(entries),
            sum(e.supported for e in entries),
        )
        return entries

    def _read_one(self, candidate: Candidate) -> _Read:
        signature = _signature(candidate)
        known = self._read.get(candidate.path)
        if known is not None and known.signature == signature:
            return known
        identity: str | None = _UNKNOWN
        try:
            if candidate.format is Format.EXPORT:
                facts, identity = export_facts(candidate.path)
            elif candidate.format is Format.GGUF:
                facts = gguf_facts(candidate.path)
            else:
                facts = hf_facts(candidate.path)
        except Exception as exc:  # one unreadable model must not hide the others
            log.warning("cannot read %s", candidate.path, exc_info=True)
            facts = ModelFacts(problem=f"cannot read its metadata ({type(exc).__name__}: {exc})")
        return _Read(signature, facts, disk_size(candidate.path), identity)

    def _identity(self, candidate: Candidate, read: _Read, roots: LibraryRoots) -> str | None:
        if read.identity == _UNKNOWN:
            if candidate.format is Format.GGUF:
                read.identity = gguf_identity(candidate.path, roots.views)
            else:
                read.identity = hf_identity(candidate.path)
        return read.identity

    def _entry(
        self,
        candidate: Candidate,
        reads: dict[Path, _Read],
        exports: list[Candidate],
        roots: LibraryRoots,
    ) -> ModelEntry:
        read = reads[candidate.path]
        facts = read.facts
        made: list[Path] = []
        if candidate.format is not Format.EXPORT and facts.problem is None:
            # Hashing a model reads a few bytes of every tensor: only when an export of the
            # same shape could be one of it.
            shape = (facts.n_layers, facts.hidden_size)
            alike = [
                e
                for e in exports
                if (reads[e.path].facts.n_layers, reads[e.path].facts.hidden_size) == shape
            ]
            identity = self._identity(candidate, read, roots) if alike else None
            made = [e.path for e in alike if identity and reads[e.path].identity == identity]
            made.sort(key=lambda p: _mtime(p / "manifest.json"), reverse=True)
        return ModelEntry(
            candidate.name,
            candidate.source,
            candidate.format,
            candidate.path,
            facts,
            read.size,
            tuple(made),
            candidate.origin,
        )


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
