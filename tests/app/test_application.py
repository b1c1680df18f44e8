"""Starting the app (``fleetgui gui``, ``fleetgui demo``) where it cannot show: a one-line error
before any model work (issue 26; the check itself is ``tests/test_display_check.py``'s), and
Ctrl+C ending the app cleanly."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from fleet_support import default_sigint

NO_DISPLAY = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")


def _environ_without_display(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NO_DISPLAY}
    return {**env, "FLEETGUI_HOME": str(home)}


@pytest.mark.skipif(sys.platform != "linux", reason="the display check is Linux's")
def test_demo_without_a_display_fails_at_once_suggesting_headless(tmp_path: Path) -> None:
    """The GUI demo with no display ends in one line before fetching or building any model."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fleetgui", "demo", "--size", "tiny"],
        env=_environ_without_display(tmp_path / "home"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert time.monotonic() - start < 30
    assert done.returncode == 1, done.stderr[-2000:]
    assert "--headless" in done.stderr and "Traceback" not in done.stderr
    cache = tmp_path / "home" / "shards_cache"
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.skipif(sys.platform != "linux", reason="the display check is Linux's")
def test_gui_without_a_display_fails_at_once(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleetgui", "gui"],
        env=_environ_without_display(tmp_path / "home"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "display" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is POSIX's")
def test_ctrl_c_ends_the_app_cleanly(tmp_path: Path) -> None:
    """SIGINT while the app waits in Qt's loop: it closes at once, no traceback, status 130."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FLEETGUI_HOME": str(tmp_path / "home")}
    default_sigint()
    process = subprocess.Popen(
        [sys.executable, "-m", "fleetgui", "--log-level", "debug", "gui"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(process.stderr, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while not any("app window shown" in line for line in seen):  # logged once it shows
            assert time.monotonic() < deadline, "the app did not start:\n" + "".join(seen)[-3000:]
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
        process.send_signal(signal.SIGINT)
        process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    stderr = "".join(seen)
    assert process.returncode in (0, 130), stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


def _read_lines(stream: IO[str], out: queue.Queue[str]) -> None:
    for line in stream:
        out.put(line)


CLOSING_APP = Path(__file__).with_name("closing_app.py")


@pytest.mark.parametrize("when", ["shown", "api", "streaming"])
def test_closing_the_window_ends_the_app_cleanly(
    tmp_path: Path, tiny_export: Callable[..., Path], when: str
) -> None:
    """The window's close event (its close button) ends ``fleetgui gui`` with status 0 and no
    traceback: with no model, with the API serving the deployed one, with a reply streaming
    (issue 39: Qt quit the loop under qasync when the last window closed, before the cleanup)."""
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "FLEETGUI_HOME": str(tmp_path / "home"),
        "CLOSE_APP_WHEN": when,
    }
    export = [] if when == "shown" else [str(tiny_export(1))]
    done = subprocess.run(
        [sys.executable, str(CLOSING_APP), "gui", *export],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "failed" not in done.stderr, done.stderr[-3000:]
    if when == "api":
        assert "serving=True" in done.stderr, done.stderr[-3000:]
    if when == "streaming":
        assert "a reply is streaming" in done.stderr, done.stderr[-3000:]
