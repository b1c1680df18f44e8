"""What a command writes where: stdout holds its result (for scripts), everything else stderr."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout to stderr meanwhile: Python's ``sys.stdout`` (rich's
    progress bars write there) and file descriptor 1 (native code, child processes)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()  # text buffered meanwhile belongs to stderr too
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)
