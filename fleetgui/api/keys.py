"""Where ``fleetgui serve`` takes its API key from: ``--api-key KEY``, ``--api-key keyring`` (the OS
keyring, as the app keeps its other secrets; a key is made and stored the first time), or the
environment variable ``FLEETGUI_API_KEY`` (a key on the command line shows in process lists)."""

from __future__ import annotations

import logging
import os
import secrets

from fleetgui.errors import FleetguiError
from fleetgui.keyring_access import (
    API_KEY_ENTRY,
    KEYRING_SERVICE,
    KeyringMissingError,
    KeyringUnavailableError,
    get_secret,
    set_secret,
)

log = logging.getLogger(__name__)

KEYRING = "keyring"
KEYRING_USER = API_KEY_ENTRY  # the app's API service reads the same entry
ENV_VAR = "FLEETGUI_API_KEY"
KEY_PREFIX = "sk-fleetgui-"


class ApiKeyError(FleetguiError):
    """The API key cannot be read or stored."""


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(24)


def keyring_api_key(*, create: bool = True) -> tuple[str, bool]:
    """The API key in the OS keyring and whether it was just made: with ``create`` a new one is
    stored when there is none."""
    try:
        key = get_secret(KEYRING_USER)
        if key:
            return key, False
        if not create:
            raise ApiKeyError(
                f"the OS keyring has no API key ({KEYRING_SERVICE}/{KEYRING_USER}): run "
                "fleetgui serve --api-key keyring once to create one"
            )
        key = new_api_key()
        set_secret(KEYRING_USER, key)
    except KeyringMissingError as exc:
        raise ApiKeyError(
            "--api-key keyring needs the keyring package: pip install 'fleetgui[app]'"
        ) from exc
    except KeyringUnavailableError as exc:  # no backend, a locked or refusing keyring
        raise ApiKeyError(
            f"the OS keyring is not usable ({exc}): unlock it, or pass "
            f"the key with --api-key KEY or the {ENV_VAR} environment variable"
        ) from exc
    # the key itself is not logged: log files outlive the keyring's protection
    log.warning("created an API key in the OS keyring (%s/%s)", KEYRING_SERVICE, KEYRING_USER)
    return key, True


def resolve_api_key(given: str | None) -> tuple[str | None, bool]:
    """The key ``--api-key`` names (``keyring``: the OS keyring's), else ``FLEETGUI_API_KEY``,
    else None (no key); and whether it was just created (then the user must be told it)."""
    if given is None:
        return os.environ.get(ENV_VAR) or None, False
    if given == KEYRING:
        return keyring_api_key()
    return given, False
