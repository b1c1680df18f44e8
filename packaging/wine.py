"""Windows programs under Wine, each Wine prefix a throwaway Windows of its own.

Used on Linux to compile the installer with Inno Setup's compiler and to check what the installer
does (packaging/README.md). In a prefix ``C:`` is ``PREFIX/drive_c`` and ``Z:`` is ``/``. Nothing
Wine writes leaves the folder the prefix is in: HOME points there (Wine links the Windows desktop
and documents folders to HOME's), menu entries are off (``winemenubuilder``), Mono and Gecko are
never offered, and windows go to Wine's null display driver, so no screen is needed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

log = logging.getLogger(__name__)

#: How to get Wine on Debian or Ubuntu (as root). Inno Setup's compiler and the setup programs it
#: writes are 32-bit Windows programs, which Debian's Wine 8 runs only with the i386 wine32.
APT_INSTALL = (
    ("dpkg", "--add-architecture", "i386"),
    ("apt-get", "update"),
    ("apt-get", "install", "-y", "--no-install-recommends", "wine", "wine64", "wine32:i386"),
)
_DEBIAN_WINE32 = Path("/usr/lib/wine/wine")
_DEBIAN_WINE64 = Path("/usr/lib/wine/wine64")

#: Off: Mono and Gecko (an online install dialog otherwise), menu entries (written under HOME).
_DLL_OVERRIDES = "mscoree,mshtml=;winemenubuilder.exe=d"
#: Written before the first boot: Wine's null display driver, for machines without a screen.
_NULL_DISPLAY_REG = """WINE REGISTRY Version 2
;; All keys relative to \\\\User\\\\S-1-5-21-0-0-0-1000

#arch=win64

