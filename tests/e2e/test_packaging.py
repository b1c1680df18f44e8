"""The PyInstaller bundles, built here with the same specs as on Windows (packaging/).

* The worker bundle runs as a real worker: a coordinator (``fleetgui generate --workers``) on
  loopback gets the same token ids as the in-process run, SIGTERM ends it with status 0 and frees
  both ports, and the bundle holds no torch, transformers or Qt.
* The app bundle renders every view offscreen with ``gui --screenshot`` after a real reply.

Bundles are built once per test session (onedir), one at a time.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

import fleetgui

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/e2e/ is two below
PACKAGING = ROOT / "packaging"
BUILD_TIMEOUT_S = 3600
READY_TIMEOUT_S = 60.0
PROMPT = "def add(a, b):\n    return"
N_NEW = 24

#: File or folder names in a bundle that mean torch, transformers or Qt came along.
FORBIDDEN_FILES = re.compile(
    r"(^|[^a-z])(torch|transformers|pyside6|shiboken6|pyqt[56]|qt6?core|libqt6|qt6\w*\.dll"
    r"|nncf|optimum)",
    re.IGNORECASE,
)
#: Top-level module names that must not be in the worker's archive.
FORBIDDEN_MODULES = (
    "torch",
    "transformers",
    "PySide6",
    "shiboken6",
    "PyQt5",
    "PyQt6",
    "nncf",
    "optimum",
    "qasync",
    "pyqtgraph",
)


def _load(name: str) -> ModuleType:
    """A module of packaging/ by file name (packaging/ is not a package)."""
    sys.path.insert(0, str(PACKAGING))
    try:
        spec = importlib.util.spec_from_file_location(name, PACKAGING / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(PACKAGING))


bundle_config = _load("bundle_config")
EXE_SUFFIX = ".exe" if sys.platform == "win32" else ""


# --- fast checks: command lines, version, icon --------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ["worker"]),
        (["--listen", "0.0.0.0:5555"], ["worker", "--listen", "0.0.0.0:5555"]),
        (["--log-level", "debug", "--pair"], ["--log-level", "debug", "worker", "--pair"]),
        (["--log-level=info", "--no-advertise"], ["--log-level=info", "worker", "--no-advertise"]),
        (["--version"], ["--version", "worker"]),
        (["--help"], ["worker", "--help"]),
    ],
)  # fmt: skip
def test_worker_binary_arguments_are_fleetgui_worker_arguments(
    argv: list[str], expected: list[str]
) -> None:
    assert _load("worker_entry").worker_argv(argv) == expected


def test_app_binary_without_arguments_opens_the_app() -> None:
    app_entry = _load("app_entry")
    assert app_entry.app_argv([]) == ["gui"]
    assert app_entry.app_argv(["generate", "x", "--json"]) == ["generate", "x", "--json"]


def test_version_has_one_source() -> None:
    assert bundle_config.version() == fleetgui.__version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fleetgui.__version__"}
    assert importlib.metadata.version("fleetgui") == fleetgui.__version__


@pytest.mark.parametrize(
    ("text", "numbers"),
    [("0.1.0", (0, 1, 0, 0)), ("1.2", (1, 2, 0, 0)), ("2.0.1rc1", (2, 0, 1, 0)),
     ("1.2.3.4.5", (1, 2, 3, 4)), ("3.1.dev2", (3, 1, 0, 0))],
)  # fmt: skip
def test_version_numbers(text: str, numbers: tuple[int, ...]) -> None:
    assert bundle_config.version_numbers(text) == numbers


def test_windows_version_resource_carries_the_package_version(tmp_path: Path) -> None:
    path = bundle_config.write_windows_version_file(tmp_path, "fleetgui", "fleetgui")
    tree = ast.parse(path.read_text(encoding="utf-8"), mode="eval")
    assert isinstance(tree.body, ast.Call) and ast.unparse(tree.body.func) == "VSVersionInfo"
    strings = {
        node.args[0].value: node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "StringStruct"
        and all(isinstance(arg, ast.Constant) for arg in node.args)
    }
    assert strings["ProductVersion"] == strings["FileVersion"] == fleetgui.__version__
    assert strings["OriginalFilename"] == "fleetgui.exe"
    numbers = bundle_config.version_numbers(fleetgui.__version__)
    assert f"prodvers={numbers}" in path.read_text()
    try:  # PyInstaller's own reader needs pefile, which it installs on Windows only
        from PyInstaller.utils.win32 import versioninfo
    except ImportError:
        return
    assert versioninfo.load_version_info_from_text_file(str(path)).toRaw()


@pytest.mark.slow
def test_committed_icons_are_what_make_icon_draws() -> None:
    assert _load("make_icon").main(["--check"]) == 0


def test_inno_setup_script_names_what_the_specs_build() -> None:
    iss = (PACKAGING / "windows" / "fleetgui.iss").read_text(encoding="utf-8")
    for name in (
        bundle_config.APP_NAME,
        bundle_config.APP_CLI_NAME,
        bundle_config.WORKER_NAME,
        bundle_config.WORKER_BACKGROUND_NAME,
    ):
        assert f"{name}.exe" in iss, name
    from fleetgui.net.worker_info import DEFAULT_PORT

    assert f'#define WorkerPorts "{DEFAULT_PORT}-{DEFAULT_PORT + 1}"' in iss
    assert "localport={#WorkerPorts}" in iss
    assert "ProductVersion" in iss  # the installer's version comes from fleetgui.exe


# --- building ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    """A built onedir bundle."""

    folder: Path
    build_dir: Path
    seconds: float

    def exe(self, name: str) -> Path:
        return self.folder / f"{name}{EXE_SUFFIX}"


def _build(spec: str, name: str, out: Path) -> Bundle:
    """Build ``packaging/<spec>`` into ``out/dist/<name>`` (the spec's COLLECT name)."""
    pytest.importorskip("PyInstaller", reason="pyinstaller comes with the 'dev' extra")
    dist, work = out / "dist", out / "build"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "PyInstaller", str(PACKAGING / spec), "--noconfirm",
         "--distpath", str(dist), "--workpath", str(work), "--log-level", "WARN"],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False, cwd=ROOT,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-4000:]
    log.info("built %s in %.0f s", name, seconds)
    return Bundle(dist / name, work / name, seconds)


