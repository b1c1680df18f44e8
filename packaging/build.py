"""Build the fleetgui bundles, and on Windows the installer, in one command.

    python packaging/build.py                 # both bundles into dist/
    python packaging/build.py worker          # only the worker bundle
    python packaging/build.py --installer     # both bundles, then Inno Setup (Windows)

Bundles are PyInstaller onedir folders: ``dist/fleetgui-worker/`` and ``dist/fleetgui/``;
the installer is ``dist/installer/fleetgui-setup-<version>.exe``. See packaging/README.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGING = Path(__file__).resolve().parent
ROOT = PACKAGING.parent
SPECS = {"worker": "fleetgui-worker.spec", "app": "fleetgui-app.spec"}
ISS = PACKAGING / "windows" / "fleetgui.iss"


def build_bundle(which: str, dist: Path, work: Path) -> float:
    """Run PyInstaller on one spec; returns the seconds it took."""
    started = time.monotonic()
    command = [
        sys.executable, "-m", "PyInstaller", str(PACKAGING / SPECS[which]), "--noconfirm",
        "--distpath", str(dist), "--workpath", str(work),
    ]  # fmt: skip
    log.info("building the %s bundle: %s", which, " ".join(command))
    subprocess.run(command, check=True, cwd=ROOT)
    seconds = time.monotonic() - started
    log.info("%s bundle built in %.0f s", which, seconds)
    return seconds


def find_iscc() -> Path | None:
    """Inno Setup's command-line compiler: on PATH or in its default install folders."""
    found = shutil.which("ISCC") or shutil.which("iscc")
    if found:
        return Path(found)
    for variable in ("ProgramFiles(x86)", "ProgramFiles", "LOCALAPPDATA"):
        base = os.environ.get(variable)
        for sub in ("Inno Setup 6", r"Programs\Inno Setup 6"):
            if base and (Path(base) / sub / "ISCC.exe").is_file():
                return Path(base) / sub / "ISCC.exe"
    return None


def build_installer(dist: Path) -> None:
    iscc = find_iscc()
    if iscc is None:
        raise SystemExit("Inno Setup 6 (ISCC.exe) not found: install it from jrsoftware.org")
    subprocess.run([str(iscc), f"/DDistDir={dist}", str(ISS)], check=True, cwd=ROOT)
    log.info("installer written to %s", dist / "installer")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the fleetgui bundles and installer.")
    parser.add_argument("bundles", nargs="*", metavar="BUNDLE", help="worker, app (default both)")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder")
    parser.add_argument("--work", type=Path, default=ROOT / "build", help="PyInstaller work folder")
    parser.add_argument("--installer", action="store_true", help="then run Inno Setup (Windows)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.bundles) - set(SPECS))
    if unknown:
        parser.error(f"unknown bundle {', '.join(unknown)} (choose from {', '.join(SPECS)})")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for which in args.bundles or list(SPECS):
        build_bundle(which, args.dist.resolve(), args.work.resolve())
    if args.installer:
        build_installer(args.dist.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