[Software\\\\Wine\\\\Drivers]
"Graphics"="null"
"""
_BOOTED_MARK = ".fleetgui-booted"
_REG_VALUE = re.compile(r"^ {4}(.+?) {4}(REG_[A-Z_]+)(?: {4}(.*))?$")


class WineError(RuntimeError):
    """Wine is missing or a Windows program under it failed; the message says what to do."""


def install_hint() -> str:
    commands = " && ".join(" ".join(command) for command in APT_INSTALL)
    return f"on Debian or Ubuntu, as root: {commands}"


def find_wine() -> str:
    """The ``wine`` command, checked to run 32-bit programs; raises WineError saying how to
    install it when it cannot."""
    wine = shutil.which("wine")
    if wine is None:
        raise WineError(f"Wine is not installed ({install_hint()})")
    if _DEBIAN_WINE64.exists() and not _DEBIAN_WINE32.exists():
        raise WineError(
            f"Wine cannot run 32-bit programs such as Inno Setup: wine32 is missing "
            f"({install_hint()})"
        )
    return wine


def install_wine_with_apt(timeout_s: float = 900) -> float:
    """Install Wine with apt (as root); returns the seconds it took."""
    started = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in APT_INSTALL:
        log.info("+ %s", " ".join(command))
        result = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
        if result.returncode != 0:
            raise WineError(f"{' '.join(command)} failed: {result.stderr.strip()[-2000:]}")
    return time.monotonic() - started


def windows_path(path: Path) -> str:
    """A Linux path as Windows programs under Wine see it (``Z:`` is ``/``)."""
    return "Z:" + str(path.resolve()).replace("/", "\\")


@dataclass(frozen=True)
class WinePrefix:
    """A booted Wine prefix (``WINEPREFIX``); its programs get ``home`` as HOME."""

    path: Path
    home: Path
    wine: str = "wine"

    @property
    def drive_c(self) -> Path:
        return self.path / "drive_c"

    def env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            # Wine reads the XDG folders (desktop, menus) from these: keep them under home.
            if key not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
        }
        env.update(
            WINEPREFIX=str(self.path),
            WINEARCH="win64",
            HOME=str(self.home),
            WINEDLLOVERRIDES=_DLL_OVERRIDES,
            WINEDEBUG=os.environ.get("WINEDEBUG", "-all"),
        )
        return env

    def run(
        self, args: Sequence[str], *, timeout_s: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a Windows program (``args[0]``: a Windows path or a program on Wine's PATH)."""
        command = [self.wine, *args]
        log.debug("+ %s", " ".join(command))
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            env=self.env(),
            timeout=timeout_s,
            check=False,
        )
        if check and result.returncode != 0:
            output = (result.stdout + result.stderr).strip()[-3000:]
            raise WineError(f"{args[0]} exited with {result.returncode} under Wine:\n{output}")
        return result

    def wait(self, timeout_s: float = 300) -> None:
        """Wait until every program in the prefix has ended (an uninstaller runs on in a copy
        of itself after the one started has exited)."""
        subprocess.run(
            ["wineserver", "-w"], env=self.env(), timeout=timeout_s, check=True, capture_output=True
        )

    def shutdown(self) -> None:
        subprocess.run(["wineserver", "-k"], env=self.env(), timeout=60, check=False)

    def unix_path(self, path: str) -> Path:
        """Where a ``C:\\`` or ``Z:\\`` path of this prefix is on Linux."""
        windows = PureWindowsPath(path)
        root = {"c:": self.drive_c, "z:": Path("/")}.get(windows.drive.lower())
        if root is None:
            raise ValueError(f"{path} is on no drive of the prefix {self.path}")
        return root.joinpath(*windows.parts[1:])

    def reg_query(self, key: str) -> dict[str, str] | None:
        """The values of a registry key (64-bit view) by name, or None when there is no key."""
        result = self.run(["reg", "query", key, "/reg:64"], check=False)
        if result.returncode != 0:
            return None
        values: dict[str, str] = {}
        for line in result.stdout.splitlines():
            match = _REG_VALUE.match(line.rstrip("\r"))
            if match:
                values[match.group(1)] = match.group(3) or ""
        return values

    def expand(self, *variables: str) -> list[str]:
        """Windows environment variables (``LOCALAPPDATA``...) as a program in the prefix sees
        them."""
        script = "&".join(f"echo %{name}%" for name in variables)
        lines = self.run(["cmd", "/c", script]).stdout.splitlines()
        if len(lines) != len(variables):
            raise WineError(f"cmd printed {lines!r} for {variables}")
        return [line.strip() for line in lines]


def boot_prefix(path: Path, timeout_s: float = 600) -> WinePrefix:
    """A Wine prefix at ``path/prefix`` (HOME ``path/home``): 64-bit Windows 10 with the null
    display driver, created on first use."""
    prefix = WinePrefix(path / "prefix", path / "home", find_wine())
    if (prefix.path / _BOOTED_MARK).exists():
        return prefix
    started = time.monotonic()
    shutil.rmtree(prefix.path, ignore_errors=True)  # what a boot cut short left
    prefix.home.mkdir(parents=True, exist_ok=True)
    prefix.path.mkdir(parents=True)
    (prefix.path / "user.reg").write_text(_NULL_DISPLAY_REG, encoding="ascii")
    prefix.run(["wineboot", "--init"], timeout_s=timeout_s)
    # Wine says Windows 7 by default; the installer needs Windows 10 (MinVersion=10.0).
    prefix.run(["winecfg", "-v", "win10"], timeout_s=timeout_s)
    prefix.wait(timeout_s)
    (prefix.path / _BOOTED_MARK).touch()
    log.info("Wine prefix %s ready in %.0f s", prefix.path, time.monotonic() - started)
    return prefix


def remove_prefix(path: Path) -> None:
    """End the programs of the prefix that ``boot_prefix(path)`` made, then delete ``path``."""
    WinePrefix(path / "prefix", path / "home").shutdown()
    shutil.rmtree(path, ignore_errors=True)
