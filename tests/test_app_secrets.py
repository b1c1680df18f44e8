"""Secrets in the OS keyring: the app's ``Secrets`` and the coordinator's secret key
(``net.keys.coordinator_identity``), with the private-file fallback when the keyring refuses.

This machine has no Secret Service, so the OS keyring is played by ``OsKeyringStandIn``: an
in-memory ``keyring`` backend installed with ``keyring.set_keyring`` (the code under test goes
through the real ``keyring`` API to it). It is not keyrings.alt: installed, that package becomes
every program's default keyring, a plain-text file outside the test's folders."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("keyring")

import keyring
from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked, PasswordDeleteError, PasswordSetError

from fleetgui.app.settings import KEYRING_SERVICE, SecretError, Secrets, Settings
from fleetgui.net.keys import (
    COORDINATOR_KEY,
    COORDINATOR_PUB,
    KEYRING_USER,
    KeyPair,
    coordinator_identity,
)

POSIX = os.name == "posix"


class OsKeyringStandIn(KeyringBackend):
    """Stands in for the OS keyring: keeps passwords in memory, and like a real backend raises
    ``PasswordDeleteError`` for a missing entry. ``refuse_set``: every store fails the way a
    locked or unreachable Secret Service does."""

    priority = 1  # type: ignore[assignment]

    def __init__(self, refuse_set: bool = False) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}
        self.refuse_set = refuse_set

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        if self.refuse_set:
            raise PasswordSetError("Failed to unlock the collection!")
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.store.pop((service, username), None) is None:
            raise PasswordDeleteError("Password not found")


class LockedKeyring(OsKeyringStandIn):
    """A keyring that answers nothing: every call fails as a locked keyring does."""

    def get_password(self, service: str, username: str) -> str | None:
        raise KeyringLocked("the keyring is locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise KeyringLocked("the keyring is locked")

    def delete_password(self, service: str, username: str) -> None:
        raise KeyringLocked("the keyring is locked")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The app's folders under ``tmp_path``; returns its config folder."""
    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "config"


@pytest.fixture
def use_keyring() -> Iterator[Callable[[KeyringBackend], KeyringBackend]]:
    """``use_keyring(backend)`` makes ``backend`` the keyring; the previous one is restored."""
    previous = keyring.get_keyring()

    def install(backend: KeyringBackend) -> KeyringBackend:
        keyring.set_keyring(backend)
        return backend

    yield install
    keyring.set_keyring(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_holding(folder: Path, text: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


# --------------------------------------------------------------------------------------------
# The app's Secrets


def test_secrets_round_trip_through_the_keyring(home: Path, use_keyring: Callable) -> None:
    backend = use_keyring(OsKeyringStandIn())
    secrets = Secrets()
    Settings().update(k=3)  # the settings file exists, and must not get the secret
    assert secrets.get("pairing-token") is None
    secrets.set("pairing-token", "tok-3141")
    assert secrets.get("pairing-token") == "tok-3141"
    assert backend.store == {(KEYRING_SERVICE, "pairing-token"): "tok-3141"}
    assert files_holding(home.parent, "tok-3141") == []
    secrets.set("pairing-token", "tok-2718")  # replaced, not added
    assert secrets.get("pairing-token") == "tok-2718" and len(backend.store) == 1
    secrets.delete("pairing-token")
    assert secrets.get("pairing-token") is None and backend.store == {}
    secrets.delete("pairing-token")  # already gone: not an error


def test_a_keyring_that_refuses_a_secret_says_what_to_do(home: Path, use_keyring: Callable) -> None:
    use_keyring(OsKeyringStandIn(refuse_set=True))
    with pytest.raises(SecretError) as refused:
        Secrets().set("pairing-token", "tok-3141")
    message = str(refused.value)
    assert "'pairing-token'" in message and "Failed to unlock the collection!" in message
    assert "unlock the keyring" in message and "Secret Service" in message
    assert "tok-3141" not in message
    assert files_holding(home.parent, "tok-3141") == []  # no silent fallback to a file


def test_a_locked_keyring_reads_as_no_secret_and_is_logged(
    home: Path, use_keyring: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    use_keyring(LockedKeyring())
    secrets = Secrets()
    with caplog.at_level(logging.WARNING, logger="fleetgui.app.settings"):
        assert secrets.get("pairing-token") is None
        secrets.delete("pairing-token")
    assert "secret pairing-token not read" in caplog.text
    assert "secret pairing-token not deleted" in caplog.text


# --------------------------------------------------------------------------------------------
# The coordinator's secret key


def test_coordinator_key_is_kept_in_the_keyring_not_in_a_file(
    home: Path, use_keyring: Callable
) -> None:
    backend = use_keyring(OsKeyringStandIn())
    pair = coordinator_identity()
    assert backend.store == {(KEYRING_SERVICE, KEYRING_USER): pair.secret}
    assert KeyPair.from_secret(pair.secret) == pair
    assert Secrets().get(KEYRING_USER) == pair.secret  # the app's Secrets sees the same entry
    assert not (home / COORDINATOR_KEY).exists()
    assert files_holding(home.parent, pair.secret) == []
    assert (home / COORDINATOR_PUB).read_text().split()[0] == pair.public
    assert coordinator_identity() == pair  # the same key on every start
    assert len(backend.store) == 1


def test_coordinator_key_falls_back_to_a_private_file_when_the_keyring_refuses(
    home: Path, use_keyring: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    backend = use_keyring(OsKeyringStandIn(refuse_set=True))
    with caplog.at_level(logging.WARNING, logger="fleetgui.net.keys"):
        pair = coordinator_identity()
    assert "cannot store the key in the keyring" in caplog.text
    assert str(home / COORDINATOR_KEY) in caplog.text
    assert backend.store == {}
    secret_file = home / COORDINATOR_KEY
    assert pair.secret in secret_file.read_text()
    if POSIX:
        assert mode(secret_file) == 0o600
    assert coordinator_identity() == pair
    # the keyring works again later: the key is still the one in the file (workers trust it)
    use_keyring(OsKeyringStandIn())
    assert coordinator_identity() == pair
