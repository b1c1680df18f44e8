"""One ``fleetgui worker`` process on this PC: the one way fleetgui, its benchmarks and its tests
start a worker process.

A worker lives in a folder of its own (``home``: its key, cache, log and ``FLEETGUI_HOME``),
listens on loopback unless told otherwise and says when it is ready with one JSON line
(``--ready-json``) that gives its port and key. It can be pinned to CPU cores (``taskset``, one
core standing in for one fleet PC), killed with no goodbye (``kill -9``, as a PC that loses
power) and restarted where it was: the same name, key, cache and port, so a coordinator that
keeps reconnecting finds it again and its deployment is still cached.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetgui.addresses import format_address, zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.fleet.ring.link import WorkerEndpoint

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0  # a loaded machine's first OpenVINO import can take a minute
BUSY_PORT_TRIES = 20  # a restart on its old port waits up to 10 s for the port to be free
LOG_NAME = "worker.log"  # its stderr, in its home


@dataclass(frozen=True)
class WorkerOptions:
    """How to start a local worker process."""

    host: str = "127.0.0.1"  # the address it listens on
    port: int = 0  # 0: a free port (a restart keeps the one it got)
    threads: int = 1  # OpenVINO threads: local workers share this PC's cores
    precision: str = "auto"  # its stages' inference precision (f32 for exact tests)
    cores: tuple[int, ...] = ()  # pin it to these CPU cores (taskset); () leaves it unpinned
    prefix: tuple[str, ...] = ()  # what its command starts with, before taskset (ip netns exec)
    extra: tuple[str, ...] = ()  # more ``fleetgui worker`` arguments (e.g. --pair)
    exit_with_starter: bool = True  # it stops when this process exits, also when killed

    def launcher(self) -> list[str]:
        """What the worker's command starts with: ``prefix``, then ``taskset`` for ``cores``."""
        return [*self.prefix, *pinned(self.cores)]


def pinned(cores: Iterable[int]) -> list[str]:
    """A command prefix that runs a process on ``cores`` only (``taskset -c 1,2``); nothing for
    no cores. A benchmark pins each worker to a core of its own so that one core and one
    OpenVINO thread stand in for one PC of a fleet."""
    chosen = sorted(set(cores))
    return ["taskset", "-c", ",".join(map(str, chosen))] if chosen else []


def local_worker(
    root: Path, name: str, authorized_keys: Path, options: WorkerOptions | None = None
) -> LocalWorker:
    """A worker named ``name`` in ``root / name`` that trusts the coordinator keys in
    ``authorized_keys``, not started yet (see :meth:`LocalWorker.start`)."""
    options = options or WorkerOptions()
    home = root / name
    home.mkdir(parents=True, exist_ok=True)
    args = [
        "worker",
        "--listen",
        format_address(options.host, options.port),
        "--name",
        name,
        "--cache",
        str(home / "cache"),
        "--authorized-keys",
        str(authorized_keys),
        "--key",
        str(home / "worker.key"),
        "--threads",
        str(options.threads),
        "--precision",
        options.precision,
        "--no-advertise",
        "--ready-json",
        *(["--exit-with", str(os.getpid())] if options.exit_with_starter else []),
        *options.extra,
    ]
    return LocalWorker(name, home, args, options.launcher())


@dataclass
class LocalWorker:
    """A ``fleetgui worker`` process on this PC and what it said when ready (see module doc)."""

    name: str
    home: Path  # its key, cache, log and FLEETGUI_HOME
    args: list[str]  # its arguments after ``python -m fleetgui``
    prefix: list[str] = field(default_factory=list)  # e.g. ip netns exec NS taskset -c 1
    process: subprocess.Popen[str] | None = None
    info: dict[str, Any] = field(default_factory=dict)  # its ready line: host, port, key...
    lines: list[str] = field(default_factory=list)  # what it printed until it was ready

    @property
    def endpoint(self) -> WorkerEndpoint:
        return WorkerEndpoint(
            self.name, zmq_endpoint(self.info["host"], self.info["port"]), self.info["public_key"]
        )

    @property
    def address(self) -> str:
        return format_address(self.info["host"], self.info["port"])

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> LocalWorker:
        """Start it and wait until it is ready. A restart on its old port retries while the
        port is taken: a client's connection may hold it as its ephemeral port for a moment
        (the coordinator keeps reconnecting to a killed worker), and a CI run once lost that
        race."""
        fixed_port = not self.args[self.args.index("--listen") + 1].endswith(":0")
        log_path = self.home / LOG_NAME
        for _ in range(BUSY_PORT_TRIES if fixed_port else 1):
            before = log_path.stat().st_size if log_path.exists() else 0
            try:
                return self._start_once()
            except FleetguiError:
                said = log_path.read_text(errors="replace")[before:] if log_path.exists() else ""
                if "Address already in use" not in said:
                    raise
            time.sleep(0.5)
        return self._start_once()

    def _start_once(self) -> LocalWorker:
        env = {**os.environ, "FLEETGUI_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        with open(self.home / LOG_NAME, "a", encoding="utf-8") as stderr:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "fleetgui", *self.args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
        self.info = self._wait_ready(self.process)
        if not self.info:
            self.stop()
            tail = (self.home / LOG_NAME).read_text(errors="replace")[-3000:]
            raise FleetguiError(f"local worker {self.name} did not start; its log ends:\n{tail}")
        log.info("local worker %s ready on %s", self.name, self.address)
        return self

    def _wait_ready(self, process: subprocess.Popen[str]) -> dict[str, Any]:
        """Its ready record, or {} when it exits or is silent for ``READY_TIMEOUT_S``; what it
        printed before goes to ``lines``. A thread reads, so a hung worker cannot hang us."""
        found: dict[str, Any] = {}

        def read() -> None:
            if process.stdout is None:
                return
            for line in process.stdout:
                self.lines.append(line)
                if line.startswith("{"):
                    record = json.loads(line)
                    if record.get("event") == "ready":
                        found.update(record)
                        return

        reader = threading.Thread(target=read, name=f"ready-{self.name}", daemon=True)
        reader.start()
        reader.join(READY_TIMEOUT_S)
        return found

    def kill(self) -> None:
        """``kill -9``: no goodbye, as a PC that loses power."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def restart(self) -> LocalWorker:
        """Start it again where it was: the same name, key, cache and port (killed first if it
        still runs), so a coordinator finds it at its old address and its deployment cached."""
        self.kill()
        if self.info:
            self.args[self.args.index("--listen") + 1] = self.address
        self.process, self.lines = None, []
        return self.start()

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM) without waiting: :meth:`stop` waits."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns its exit code (None: never
        started)."""
        if self.process is None:
            return None
        self.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        return self.process.returncode
