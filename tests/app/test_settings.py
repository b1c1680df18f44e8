"""The app's settings (``fleetgui.app.settings``): where they live and that they survive a
restart; and its secrets in the OS keyring: the app's ``Secrets`` and the coordinator's secret
key (``net.keys.coordinator_identity``), with the private-file fallback when the keyring refuses.

This machine has no Secret Service, so the OS keyring is played by ``OsKeyringStandIn``: an
in-memory ``keyring`` backend installed with ``keyring.set_keyring`` (the code under test goes
through the real ``keyring`` API to it). It is not keyrings.alt: installed, that package becomes
every program's default keyring, a plain-text file outside the test's folders."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("keyring")

from keyring.errors import KeyringLocked, PasswordDeleteError, PasswordSetError
from keyring_support import InMemoryKeyring

from fleetgui.app.settings import KEYRING_SERVICE, SecretError, Secrets, Settings
from fleetgui.modes import Mode
from fleetgui.net.keys import (
    COORDINATOR_KEY,
    COORDINATOR_PUB,
    KEYRING_USER,
    KeyPair,
    coordinator_identity,
)

POSIX = os.name == "posix"


class OsKeyringStandIn(InMemoryKeyring):
    """Stands in for the OS keyring: keeps passwords in memory, and like a real backend raises
    ``PasswordDeleteError`` for a missing entry. ``refuse_set``: every store fails the way a
    locked or unreachable Secret Service does."""

    def __init__(self, refuse_set: bool = False) -> None:
        super().__init__()
        self.refuse_set = refuse_set

    def set_password(self, service: str, username: str, password: str) -> None:
        if self.refuse_set:
            raise PasswordSetError("Failed to unlock the collection!")
        super().set_password(service, username, password)

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


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_holding(folder: Path, text: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


# --------------------------------------------------------------------------------------------
# The settings file


def test_settings_live_in_the_platform_config_folder_and_survive_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetgui.paths import config_dir

    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path))
    settings = Settings()
    assert settings.path == config_dir() / "settings.json"
    assert settings.path.is_relative_to(tmp_path)
    settings.set_mode(replace(settings.values.mode_settings(), mode=Mode.PP_SD, k=5))
    restarted = Settings()
    assert restarted.values.mode_settings().mode is Mode.PP_SD
    assert restarted.values.k == 5
    settings.path.write_text("{not json")
    assert Settings().values == type(settings.values)()  # a damaged file: defaults, no crash
    monkeypatch.delenv("FLEETGUI_HOME")
    import platformdirs

    assert config_dir() == Path(platformdirs.user_config_dir("fleetgui", False))


# --------------------------------------------------------------------------------------------
# The app's Secrets


def test_secrets_round_trip_through_the_keyring(fleetgui_home: Path, use_keyring: Callable) -> None:
    backend = use_keyring(OsKeyringStandIn())
    secrets = Secrets()
    Settings().update(k=3)  # the settings file exists, and must not get the secret
    assert secrets.get("pairing-token") is None
    secrets.set("pairing-token", "tok-3141")
    assert secrets.get("pairing-token") == "tok-3141"
    assert backend.store == {(KEYRING_SERVICE, "pairing-token"): "tok-3141"}
    assert files_holding(fleetgui_home, "tok-3141") == []
    secrets.set("pairing-token", "tok-2718")  # replaced, not added
    assert secrets.get("pairing-token") == "tok-2718" and len(backend.store) == 1
    secrets.delete("pairing-token")
    assert secrets.get("pairing-token") is None and backend.store == {}
    secrets.delete("pairing-token")  # already gone: not an error


def test_a_keyring_that_refuses_a_secret_says_what_to_do(
    fleetgui_home: Path, use_keyring: Callable
) -> None:
    use_keyring(OsKeyringStandIn(refuse_set=True))
    with pytest.raises(SecretError) as refused:
        Secrets().set("pairing-token", "tok-3141")
    message = str(refused.value)
    assert "'pairing-token'" in message and "Failed to unlock the collection!" in message
    assert "unlock the keyring" in message and "Secret Service" in message
    assert "tok-3141" not in message
    assert files_holding(fleetgui_home, "tok-3141") == []  # no silent fallback to a file


def test_a_locked_keyring_reads_as_no_secret_and_is_logged(
    fleetgui_home: Path, use_keyring: Callable, caplog: pytest.LogCaptureFixture
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
    fleetgui_home: Path, use_keyring: Callable
) -> None:
    backend = use_keyring(OsKeyringStandIn())
    pair = coordinator_identity()
    assert backend.store == {(KEYRING_SERVICE, KEYRING_USER): pair.secret}
    assert KeyPair.from_secret(pair.secret) == pair
    assert Secrets().get(KEYRING_USER) == pair.secret  # the app's Secrets sees the same entry
    assert not (fleetgui_home / "config" / COORDINATOR_KEY).exists()
    assert files_holding(fleetgui_home, pair.secret) == []
    assert (fleetgui_home / "config" / COORDINATOR_PUB).read_text().split()[0] == pair.public
    assert coordinator_identity() == pair  # the same key on every start
    assert len(backend.store) == 1


def test_coordinator_key_falls_back_to_a_private_file_when_the_keyring_refuses(
    fleetgui_home: Path, use_keyring: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    backend = use_keyring(OsKeyringStandIn(refuse_set=True))
    with caplog.at_level(logging.WARNING, logger="fleetgui.net.keys"):
        pair = coordinator_identity()
    assert "cannot store the key in the keyring" in caplog.text
    assert str(fleetgui_home / "config" / COORDINATOR_KEY) in caplog.text
    assert backend.store == {}
    secret_file = fleetgui_home / "config" / COORDINATOR_KEY
    assert pair.secret in secret_file.read_text()
    if POSIX:
        assert mode(secret_file) == 0o600
    assert coordinator_identity() == pair
    # the keyring works again later: the key is still the one in the file (workers trust it)
    use_keyring(OsKeyringStandIn())
    assert coordinator_identity() == pair
