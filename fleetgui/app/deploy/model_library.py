"""The model library in the app: scans run in a worker thread (never on the GUI thread), one at
a time, on demand and in the background; the folders the user added live in the settings.

The demo model is always the first entry (the first-run path offers it before the models found
on this PC); its export is not listed a second time among the exports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from fleetgui.app.deploy.controller import DeploymentController
from fleetgui.app.errors import user_message
from fleetgui.app.mode import ModeSettings
from fleetgui.app.settings import Settings
from fleetgui.library import Library, LibraryRoots, ModelEntry, Source, default_roots
from fleetgui.library.demo import demo_entry, demo_export_dir
from fleetgui.library.exports import export_weights

log = logging.getLogger(__name__)

RootsFor = Callable[[Sequence[str]], LibraryRoots]  # the user's added folders -> the roots
CLOSE_WAIT_MS = 10_000  # a scan reads headers only: seconds at most, even for a big cache


def library_summary(entries: Sequence[ModelEntry]) -> str:
    """The line above the library's table, counting the rows it lists: the demo model is one
    (and usable), so "0 found, 0 usable" over a usable demo row does not contradict the table."""
    found = [e for e in entries if e.source is not Source.DEMO]
    parts = [f"{len(found)} found on this PC"]
    if len(found) < len(entries):
        parts.insert(0, "the demo model")
    usable = sum(e.supported for e in entries)
    return f"{len(entries)} model(s), {usable} usable by fleetgui: {' and '.join(parts)}"


class _Done(QObject):
    """Carries a scan's result from the worker thread to the GUI thread (a queued signal)."""

    finished = Signal(object)  # list[ModelEntry], or the exception the scan raised


class _ScanJob(QRunnable):
    def __init__(self, work: Callable[[], list[ModelEntry]], done: _Done) -> None:
        super().__init__()
        self.work = work
        self.done = done

    def run(self) -> None:
        try:
            result: object = self.work()
        except Exception as exc:  # reported in the GUI thread, not lost in the pool
            log.error("model library scan failed", exc_info=True)
            result = exc
        self.done.finished.emit(result)


class LibraryService(QObject):
    """Scans the library off the GUI thread and says what it found."""

    entries_changed = Signal(object)  # list[ModelEntry], the demo first
    scanning_changed = Signal(bool)
    failed = Signal(str)  # what went wrong, with the fix

    def __init__(
        self, settings: Settings, roots: RootsFor | None = None, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.settings = settings
        self.roots_for: RootsFor = roots or default_roots
        self.entries: list[ModelEntry] = []
        self._library = Library()
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)  # Library is not thread-safe: scans run one by one
        self._done = _Done(self)
        self._done.finished.connect(self._finished)
        self._scanning = False
        self._again = False

    @property
    def scanning(self) -> bool:
        return self._scanning

    def refresh(self) -> None:
        """Scan now; a request during a scan scans once more after it (with what changed)."""
        if self._scanning:
            self._again = True
            return
        self._scanning, self._again = True, False
        self.scanning_changed.emit(True)
        roots = self.roots_for(self.settings.values.model_folders)
        self._pool.start(_ScanJob(lambda: self._scan(roots), self._done))

    def _scan(self, roots: LibraryRoots) -> list[ModelEntry]:  # in the worker thread
        demo_export = demo_export_dir(roots.exports)
        found = [e for e in self._library.scan(roots) if e.path != demo_export]
        return [demo_entry(roots.exports), *found]

    def _finished(self, result: object) -> None:
        self._scanning = False
        if isinstance(result, BaseException):
            self.failed.emit(f"the model library could not be read: {user_message(result)}")
        else:
            assert isinstance(result, list)
            self.entries = result
            self.entries_changed.emit(result)
        if self._again:
            self.refresh()
        else:
            self.scanning_changed.emit(False)

    def close(self, timeout_ms: int = CLOSE_WAIT_MS) -> None:
        """Let a scan under way finish (a Qt thread still running Python while the
        interpreter shuts down can crash it); refresh() works again afterwards."""
        if not self._pool.waitForDone(timeout_ms):
            log.warning("the model library scan did not end within %d ms", timeout_ms)

    def add_folder(self, folder: str) -> bool:
        """Add ``folder`` to the library (remembered) and rescan; False and ``failed`` if it
        does not exist."""
        path = Path(folder).expanduser()
        if not path.exists():
            self.failed.emit(f"{path} does not exist: choose a folder that holds models")
            return False
        folders = self.settings.values.model_folders
        if str(path) not in folders:
            self.settings.update(model_folders=(*folders, str(path)))
        self.refresh()
        return True

    def remove_folder(self, folder: str) -> None:
        """Stop listing the models of the added ``folder`` (their files stay)."""
        folders = self.settings.values.model_folders
        self.settings.update(model_folders=tuple(f for f in folders if f != folder))
        self.refresh()


def source_to_use(entry: ModelEntry, weights: str) -> Path:
    """What "Use on the fleet" opens for ``entry``: its newest export with ``weights`` when
    there is one (nothing to export), else the model itself."""
    for export in entry.exports:
        if export_weights(export) == weights:
            return export
    return entry.path


def use_entry(deployment: DeploymentController, entry: ModelEntry, mode: ModeSettings) -> bool:
    """Start "Use on the fleet" for ``entry``; False (and ``deployment.failed``) if it cannot
    be used or a job is running."""
    if entry.problem is not None:
        deployment.failed.emit(f"{entry.name} cannot be used: {entry.problem}")
        return False
    if entry.source is Source.DEMO:
        return deployment.use_demo(mode)
    return deployment.use_model(source_to_use(entry, deployment.export_weights), mode)
