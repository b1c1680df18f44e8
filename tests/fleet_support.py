"""Real worker processes on loopback for fleet tests: start, read the ready line, kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleetgui.fleet.session_config import WorkerEndpoint
from fleetgui.net.keys import KeyPair, write_identity

READY_TIMEOUT_S = 60.0
BUSY_PORT_TRIES = 20  # a restart on its old port waits up to 10 s for the port to be free


@dataclass
class WorkerProcess:
    """A ``fleetgui worker`` process and what it said when ready."""

    name: str
    home: Path
    args: list[str]
    prefix: list[str] = field(default_factory=list)  # e.g. taskset -c 1, ip netns exec NS
    process: subprocess.Popen[str] | None = None
    info: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # what it printed before it was ready

    @property
    def endpoint(self) -> WorkerEndpoint:
        return WorkerEndpoint(self.name, f"tcp://{self.address}", self.info["public_key"])

    @property
    def address(self) -> str:
        return f"{self.info['host']}:{self.info['port']}"

    def start(self) -> WorkerProcess:
        """Start it and wait until it is ready. A restart on its old ports retries while one is
        taken: a client's connection may hold it as its ephemeral port for a moment (the
        coordinator keeps reconnecting to a killed worker), and a CI run once lost that race."""
        listen = self.args[self.args.index("--listen") + 1] if "--listen" in self.args else ":0"
        fixed_port = not listen.endswith(":0")
        for _ in range(BUSY_PORT_TRIES if fixed_port else 1):
            log = self.home / "stderr.log"
            before = log.stat().st_size if log.exists() else 0
            try:
                return self._start_once()
            except RuntimeError:
                said = log.read_text()[before:] if log.exists() else ""
                if "Address already in use" not in said:
                    raise
            time.sleep(0.5)
        return self._start_once()

    def _start_once(self) -> WorkerProcess:
        env = {**os.environ, "FLEETGUI_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "fleetgui", *self.args],
            stdout=subprocess.PIPE,
            stderr=open(self.home / "stderr.log", "a"),  # noqa: SIM115
            text=True,
            env=env,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == "ready":
                    self.info = record
                    return self
        self.stop()
        log = (self.home / "stderr.log").read_text()
        raise RuntimeError(f"worker {self.name} did not become ready:\n{log[-3000:]}")

    def kill(self) -> None:
        """``kill -9``: no goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM and wait; returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def coordinator_identity(folder: Path) -> KeyPair:
    """A coordinator key pair in ``folder`` (like ``fleetgui keys --out``)."""
    pair = KeyPair.generate()
    if not (folder / "coordinator.key").exists():
        write_identity(folder, pair)
    from fleetgui.net.keys import load_identity

    return load_identity(folder)


def worker_process(
    root: Path,
    name: str,
    authorized_keys: Path,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    precision: str = "f32",
    extra: list[str] | None = None,
    prefix: list[str] | None = None,
) -> WorkerProcess:
    home = root / name
    home.mkdir(parents=True, exist_ok=True)
    args = [
        "worker",
        "--listen",
        f"{host}:{port}",
        "--name",
        name,
        "--cache",
        str(home / "cache"),
        "--authorized-keys",
        str(authorized_keys),
        "--key",
        str(home / "worker.key"),
        "--threads",
        "1",
        "--precision",
        precision,
        "--no-advertise",
        "--ready-json",
        *(extra or []),
    ]
    return WorkerProcess(name, home, args, prefix or [])


@contextmanager
def running_workers(
    root: Path, names: list[str], authorized_keys: Path, **options: Any
) -> Iterator[list[WorkerProcess]]:
    """Start a worker per name (``options`` as for :func:`worker_process`); stop them after."""
    workers = [worker_process(root, n, authorized_keys, **options) for n in names]
    try:
        for worker in workers:
            worker.start()
        yield workers
    finally:
        for worker in workers:
            worker.stop()


class StopStartThrottle:
    """Slows a process down from outside, as a CPU quota would (cgroup ``cpu.max`` needs root):
    a thread stops it (SIGSTOP) for ``stopped_ms`` out of every ``stopped_ms + running_ms``.
    Use as a context manager; the process is left running on exit."""

    def __init__(self, pid: int, *, stopped_ms: float = 3.0, running_ms: float = 1.0) -> None:
        import threading

        self.pid = pid
        self.stopped_s = stopped_ms / 1000
        self.running_s = running_ms / 1000
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle", daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(self.stopped_s)
            os.kill(self.pid, signal.SIGCONT)
            time.sleep(self.running_s)

    def __enter__(self) -> StopStartThrottle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)
        os.kill(self.pid, signal.SIGCONT)


@contextmanager
def mounted_tmpfs(folder: Path, size: str = "8m", *, inodes: int | None = None) -> Iterator[Path]:
    """A small tmpfs at ``folder``: a disk a test can fill, or make read-only with
    :func:`remount`; unmounted afterwards. Skips the test unless this is root on Linux (root's
    writes ignore file modes, so only a mount gives it a full or read-only disk)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("a full or read-only disk needs a tmpfs mount: run as root on Linux")
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {folder}: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        unmounted = subprocess.run(["umount", str(folder)], capture_output=True, check=False)
        if unmounted.returncode != 0:  # still busy: detach it now, it goes when released
            subprocess.run(["umount", "--lazy", str(folder)], check=False)


def remount(folder: Path, mode: str) -> None:
    """Remount the tmpfs at ``folder`` ``ro`` or ``rw``."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], check=True)


def app_controller_config(home: Path) -> Any:
    """The app's fleet controller for tests: quick probes, no zeroconf, its files in ``home``."""
    from fleetgui.app.fleet_controller import FleetControllerConfig

    return FleetControllerConfig(
        probe_interval_s=1.0,
        probe_timeout_s=3.0,
        zeroconf=False,
        workers_file=home / "workers.json",
        known_workers_file=home / "known_workers.json",
        timings_file=home / "probe_timings.json",
    )
