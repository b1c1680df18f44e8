"""fleetgui's OS keyring entries (``fleetgui.keyring_access``), through the in-memory keyring."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from fleetgui import keyring_access
from fleetgui.keyring_access import (
    KEYRING_SERVICE,
    KeyringMissingError,
    KeyringUnavailableError,
    delete_secret,
    get_secret,
    set_secret,
)


def test_the_service_and_entry_names_never_change() -> None:
    """Existing users' secrets are stored under these names: renaming one loses them."""
    assert KEYRING_SERVICE == "fleetgui"
    assert keyring_access.COORDINATOR_SECRET_ENTRY == "coordinator-secret"
    assert keyring_access.API_KEY_ENTRY == "api-key"


def test_the_three_users_share_one_service() -> None:
    pytest.importorskip("PySide6")
    from fleetgui.api import keys as api_keys
    from fleetgui.app import settings
    from fleetgui.net import keys as fleet_keys

    assert api_keys.KEYRING_SERVICE is fleet_keys.KEYRING_SERVICE is settings.KEYRING_SERVICE
    assert settings.Secrets().service == KEYRING_SERVICE


def test_round_trip(os_keyring: Any) -> None:
    assert get_secret("pairing-token") is None
    set_secret("pairing-token", "tok-1")
    set_secret("pairing-token", "tok-2")  # replaced
    assert get_secret("pairing-token") == "tok-2"
    assert os_keyring.store == {(KEYRING_SERVICE, "pairing-token"): "tok-2"}
    set_secret("pairing-token", "other", service="another-app")
    assert get_secret("pairing-token", service="another-app") == "other"
    assert delete_secret("pairing-token", service="another-app") is True
    assert os_keyring.store == {(KEYRING_SERVICE, "pairing-token"): "tok-2"}


def test_deleting_a_missing_secret_is_not_an_error(os_keyring: Any) -> None:
    from keyring.errors import PasswordDeleteError

    def refuse(service: str, username: str) -> None:  # as real backends do for a missing entry
        raise PasswordDeleteError("Password not found")

    os_keyring.delete_password = refuse
    assert delete_secret("pairing-token") is False


def test_a_failing_backend_is_unavailable_with_what_it_said(os_keyring: Any) -> None:
    from keyring.errors import KeyringLocked

    def locked(*args: Any) -> None:
        raise KeyringLocked("the keyring is locked")

    os_keyring.get_password = os_keyring.set_password = os_keyring.delete_password = locked
    for call in (
        lambda: get_secret("x"),
        lambda: set_secret("x", "y"),
        lambda: delete_secret("x"),
    ):
        with pytest.raises(
            KeyringUnavailableError, match=r"^KeyringLocked: the keyring is locked$"
        ):
            call()


def test_without_the_keyring_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)  # a worker-only install
    with pytest.raises(KeyringMissingError, match="keyring package is not installed"):
        get_secret("x")
    with pytest.raises(KeyringUnavailableError):  # callers that do not care why catch this
        set_secret("x", "y")
