"""Exporting a HuggingFace model from the app: in an executor thread, with progress and Cancel.

Cancel takes effect at the exporter's next progress report (between steps of a stage): the
exporter is interrupted there, its output stays in the hidden ``.NAME.partial`` folder (never
loaded, reused by the next export of the same model) and the target folder is untouched.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from fleetgui.app.deploy.interfaces import DeployCancelledError
from fleetgui.export.exporter import ExportProgress, ExportRequest
from fleetgui.export.manifest import Manifest

log = logging.getLogger(__name__)


class ExportJob:
    """One export; ``run`` is awaited in the GUI loop, ``cancel`` may be called any time."""

    def __init__(self, request: ExportRequest) -> None:
        self.request = request
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    async def run(self, progress: Callable[[ExportProgress], None]) -> Manifest:
        """Export; ``progress`` is called in the loop's thread. Raises ``DeployCancelledError``
        when cancelled."""
        loop = asyncio.get_running_loop()

        def report(step: ExportProgress) -> None:  # in the export thread
            if self._cancelled.is_set():
                raise DeployCancelledError("export cancelled")
            loop.call_soon_threadsafe(progress, step)

        def work() -> Manifest:
            from fleetgui.export.exporter import export_model

            if self._cancelled.is_set():
                raise DeployCancelledError("export cancelled")
            return export_model(self.request, progress=report)

        future = loop.run_in_executor(None, work)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self.cancel()  # the thread stops at its next step
            future.add_done_callback(_retrieve)  # ... raising DeployCancelledError, expected
            raise


def _retrieve(future: asyncio.Future[Manifest]) -> None:
    """Take the abandoned export's outcome, so asyncio does not log it as never retrieved."""
    if not future.cancelled() and future.exception() is not None:
        log.debug("cancelled export ended: %s", future.exception())


def default_export_dir(
    model_dir: Path, weights: str, stages: int, root: Path, *, layers: str | None = None
) -> Path:
    """Where the app puts an export of ``model_dir``: ``root/NAME-WEIGHTS-Ns``, or with exact
    ``layers`` (``"0:9,9:16"``) ``root/NAME-WEIGHTS-Ns-0-9-16``."""
    folder = f"{Path(model_dir).name}-{weights}-{stages}s"
    if layers:
        cuts = [layers.split(",")[0].split(":")[0]] + [r.split(":")[1] for r in layers.split(",")]
        folder += "-" + "-".join(cuts)
    return root / folder


def export_request(
    model_dir: Path, weights: str, root: Path, *, stages: int, layers: str | None = None
) -> ExportRequest:
    """An export of ``model_dir`` into its :func:`default_export_dir`: in ``stages`` even
    stages, or with exact ``layers`` (one stage per range)."""
    out = default_export_dir(model_dir, weights, stages, root, layers=layers)
    return ExportRequest(
        model_dir, out, stages=None if layers else stages, layers=layers, weights=weights
    )
