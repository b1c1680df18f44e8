"""Smoke-test the frozen programs, built or installed: each says its version, the frozen worker
serves stage 1 of a tiny export to the frozen app's ``generate`` with the token ids the app gets
alone, and the frozen app renders its views offscreen (``gui --screenshot``).

    python packaging/smoke_test.py                   # the bundles in dist/
    python packaging/smoke_test.py --app DIR --worker DIR  # e.g. the installed ones

The tiny export (a 2-layer toy Llama from ``fleetgui demo-model --size tiny``, exported by the
frozen app) is made once in ``--work``. Used by .github/workflows/windows.yml; runs on Linux on
the Linux bundles too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import bundle_config

log = logging.getLogger(__name__)

WINDOWS = sys.platform == "win32"
EXE = ".exe" if WINDOWS else ""
#: The app's console program (on Windows fleetgui.exe has no console; fleetgui-cli.exe has).
APP_CLI = (bundle_config.APP_CLI_NAME if WINDOWS else bundle_config.APP_NAME) + EXE
GENERATE = ["--prompt", "def add(a, b):", "--max-new-tokens", "8", "--json",
            "--precision", "f32", "--threads", "1"]  # fmt: skip
READY_TIMEOUT_S = 120


class SmokeTestError(RuntimeError):
    """A frozen program failed; the message holds its output."""


def run(command: list[str | Path], env: dict[str, str] | None = None, timeout: float = 900) -> str:
    """Run a program; its stdout, or SmokeTestError with its output when it fails."""
    log.info("+ %s", " ".join(map(str, command)))
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True, text=True, errors="replace", env=env, timeout=timeout, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise SmokeTestError(
            f"{command[0]} exited with {result.returncode}:\n{result.stdout[-2000:]}\n"
            f"{result.stderr[-3000:]}"
        )
    return result.stdout


def tiny_export(app_cli: Path, work: Path) -> Path:
    """A two-stage export of a 2-layer toy model, made once in ``work``."""
    export = work / "tiny-export"
    if (export / "manifest.json").is_file():
        return export
    model = work / "tiny-model"
    run([sys.executable, "-m", "fleetgui", "demo-model", "--size", "tiny", "--out", model])
    run([app_cli, "export", model / "target", "--out", export, "--stages", "2",
         "--weights", "fp32"])  # fmt: skip
    return export


def token_ids(stdout: str) -> list[int]:
    first = json.loads(stdout.splitlines()[0])
    return [int(token) for token in first["token_ids"]]


def generate_through_worker(app_cli: Path, worker: Path, export: Path, work: Path) -> None:
    """The frozen worker serves stage 1 to the frozen app: same tokens as the app alone."""
    keys = work / "coordinator"
    if not (keys / "coordinator.pub").is_file():
        run([app_cli, "keys", "--out", keys])
    env = {**os.environ, "FLEETGUI_HOME": str(work / "worker-home")}
    args = ["--listen", "127.0.0.1:0", "--authorized-keys", str(keys / "coordinator.pub"),
            "--no-advertise", "--ready-json", "--threads", "1", "--precision", "f32"]  # fmt: skip
    log.info("+ %s %s", worker, " ".join(args))
    stderr_path = work / "worker-stderr.log"
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [str(worker), *args], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        )
    try:
        port = _ready_port(process, stderr_path)
        alone = token_ids(run([app_cli, "generate", export, *GENERATE]))
        remote = run([app_cli, "generate", export, *GENERATE,
                      "--workers", f"127.0.0.1:{port}", "--identity", keys])  # fmt: skip
        if token_ids(remote) != alone:
            raise SmokeTestError(f"through the worker {token_ids(remote)}, alone {alone}")
        log.info("the worker served generate: %s", alone)
    finally:
        process.terminate()  # TerminateProcess on Windows
        process.wait(30)


def _ready_port(process: subprocess.Popen[str], stderr_path: Path) -> int:
    if process.stdout is None:
        raise SmokeTestError("the worker was started without a stdout pipe")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("{") and json.loads(line).get("event") == "ready":
            return int(json.loads(line)["port"])
    raise SmokeTestError(f"the worker did not get ready:\n{stderr_path.read_text()[-3000:]}")


def screenshots(app_cli: Path, export: Path, out: Path) -> None:
    """The app renders every view offscreen after a reply."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FLEETGUI_HOME": str(out / "home")}
    run([app_cli, "gui", export, "--screenshot", out, "--prompt", "Hello"], env=env)
    missing = [
        v for v in ("fleet", "deployment", "dashboard", "chat") if not (out / f"{v}.png").is_file()
    ]
    if missing:
        raise SmokeTestError(f"no screenshot of {', '.join(missing)} in {out}")


def main(argv: list[str] | None = None) -> int:
    dist = bundle_config.ROOT / "dist"
    parser = argparse.ArgumentParser(description="Smoke-test the frozen worker and app.")
    parser.add_argument("--app", type=Path, default=dist / bundle_config.APP_NAME)
    parser.add_argument("--worker", type=Path, default=dist / bundle_config.WORKER_NAME)
    parser.add_argument("--work", type=Path, default=bundle_config.ROOT / "build" / "smoke")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app_cli = args.app / APP_CLI
    worker = args.worker / f"{bundle_config.WORKER_NAME}{EXE}"
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        for program in (worker, app_cli):
            print(run([program, "--version"]).strip())
        export = tiny_export(app_cli, args.work)
        generate_through_worker(app_cli, worker, export, args.work)
        screenshots(app_cli, export, args.work / "shots")
    except SmokeTestError as exc:
        raise SystemExit(f"smoke test failed: {exc}") from None
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
