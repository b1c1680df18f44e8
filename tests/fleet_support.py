"""Real worker processes on loopback for fleet tests, started as fleetgui starts them
(:mod:`fleetgui.fleet.local_fleet.worker_process`), with the tests' defaults (f32, exact against a
local reference); and what only tests need: quick links, a HELLO, a throttle, a small disk, the
app's controller config. The fixtures that start them are in ``tests/conftest.py``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fleetgui.fleet.local_fleet.fleet import local_identity
from fleetgui.fleet.local_fleet.worker_process import LocalWorker, WorkerOptions, local_worker
from fleetgui.fleet.ring.link import LinkConfig
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import Message, Op
from fleetgui.net.secure_socket import SecureClient

WorkerProcess = LocalWorker  # the tests' name for a worker process
coordinator_identity = local_identity  # a coordinator key pair in a folder, made on first use

#: Heartbeats every 0.25 s, a worker lost after 1.5 s of silence: failovers within seconds.
FAST_LINKS = LinkConfig(heartbeat_interval_s=0.25, lost_after_s=1.5)


def fast_coordinator() -> CoordinatorConfig:
    """The coordinator as the fleet tests run it: :data:`FAST_LINKS`, its own stages in f32
    (exact against a local reference), a lost worker asked to rejoin every 0.5 s."""
    from runtime_support import EXACT

    return CoordinatorConfig(link=FAST_LINKS, local=EXACT, rejoin_interval_s=0.5)


async def fleet_session(
    identity: KeyPair, workers: list[LocalWorker], export_dir: Path, **deploy: object
) -> FleetSession:
    """A :func:`fast_coordinator` session connected to ``workers``, ``export_dir`` deployed."""
    session = FleetSession(identity, fast_coordinator())
    await session.connect([w.endpoint for w in workers])
    await session.deploy(export_dir, **deploy)  # type: ignore[arg-type]
    return session


def greedy_in(mode: str, max_new_tokens: int) -> GenerationConfig:
    """Greedy decoding in ``mode``: plain for ``"pp"``, else speculative with K 3."""
    speculative = mode != "pp"
    return GenerationConfig(max_new_tokens=max_new_tokens, k=3 if speculative else "off")


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
) -> LocalWorker:
    """A worker in ``root / name``, not started yet; f32 unless told, so its answers match a
    local reference token for token."""
    options = WorkerOptions(
        host=host,
        port=port,
        precision=precision,
        prefix=tuple(prefix or ()),
        extra=tuple(extra or ()),
    )
    return local_worker(root, name, authorized_keys, options)


def start_all(workers: list[LocalWorker]) -> None:
    """Start the workers side by side (each mostly waits for its interpreter to load)."""
    if workers:
        with ThreadPoolExecutor(len(workers)) as pool:
            list(pool.map(lambda worker: worker.start(), workers))


@contextmanager
def running_workers(
    root: Path, names: list[str], authorized_keys: Path, **options: Any
) -> Iterator[list[LocalWorker]]:
    """Start a worker per name side by side (``options`` as for :func:`worker_process`); stop
    them after."""
    workers = [worker_process(root, n, authorized_keys, **options) for n in names]
    try:
        start_all(workers)
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def hello(process: LocalWorker, identity: KeyPair) -> Message:
    """A HELLO to ``process`` as the coordinator ``identity``: its reply."""

    async def main() -> Message:
        client = SecureClient(identity, process.info["public_key"], name=process.name)
        try:
            await client.connect(process.endpoint.endpoint, timeout_s=10)
            return await client.request(Message(Op.HELLO), timeout_s=10)
        finally:
            client.close()

    return asyncio.run(main())


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
    from fleetgui.app.fleet.controller import FleetControllerConfig

    return FleetControllerConfig(
        probe_interval_s=1.0,
        probe_timeout_s=3.0,
        zeroconf=False,
        workers_file=home / "workers.json",
        known_workers_file=home / "known_workers.json",
        timings_file=home / "probe_timings.json",
    )


def default_sigint() -> None:
    """Give this process Python's own Ctrl+C handler again if an earlier test left SIGINT
    ignored: an ignored SIGINT is inherited across exec, and a child Python then installs no
    handler, so a Ctrl+C test's child would ignore the signal. Warns, to find that test."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        warnings.warn("SIGINT was ignored in the test process; restored", stacklevel=2)
        signal.signal(signal.SIGINT, signal.default_int_handler)