@pytest.fixture(scope="session")
def worker_bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    out = tmp_path_factory.mktemp("pyinstaller-worker")
    return _build("fleetgui-worker.spec", bundle_config.WORKER_NAME, out)


@pytest.fixture(scope="session")
def app_bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    out = tmp_path_factory.mktemp("pyinstaller-app")
    return _build("fleetgui-app.spec", bundle_config.APP_NAME, out)


# --- the worker bundle ----------------------------------------------------------------------------


def _bundle_modules(executable: Path) -> list[str]:
    from PyInstaller.archive.readers import pkg_archive_contents

    return pkg_archive_contents(str(executable))


@pytest.mark.slow
@pytest.mark.bundle
def test_worker_bundle_holds_no_torch_transformers_or_qt(worker_bundle: Bundle) -> None:
    files = [p.relative_to(worker_bundle.folder) for p in worker_bundle.folder.rglob("*")]
    assert len(files) > 50
    assert [str(p) for p in files if FORBIDDEN_FILES.search(p.name)] == []
    modules = _bundle_modules(worker_bundle.exe(bundle_config.WORKER_NAME))
    assert "fleetgui.worker.service" in modules
    assert [m for m in modules if m.split(".")[0] in FORBIDDEN_MODULES] == []
    # What the hooks add: device plugins, the IR frontend beside libopenvino, the tokenizer
    # extension where openvino_tokenizers looks for it.
    internal = worker_bundle.folder / "_internal"
    libs = {p.name for p in (internal / "openvino" / "libs").iterdir()}
    assert any("openvino_intel_cpu_plugin" in n for n in libs), libs
    assert any("openvino_ir_frontend" in n for n in libs), libs
    assert not any("openvino_pytorch_frontend" in n for n in libs), libs
    # libopenvino finds plugins beside itself: it must exist once, in openvino/libs.
    assert [p.name for p in internal.glob("*openvino*") if p.is_file()] == []
    extension = internal / "openvino_tokenizers" / "lib"
    assert any("openvino_tokenizers" in p.name for p in extension.iterdir())


