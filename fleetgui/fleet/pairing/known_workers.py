"""The coordinator's pinned worker keys: trust on first use, as ssh's known_hosts.

A coordinator pins each worker's key by ``name@address`` in ``known_workers.json`` the first time
it meets the worker; a worker that later offers another key raises
:class:`WorkerKeyChangedError` with what to do.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetgui import paths
from fleetgui.addresses import parse_address
from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text
from fleetgui.net.keys import KNOWN_WORKERS, KeyFileError, fingerprint

logger = logging.getLogger(__name__)


class WorkerKeyChangedError(FleetguiError):
    """A worker presented a key other than the one pinned for it."""


def _entry_ids(address: str, name: str) -> list[str]:
    """The ids the worker's entry may be filed under: ``name@address``, and for an IPv6 worker
    also the unbracketed ``name@fe80::1:5555`` that addresses were written as before they were
    bracketed, so that keys pinned then are still found (and still guard against a new key)."""
    ids = [f"{name}@{address}"]
    if address.startswith("["):
        try:
            host, port = parse_address(address)
        except FleetguiError:
            return ids
        ids.append(f"{name}@{host}:{port}")
    return ids


def _find(workers: dict[str, Any], address: str, name: str) -> tuple[str, str | None]:
    """The id the worker's entry is filed under (the current form when there is none) and its
    pinned key."""
    for entry_id in _entry_ids(address, name):
        entry = workers.get(entry_id)
        if isinstance(entry, dict):
            return entry_id, entry.get("public_key")
    return f"{name}@{address}", None


class KnownWorkers:
    """Worker keys pinned by ``name@address`` in a JSON file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.config_dir() / KNOWN_WORKERS

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise KeyFileError(
                f"cannot read {self.path} ({exc}): fix it or delete it (worker "
                "keys are then pinned again on next contact)"
            ) from exc
        workers = data.get("workers") if isinstance(data, dict) else None
        if not isinstance(workers, dict):
            raise KeyFileError(f"{self.path} is not a known-workers file: delete it")
        return workers

    def pinned(self, address: str, name: str) -> str | None:
        """The key pinned for the worker, if any."""
        return _find(self._load(), address, name)[1]

    def check(self, address: str, name: str, public_key: str) -> bool:
        """Pin ``public_key`` on first contact (True), accept it if it is the pinned key
        (False), else raise :class:`WorkerKeyChangedError`."""
        workers = self._load()
        entry_id, pinned = _find(workers, address, name)
        if pinned == public_key:
            return False
        if pinned is not None:
            raise WorkerKeyChangedError(
                f"the key of worker {name!r} at {address} has CHANGED: pinned "
                f"{fingerprint(pinned)}, offered {fingerprint(public_key)}. Someone may be "
                f"impersonating the worker, or it was reinstalled. If the change is expected, "
                f"remove the entry {entry_id!r} from {self.path} and connect again."
            )
        now = datetime.now(UTC).isoformat(timespec="seconds")
        workers[entry_id] = {
            "public_key": public_key,
            "name": name,
            "address": address,
            "pinned_at": now,
        }
        atomic_write_text(self.path, json.dumps({"version": 1, "workers": workers}, indent=2))
        logger.info("pinned the key of worker %s: %s", entry_id, fingerprint(public_key))
        return True

    def forget(self, address: str, name: str) -> bool:
        """Remove the worker's pinned key; False if none was pinned."""
        workers = self._load()
        removed = [workers.pop(i, None) for i in _entry_ids(address, name)]
        if all(entry is None for entry in removed):
            return False
        atomic_write_text(self.path, json.dumps({"version": 1, "workers": workers}, indent=2))
        return True
