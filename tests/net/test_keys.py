"""Fleet keys (``fleetgui.net.keys``): key pairs, identity folders that are never silently
overwritten nor readable by others, the worker's key made on first use, the coordinator's secret
in the OS keyring or, failing that, in a private file. (Who is trusted: ``test_trust.py``; the
sockets: ``test_secure_socket.py``; the ``keys`` command: ``tests/commands/test_keys.py``.)"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleetgui.net.keys import (
    KEYRING_SERVICE,
    KEYRING_USER,
    KeyFileError,
    KeyPair,
    coordinator_identity,
    is_key,
    load_identity,
    worker_identity,
    write_identity,
)

POSIX = os.name == "posix"


pytestmark = pytest.mark.usefixtures("fleetgui_home")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------------------------------
# Identities


def test_key_pair_and_key_check() -> None:
    pair = KeyPair.generate()
    assert KeyPair.from_secret(pair.secret) == pair
    assert is_key(pair.public) and is_key(pair.secret)
    assert pair.secret not in repr(pair)
    for bad in ("", "~" * 40, "#" * 40, pair.public[:-1], pair.public + "A", "é" * 40):
        assert not is_key(bad)


def test_identity_dir_round_trip_and_no_silent_overwrite(tmp_path: Path) -> None:
    pair = KeyPair.generate()
    secret_path, public_path = write_identity(tmp_path / "id", pair)
    assert load_identity(tmp_path / "id") == pair
    assert public_path.read_text().split()[0] == pair.public
    if POSIX:
        assert mode(secret_path) == 0o600
    with pytest.raises(KeyFileError, match="--force"):
        write_identity(tmp_path / "id", KeyPair.generate())
    other = KeyPair.generate()
    write_identity(tmp_path / "id", other, force=True)
    assert load_identity(tmp_path / "id") == other


def test_missing_identity_says_how_to_create_it(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="fleetgui keys --out"):
        load_identity(tmp_path / "nothing")


@pytest.mark.skipif(not POSIX, reason="POSIX permissions")
def test_secret_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    write_identity(tmp_path, KeyPair.generate())
    (tmp_path / "coordinator.key").chmod(0o644)
    with pytest.raises(KeyFileError, match=r"other users \(mode 644\).*chmod 600"):
        load_identity(tmp_path)


def test_worker_identity_is_created_private_and_kept(fleetgui_home: Path) -> None:
    first = worker_identity()
    assert worker_identity() == first
    if POSIX:
        assert mode(fleetgui_home / "config" / "worker.key") == 0o600


def test_coordinator_secret_in_keyring(os_keyring: Any, fleetgui_home: Path) -> None:
    fake = os_keyring
    pair = coordinator_identity()
    assert fake.store[(KEYRING_SERVICE, KEYRING_USER)] == pair.secret
    assert not (fleetgui_home / "config" / "coordinator.key").exists()
    assert (fleetgui_home / "config" / "coordinator.pub").read_text().split()[0] == pair.public
    assert coordinator_identity() == pair


def test_coordinator_secret_falls_back_to_private_file(
    use_keyring: Callable[[Any], Any], fleetgui_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from keyring.backends import fail

    use_keyring(fail.Keyring())
    with caplog.at_level(logging.WARNING, logger="fleetgui.net.keys"):
        pair = coordinator_identity()
    assert "no usable OS keyring" in caplog.text
    if POSIX:
        assert mode(fleetgui_home / "config" / "coordinator.key") == 0o600
    assert coordinator_identity() == pair
    assert (fleetgui_home / "config" / "coordinator.pub").read_text().split()[0] == pair.public


def test_coordinator_secret_without_keyring_package(
    monkeypatch: pytest.MonkeyPatch, fleetgui_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)  # a worker-only install has no keyring
    with caplog.at_level(logging.WARNING, logger="fleetgui.net.keys"):
        pair = coordinator_identity()
    assert "keyring package is not installed" in caplog.text
    assert (fleetgui_home / "config" / "coordinator.key").exists()
    assert coordinator_identity() == pair


# --------------------------------------------------------------------------------------------
# authorized_keys


# --------------------------------------------------------------------------------------------
# Pairing codes and the Authorizer


# --------------------------------------------------------------------------------------------
# Known workers


# --------------------------------------------------------------------------------------------
# Secure sockets on loopback
