"""fleetgui's entries in the OS keyring: one service name, and the calls every user of it makes.

The coordinator's secret key, the API key and the app's other secrets all live under the service
``fleetgui``; the entry names (keyring "users") below must never change, or existing users'
secrets are no longer found. ``keyring`` is imported only when a secret is read or written: a
worker-only install does not have the package, and worker code imports :mod:`fleetgui.net.keys`.
"""

from __future__ import annotations

from types import ModuleType

from fleetgui.errors import FleetguiError

KEYRING_SERVICE = "fleetgui"
COORDINATOR_SECRET_ENTRY = "coordinator-secret"  # net.keys: the coordinator's CURVE secret key
API_KEY_ENTRY = "api-key"  # api.keys and the app's API service: the OpenAI-compatible API's key


class KeyringUnavailableError(FleetguiError):
    """No usable OS keyring: a backend that failed (locked, refused, none installed), or
    :class:`KeyringMissingError`. The message is ``"ExceptionType: what it said"``."""


class KeyringMissingError(KeyringUnavailableError):
    """The ``keyring`` package is not installed (a worker-only install)."""


def _keyring() -> ModuleType:
    try:
        import keyring
        import keyring.errors
    except ImportError as exc:
        raise KeyringMissingError("the keyring package is not installed") from exc
    return keyring


def _failures(keyring: ModuleType) -> tuple[type[Exception], ...]:
    """What a backend raises when it cannot serve: ``KeyringError`` (locked, refused, no backend);
    some backends raise a bare RuntimeError instead."""
    return (keyring.errors.KeyringError, RuntimeError)


def _unavailable(exc: Exception) -> KeyringUnavailableError:
    return KeyringUnavailableError(f"{type(exc).__name__}: {exc}")


def get_secret(entry: str, service: str = KEYRING_SERVICE) -> str | None:
    """The stored secret, or None if there is none; raise :class:`KeyringUnavailableError`."""
    keyring = _keyring()
    try:
        value: str | None = keyring.get_password(service, entry)
    except _failures(keyring) as exc:
        raise _unavailable(exc) from exc
    return value


def set_secret(entry: str, value: str, service: str = KEYRING_SERVICE) -> None:
    """Store (or replace) the secret; raise :class:`KeyringUnavailableError`."""
    keyring = _keyring()
    try:
        keyring.set_password(service, entry, value)
    except _failures(keyring) as exc:
        raise _unavailable(exc) from exc


def delete_secret(entry: str, service: str = KEYRING_SERVICE) -> bool:
    """Remove the secret; False if there was none. Raise :class:`KeyringUnavailableError`."""
    keyring = _keyring()
    try:
        keyring.delete_password(service, entry)
    except keyring.errors.PasswordDeleteError:  # what backends raise for a missing entry
        return False
    except _failures(keyring) as exc:
        raise _unavailable(exc) from exc
    return True
