"""The coordinator's pinned worker keys (``fleetgui.fleet.pairing.known_workers``): trusted on
first use, a changed key refused naming the file, kept as JSON, and found under the address
forms they were filed by (IPv6 bracketed or not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetgui.fleet.pairing.known_workers import KnownWorkers, WorkerKeyChangedError
from fleetgui.net.keys import KeyFileError, KeyPair


def test_known_workers_trust_on_first_use(fleetgui_home: Path) -> None:
    known = KnownWorkers()
    key, other = KeyPair.generate().public, KeyPair.generate().public
    assert known.check("10.0.0.2:5555", "pc-2", key)
    assert not known.check("10.0.0.2:5555", "pc-2", key)
    assert known.check("10.0.0.3:5555", "pc-2", other)  # another address is another entry
    with pytest.raises(WorkerKeyChangedError) as info:
        KnownWorkers().check("10.0.0.2:5555", "pc-2", other)
    assert "'pc-2@10.0.0.2:5555'" in str(info.value)
    assert str(fleetgui_home / "config" / "known_workers.json") in str(info.value)
    assert known.forget("10.0.0.2:5555", "pc-2")
    assert known.check("10.0.0.2:5555", "pc-2", other)
    (fleetgui_home / "config" / "known_workers.json").write_text("{broken")
    with pytest.raises(KeyFileError, match="delete it"):
        known.pinned("10.0.0.2:5555", "pc-2")


def test_known_workers_file_is_json(fleetgui_home: Path) -> None:
    KnownWorkers().check("h:1", "n", KeyPair.generate().public)
    data = json.loads((fleetgui_home / "config" / "known_workers.json").read_text())
    assert data["version"] == 1 and "n@h:1" in data["workers"]


def _pinned_file(path: Path, entries: dict[str, str]) -> None:
    """A known_workers.json as an older fleetgui wrote it: ``name@address`` -> entry."""
    workers = {
        entry_id: {"public_key": key, "name": entry_id.split("@")[0], "address": "x"}
        for entry_id, key in entries.items()
    }
    path.write_text(json.dumps({"version": 1, "workers": workers}), encoding="utf-8")


def test_keys_pinned_under_unbracketed_ipv6_are_still_found(tmp_path: Path) -> None:
    """Before addresses were bracketed, an IPv6 worker was pinned as ``name@fe80::2:5555``."""
    path = tmp_path / "known_workers.json"
    key, other = KeyPair.generate().public, KeyPair.generate().public
    _pinned_file(path, {"pc@fe80::2:5555": key})
    known = KnownWorkers(path)
    assert known.pinned("[fe80::2]:5555", "pc") == key
    assert known.check("[fe80::2]:5555", "pc", key) is False  # accepted, not pinned again
    with pytest.raises(WorkerKeyChangedError, match="'pc@fe80::2:5555'"):
        known.check("[fe80::2]:5555", "pc", other)  # the entry to remove is named as it is
    assert known.forget("[fe80::2]:5555", "pc") is True
    assert known.pinned("[fe80::2]:5555", "pc") is None
    assert json.loads(path.read_text(encoding="utf-8"))["workers"] == {}


def test_new_pins_use_the_bracketed_form_and_ipv4_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "known_workers.json"
    key = KeyPair.generate().public
    known = KnownWorkers(path)
    assert known.check("[fe80::2]:5555", "pc", key) is True
    assert known.check("10.0.0.2:5555", "pc", key) is True
    workers = json.loads(path.read_text(encoding="utf-8"))["workers"]
    assert set(workers) == {"pc@[fe80::2]:5555", "pc@10.0.0.2:5555"}
    assert known.check("[fe80::2]:5555", "pc", key) is False
