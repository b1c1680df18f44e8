"""A fleet of worker processes on this PC, on loopback: the demo's fleet, the benchmarks' fleet,
and a way to try fleetgui before there are other PCs.

Each worker is a real ``fleetgui worker`` process
(:class:`~fleetgui.fleet.local_fleet.worker_process.LocalWorker`) with its own key, cache and
free ports; a coordinator identity made for the local fleet is written to their authorized_keys
(paired automatically). Workers stop with the process
that started them (``--exit-with``), also when it is killed, and :meth:`LocalFleet.stop` ends
them at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from fleetgui.fleet.local_fleet.worker_process import LocalWorker, WorkerOptions, local_worker
from fleetgui.net.keys import KeyFileError, KeyPair, load_identity, write_identity

__all__ = ["LocalFleet", "LocalWorker", "WorkerOptions", "local_identity"]


def local_identity(folder: Path) -> KeyPair:
    """The coordinator key pair in ``folder`` (as ``fleetgui keys --out`` writes it), made on
    first use: a local fleet's workers trust it, and a benchmark that keeps it between runs
    keeps one identity."""
    try:
        return load_identity(folder)
    except KeyFileError:
        write_identity(folder, KeyPair.generate(), force=True)
        return load_identity(folder)


@dataclass
class LocalFleet:
    """Worker processes on loopback under ``root`` (see module doc)."""

    root: Path
    threads: int = 1  # OpenVINO threads per worker: the workers share this PC's cores
    precision: str = "auto"
    workers: list[LocalWorker] = field(default_factory=list)
    # per worker name: what its command starts with (a benchmark runs each worker in its own
    # network namespace: ip netns exec NS), the CPU cores it is pinned to (taskset, after the
    # prefix: one core standing in for one fleet PC) and the address it listens on (default
    # loopback)
    prefixes: dict[str, list[str]] = field(default_factory=dict)
    cores: dict[str, tuple[int, ...]] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)

    def identity(self) -> KeyPair:
        """The local fleet's coordinator key pair (made on first use)."""
        return local_identity(self.root / "coordinator")

    def options(self, name: str) -> WorkerOptions:
        """How worker ``name`` is started."""
        return WorkerOptions(
            host=self.hosts.get(name, "127.0.0.1"),
            threads=self.threads,
            precision=self.precision,
            cores=tuple(self.cores.get(name, ())),
            prefix=tuple(self.prefixes.get(name, ())),
        )

    def start(self, names: list[str]) -> list[LocalWorker]:
        """Start one worker process per name and wait until all are ready."""
        identity = self.identity()
        keys = self.root / "authorized_keys"
        keys.parent.mkdir(parents=True, exist_ok=True)
        keys.write_text(f"{identity.public} local-fleet\n", encoding="utf-8")
        try:
            for name in names:
                worker = local_worker(self.root, name, keys, self.options(name))
                self.workers.append(worker)
                worker.start()
        except BaseException:
            self.stop()
            raise
        return self.workers

    def worker(self, name: str) -> LocalWorker:
        """The worker called ``name`` (to kill or restart it: :class:`LocalWorker`)."""
        for worker in self.workers:
            if worker.name == name:
                return worker
        raise KeyError(f"no local worker {name!r}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """End every worker, restarted ones too (SIGTERM to all, then SIGKILL to those still
        running after ``timeout_s``)."""
        for worker in self.workers:
            worker.terminate()
        deadline = time.monotonic() + timeout_s
        for worker in self.workers:
            worker.stop(max(0.1, deadline - time.monotonic()))
        self.workers.clear()

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
