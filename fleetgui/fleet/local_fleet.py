"""A fleet of worker processes on this PC, on loopback: the demo's fleet, and a way to try
fleetgui before there are other PCs.

Each worker is a real ``fleetgui worker`` process with its own key, cache and free ports; a
coordinator identity made for the local fleet is written to their authorized_keys (paired
automatically). Workers stop with the process that started them (``--exit-with``), also when
it is killed, and :meth:`LocalFleet.stop` ends them at once.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetgui.addresses import format_address, zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.fleet.session_config import WorkerEndpoint
from fleetgui.net.keys import KeyFileError, KeyPair, load_identity, write_identity

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0


@dataclass
class LocalWorker:
    """One worker process of a local fleet."""

    name: str
    process: subprocess.Popen[str]
    info: dict[str, Any]

    @property
    def endpoint(self) -> WorkerEndpoint:
        return WorkerEndpoint(
            self.name, zmq_endpoint(self.info["host"], self.info["port"]), self.info["public_key"]
        )

    @property
    def address(self) -> str:
        return format_address(self.info["host"], self.info["port"])


@dataclass
class LocalFleet:
    """Worker processes on loopback under ``root`` (see module doc)."""

    root: Path
    threads: int = 1  # OpenVINO threads per worker: the workers share this PC's cores
    precision: str = "auto"
    workers: list[LocalWorker] = field(default_factory=list)
    # per worker name: what its command starts with (a benchmark runs each worker in its own
    # network namespace, on its own core: ip netns exec NS taskset -c 1) and the address it
    # listens on (default loopback)
    prefixes: dict[str, list[str]] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)

    def identity(self) -> KeyPair:
        """The local fleet's coordinator key pair (made on first use)."""
        folder = self.root / "coordinator"
        try:
            return load_identity(folder)
        except KeyFileError:
            write_identity(folder, KeyPair.generate(), force=True)
            return load_identity(folder)

    def start(self, names: list[str]) -> list[LocalWorker]:
        """Start one worker process per name and wait until all are ready."""
        identity = self.identity()
        keys = self.root / "authorized_keys"
        keys.parent.mkdir(parents=True, exist_ok=True)
        keys.write_text(f"{identity.public} local-fleet\n", encoding="utf-8")
        try:
            for name in names:
                self.workers.append(self._start_one(name, keys))
        except BaseException:
            self.stop()
            raise
        return self.workers

    def _start_one(self, name: str, keys: Path) -> LocalWorker:
        home = self.root / name
        home.mkdir(parents=True, exist_ok=True)
        command = [
            *self.prefixes.get(name, []),
            sys.executable,
            "-m",
            "fleetgui",
            "worker",
            "--listen",
            format_address(self.hosts.get(name, "127.0.0.1"), 0),
            "--name",
            name,
            "--cache",
            str(home / "cache"),
            "--key",
            str(home / "worker.key"),
            "--authorized-keys",
            str(keys),
            "--threads",
            str(self.threads),
            "--precision",
            self.precision,
            "--no-advertise",
            "--ready-json",
            "--exit-with",
            str(os.getpid()),
        ]
        log_file = open(home / "worker.log", "a", encoding="utf-8")  # noqa: SIM115
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "FLEETGUI_HOME": str(home / "home")}
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log_file, text=True, env=env
        )
        log_file.close()
        info = self._wait_ready(name, process, home / "worker.log")
        log.info("local worker %s ready on %s", name, info["port"])
        return LocalWorker(name, process, info)

    @staticmethod
    def _wait_ready(name: str, process: subprocess.Popen[str], log_path: Path) -> dict[str, Any]:
        assert process.stdout is not None
        lines: list[str] = []

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if '"event": "ready"' in line:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(READY_TIMEOUT_S)
        for line in lines:
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == "ready":
                    return dict(record)
        process.kill()
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise FleetguiError(f"local worker {name} did not start; its log ends:\n{tail}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """End every worker (SIGTERM, then SIGKILL after ``timeout_s``)."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.terminate()
        deadline = time.monotonic() + timeout_s
        for worker in self.workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(5)
        self.workers.clear()

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