def _run_fleetgui(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEETGUI_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "fleetgui", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class FrozenWorker:
    """The frozen ``fleetgui-worker`` on loopback and what it said when ready."""

    process: subprocess.Popen[str]
    info: dict[str, object]
    stderr_path: Path

    @property
    def port(self) -> int:
        return int(str(self.info["port"]))

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@pytest.fixture
def frozen_worker(worker_bundle: Bundle, tmp_path: Path) -> Iterator[FrozenWorker]:
    from fleetgui.net.keys import KeyPair, write_identity

    coordinator = tmp_path / "coordinator"
    pair = KeyPair.generate()
    write_identity(coordinator, pair)
    authorized = tmp_path / "authorized_keys"
    authorized.write_text(f"{pair.public} test-coordinator\n")
    home = tmp_path / "worker-home"
    home.mkdir()
    stderr_path = home / "stderr.log"
    args = [
        "--listen", "127.0.0.1:0", "--name", "frozen", "--cache", str(home / "cache"),
        "--authorized-keys", str(authorized), "--key", str(home / "worker.key"),
        "--threads", "1", "--precision", "f32", "--no-advertise", "--ready-json",
    ]  # fmt: skip
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [str(worker_bundle.exe(bundle_config.WORKER_NAME)), *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "FLEETGUI_HOME": str(home)},
        )
    try:
        assert process.stdout is not None
        info: dict[str, object] = {}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and not info:
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith("{") and json.loads(line).get("event") == "ready":
                info = json.loads(line)
        assert info, f"frozen worker not ready:\n{stderr_path.read_text()[-3000:]}"
        yield FrozenWorker(process, info, stderr_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


@pytest.mark.slow
@pytest.mark.bundle
def test_frozen_worker_serves_generate_and_exits_cleanly_on_sigterm(
    frozen_worker: FrozenWorker, tiny_export: Callable[..., Path], tmp_path: Path
) -> None:
    export_dir = tiny_export(2)
    common = [
        "generate", str(export_dir), "--prompt", PROMPT, "--max-new-tokens", str(N_NEW),
        "--json", "--precision", "f32", "--threads", "1",
    ]  # fmt: skip
    local = _run_fleetgui(tmp_path / "local-home", *common)
    assert local.returncode == 0, local.stderr[-2000:]
    expected = json.loads(local.stdout.splitlines()[0])["token_ids"]
    assert len(expected) == N_NEW

    remote = _run_fleetgui(
        tmp_path / "coordinator-home",
        *common,
        "--workers", f"127.0.0.1:{frozen_worker.port}",
        "--identity", str(tmp_path / "coordinator"),
    )  # fmt: skip
    assert remote.returncode == 0, remote.stderr[-2000:] + frozen_worker.stderr()[-2000:]
    assert json.loads(remote.stdout.splitlines()[0])["token_ids"] == expected
    assert "loaded stages [1]" in frozen_worker.stderr()  # the frozen worker ran stage 1

    frozen_worker.process.send_signal(signal.SIGTERM)  # Windows: TerminateProcess, status 1
    status = frozen_worker.process.wait(30)
    assert status == 0 or sys.platform == "win32", frozen_worker.stderr()[-2000:]
    assert "Traceback" not in frozen_worker.stderr()
    port = frozen_worker.port
    assert _port_is_free(port) and _port_is_free(port + 1)


@pytest.mark.slow
@pytest.mark.bundle
def test_frozen_worker_help_is_fleetgui_worker_help(worker_bundle: Bundle, tmp_path: Path) -> None:
    frozen = subprocess.run(
        [str(worker_bundle.exe(bundle_config.WORKER_NAME)), "--help"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "FLEETGUI_HOME": str(tmp_path)},
    )  # fmt: skip
    source = _run_fleetgui(tmp_path, "worker", "--help")
    assert frozen.returncode == source.returncode == 0, frozen.stderr
    assert frozen.stdout == source.stdout


# --- the app bundle -------------------------------------------------------------------------------
# Building it takes 5 minutes here (1.3 GB: Qt, OpenVINO, torch). Like the worker bundle's and
# the installer's tests, CI leaves these out to stay under 20 minutes: `pytest -m bundle` runs
# them, when packaging/ changes.


@pytest.mark.slow
@pytest.mark.bundle
def test_app_bundle_holds_qt_plugins_resources_and_openvino(app_bundle: Bundle) -> None:
    internal = app_bundle.folder / "_internal"
    platforms = {p.name for p in internal.rglob("plugins/platforms/*")}
    wanted = {"windows": ["qwindows"], "linux": ["qoffscreen", "qxcb"]}.get(sys.platform, [])
    for plugin in wanted:
        assert any(plugin in name for name in platforms), (plugin, platforms)
    assert (internal / "resources" / "icons" / "fleetgui.svg").is_file()
    libs = {p.name for p in (internal / "openvino" / "libs").iterdir()}
    assert any("openvino_intel_cpu_plugin" in n for n in libs), libs
    assert any("openvino_pytorch_frontend" in n for n in libs), libs  # export converts torch
    extension = internal / "openvino_tokenizers" / "lib"
    assert any("openvino_tokenizers" in p.name for p in extension.iterdir())


@pytest.mark.slow
@pytest.mark.bundle
def test_frozen_app_renders_every_view_offscreen(
    app_bundle: Bundle, tiny_export: Callable[..., Path], tmp_path: Path
) -> None:
    export_dir = tiny_export(2)
    out = tmp_path / "shots"
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen"}
    result = subprocess.run(
        [str(app_bundle.exe(bundle_config.APP_NAME)), "gui", str(export_dir),
         "--screenshot", str(out), "--prompt", "Hello"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("fleet", "deployment", "dashboard", "chat"):
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name


@pytest.mark.slow
@pytest.mark.bundle
def test_frozen_app_exports_and_generates_like_the_source(
    app_bundle: Bundle,
    tiny_models: Callable[..., Path],
    tiny_export: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """The exporter stack (torch, transformers, OpenVINO's PyTorch frontend, tokenizer
    conversion) works frozen: the bundle's export generates what the source's export does."""
    export_dir = tiny_export(2)
    app = str(app_bundle.exe(bundle_config.APP_NAME))
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path / "home")}
    out = tmp_path / "frozen-2s"
    exported = subprocess.run(
        [app, "export", str(tiny_models("llama")), "--out", str(out), "--stages", "2",
         "--weights", "fp32"],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]
    generate = ["--prompt", PROMPT, "--max-new-tokens", str(N_NEW), "--json",
                "--precision", "f32", "--threads", "1"]  # fmt: skip
    frozen = subprocess.run(
        [app, "generate", str(out), *generate],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert frozen.returncode == 0, frozen.stderr[-3000:]
    source = _run_fleetgui(tmp_path / "source-home", "generate", str(export_dir), *generate)
    assert source.returncode == 0, source.stderr[-2000:]
    token_ids = [json.loads(r.stdout.splitlines()[0])["token_ids"] for r in (frozen, source)]
    assert token_ids[0] == token_ids[1]


def test_spec_files_parse() -> None:
    for spec in ("fleetgui-worker.spec", "fleetgui-app.spec"):
        ast.parse((PACKAGING / spec).read_text(encoding="utf-8"), filename=spec)
