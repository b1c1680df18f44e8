"""Running the ``fleetgui`` command as a user would: a child process, with its own home folder."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

#: ``fleetgui plan --json``'s keys (a contract: scripts read them), and each device entry's
PLAN_KEYS = frozenset(
    {"devices", "left_out", "predicted_ms_per_token", "predicted_tokens_per_s", "max_streams"}
)
PLAN_DEVICE_KEYS = frozenset(
    {
        "name",
        "start_layer",
        "end_layer",
        "memory_bytes",
        "predicted_ms",
        "stream_kv_bytes",
        "max_streams",
    }
)


def run_cli(
    home: Path | None,
    *args: str,
    timeout: float = 600,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m fleetgui ARGS`` with ``FLEETGUI_HOME=home`` (None: the caller's) and ``env``
    added to this process's environment; its output captured as text."""
    environ = {**os.environ, **(env or {})}
    if home is not None:
        environ["FLEETGUI_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "fleetgui", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
        check=False,
    )
