"""Can the desktop app show a window here? Checked before ``gui`` and the GUI ``demo`` do any
work: without a display, or without the system libraries Qt's xcb plugin loads, Qt aborts the
process (exit 134) with a hint that can name the wrong package, after the demo built its model."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

#: The Debian/Ubuntu package of each system library Qt's xcb platform plugin needs (the ones
#: PySide6's wheel does not bundle); docs/usage.md lists them for installing in one go.
XCB_PACKAGES: dict[str, str] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
}
#: Qt platforms that need no screen: nothing to check.
_SCREENLESS = {"offscreen", "minimal", "minimalegl", "vnc", "linuxfb", "eglfs", "vkkhrdisplay"}


def xcb_plugin() -> Path | None:
    """PySide6's xcb platform plugin file, found without importing Qt (None: not there)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    plugin = Path(next(iter(spec.submodule_search_locations))) / "Qt/plugins/platforms/libqxcb.so"
    return plugin if plugin.is_file() else None


def run_ldd(path: Path) -> str:
    """``ldd``'s report on ``path`` (empty when ldd is missing or fails: then nothing is known)."""
    try:
        done = subprocess.run(
            ["ldd", str(path)], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("cannot run ldd on %s: %s", path, exc)
        return ""
    return done.stdout


def missing_libraries(ldd_output: str) -> list[str]:
    """The libraries ldd reports as ``not found``, once each, in its order."""
    missing: list[str] = []
    for line in ldd_output.splitlines():
        name, _, where = line.strip().partition(" => ")
        if where.strip() == "not found" and name not in missing:
            missing.append(name)
    return missing


def _platforms(environ: Mapping[str, str]) -> list[str]:
    """QT_QPA_PLATFORM's platform names (it may list fallbacks with ';' and options after ':')."""
    text = environ.get("QT_QPA_PLATFORM", "")
    return [part.split(":", 1)[0].strip() for part in text.split(";") if part.strip()]


def display_problem(
    environ: Mapping[str, str] | None = None,
    *,
    platform: str = sys.platform,
    plugin: Path | None = None,
    ldd: Callable[[Path], str] = run_ldd,
) -> str | None:
    """Why Qt cannot open a window here, in a sentence; None when it should (or when that cannot
    be known). Only Linux's X11/Wayland case is checked: other systems always have a screen."""
    environ = os.environ if environ is None else environ
    if not platform.startswith("linux"):
        return None
    platforms = _platforms(environ)
    if platforms and all(p in _SCREENLESS for p in platforms):
        return None  # offscreen, minimal, vnc...: chosen on purpose, no screen needed
    if not environ.get("DISPLAY") and not environ.get("WAYLAND_DISPLAY"):
        return (
            "there is no display (DISPLAY and WAYLAND_DISPLAY are unset): start it in a desktop "
            "session or set DISPLAY"
        )
    if "xcb" not in platforms and (platforms or environ.get("WAYLAND_DISPLAY")):
        return None  # Qt uses Wayland in a Wayland session: the xcb plugin does not matter
    return _xcb_problem(plugin or xcb_plugin(), ldd)


def _xcb_problem(plugin: Path | None, ldd: Callable[[Path], str]) -> str | None:
    """The system libraries the xcb plugin lacks, with their packages (None: none missing)."""
    missing = missing_libraries(ldd(plugin)) if plugin is not None else []
    if not missing:
        return None
    names = [XCB_PACKAGES.get(lib, lib) for lib in missing]
    return (
        f"Qt's xcb platform plugin cannot load: missing {', '.join(missing)}; "
        f"install them (Debian/Ubuntu: sudo apt install {' '.join(names)})"
    )


def require_display(fallback: str = "") -> None:
    """Raise ``FleetguiError`` (one line, ending with ``fallback``: what else to do) when the
    app cannot open a window here; meant to run before any slow work."""
    problem = display_problem()
    if problem is not None:
        suffix = f"; {fallback}" if fallback else ""
        raise FleetguiError(f"the app cannot open a window: {problem}{suffix}")
