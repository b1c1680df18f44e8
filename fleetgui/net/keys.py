"""SSH-style trust for the fleet, on ZeroMQ CURVE keys (Z85 text, 40 characters).

* Coordinator identity: the secret key lives in the OS keyring (service ``fleetgui``, user
  ``coordinator-secret``), the public key in ``config_dir()/coordinator.pub``. Without a usable
  keyring (headless Linux) the secret goes to ``config_dir()/coordinator.key`` (mode 0600) with a
  warning. Scripts and tests use an identity folder instead (``fleetgui keys --out DIR``,
  :func:`load_identity`).
* Worker identity: ``worker.key``, readable only by its owner; a key file that group or others
  can read is refused, as ssh does.
* Which coordinators a worker trusts (``authorized_keys``, pairing codes): :mod:`trust`.
* The worker keys a coordinator pinned on first use (``known_workers.json``):
  :mod:`known_workers`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from zmq.utils import z85

from fleetgui import paths
from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text
from fleetgui.keyring_access import (
    COORDINATOR_SECRET_ENTRY,
    KEYRING_SERVICE,
    KeyringUnavailableError,
    get_secret,
    set_secret,
)

logger = logging.getLogger(__name__)

KEYRING_USER = COORDINATOR_SECRET_ENTRY  # the keyring entry of the coordinator's secret key
COORDINATOR_KEY = "coordinator.key"
COORDINATOR_PUB = "coordinator.pub"
WORKER_KEY = "worker.key"
AUTHORIZED_KEYS = "authorized_keys"
KNOWN_WORKERS = "known_workers.json"
_SECRET_HEADER = "# fleetgui CURVE secret key: keep this file private (chmod 600)\n"


class KeyFileError(FleetguiError):
    """A key file is missing, malformed or unsafe; the message names the file and the fix."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A CURVE key pair in Z85 text."""

    public: str
    secret: str = field(repr=False)

    @classmethod
    def generate(cls) -> KeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public.decode("ascii"), secret.decode("ascii"))

    @classmethod
    def from_secret(cls, secret: str) -> KeyPair:
        """The pair of a secret key (the public key is derived from it)."""
        return cls(zmq.curve_public(secret.encode("ascii")).decode("ascii"), secret)


def is_key(text: str) -> bool:
    """Whether ``text`` is a Z85 CURVE key (40 characters, 32 bytes)."""
    if len(text) != 40 or not text.isascii():
        return False
    try:
        return len(z85.decode(text.encode("ascii"))) == 32
    except (ValueError, KeyError, struct.error):  # bad length, bad character, overflow
        return False


def fingerprint(public_key: str) -> str:
    """An ssh-style fingerprint to compare a key by eye (``SHA256:...``)."""
    if not is_key(public_key):
        return f"(not a key: {public_key[:12]!r})"
    digest = hashlib.sha256(z85.decode(public_key.encode("ascii"))).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


# --------------------------------------------------------------------------------------------
# Private files


def write_private_file(path: Path, text: str, *, overwrite: bool = False) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically; refuse to replace an existing file
    unless ``overwrite``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise KeyFileError(f"cannot write the key file {path}: {exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:  # mkstemp: already 0600
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if not overwrite:
            try:
                os.link(tmp, path)  # atomic, and fails if the file exists
                return
            except FileExistsError:
                raise KeyFileError(f"{path} already exists; not replacing it") from None
            except OSError:  # no hard links here (FAT, some shares): reserve the name instead
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.replace(tmp, path)
    except FileExistsError:
        raise KeyFileError(f"{path} already exists; not replacing it") from None
    except OSError as exc:
        raise KeyFileError(f"cannot write the key file {path}: {exc}") from exc
    finally:
        Path(tmp).unlink(missing_ok=True)


def read_secret_file(path: Path) -> KeyPair:
    """The key pair of a secret key file; on POSIX the file must be private and ours."""
    try:
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())  # the file we read, not a name that may change
            data = handle.read(4096)
    except OSError as exc:
        raise KeyFileError(f"cannot read the secret key file {path}: {exc}") from exc
    if os.name == "posix" and info.st_mode & 0o077:
        raise KeyFileError(
            f"{path} can be read by other users (mode {info.st_mode & 0o777:o}); a secret key "
            f"must be private: run `chmod 600 {path}`"
        )
    if os.name == "posix" and info.st_uid != os.geteuid():
        raise KeyFileError(f"{path} belongs to another user (uid {info.st_uid}); it must be yours")
    # Windows: the file lives in the user's profile, protected by its ACLs.
    words = data.decode("ascii", "replace").split()
    keys = [word for word in words if is_key(word)]
    if len(keys) != 1:
        raise KeyFileError(f"{path} does not hold one CURVE secret key (40 Z85 characters)")
    return KeyPair.from_secret(keys[0])


# --------------------------------------------------------------------------------------------
# Identities


def write_identity(directory: Path, pair: KeyPair, *, force: bool = False) -> tuple[Path, Path]:
    """Write ``DIR/coordinator.key`` (0600) and ``DIR/coordinator.pub``; returns both paths."""
    secret_path, public_path = directory / COORDINATOR_KEY, directory / COORDINATOR_PUB
    if not force and (secret_path.exists() or public_path.exists()):
        raise KeyFileError(
            f"{directory} already holds a coordinator key; use --force to replace it (workers "
            f"that trust the old key will then refuse this coordinator until paired again)"
        )
    write_private_file(secret_path, _SECRET_HEADER + pair.secret + "\n", overwrite=force)
    atomic_write_text(public_path, f"{pair.public} coordinator@{socket.gethostname()}\n")
    return secret_path, public_path


def load_identity(directory: Path) -> KeyPair:
    """The coordinator key pair of an identity folder (``fleetgui keys --out DIR``)."""
    path = directory / COORDINATOR_KEY
    if not path.is_file():
        raise KeyFileError(
            f"no coordinator key in {directory}: create one with `fleetgui keys --out {directory}`"
        )
    return read_secret_file(path)


def worker_identity(path: Path | None = None) -> KeyPair:
    """This worker's key pair from ``path`` (default ``config_dir()/worker.key``), created with
    mode 0600 on first use."""
    path = path or paths.config_dir() / WORKER_KEY
    if not path.exists():
        pair = KeyPair.generate()
        try:
            write_private_file(path, _SECRET_HEADER + pair.secret + "\n")
            logger.info("created worker key %s (%s)", path, fingerprint(pair.public))
            return pair
        except KeyFileError:
            pass  # another process created it first: use theirs
    return read_secret_file(path)


def coordinator_identity() -> KeyPair:
    """This PC's coordinator key pair, created on first use (keyring, else a 0600 file)."""
    config = paths.config_dir()
    secret_file = config / COORDINATOR_KEY
    keyring_usable = False
    secret: str | None = None
    try:
        secret = get_secret(KEYRING_USER)
        keyring_usable = True
    except KeyringUnavailableError as exc:
        logger.warning(
            "no usable OS keyring (%s): the coordinator's secret key is kept in %s, "
            "readable only by you",
            exc,
            secret_file,
        )
    if secret is None and secret_file.exists():
        pair = read_secret_file(secret_file)
    elif secret is not None:
        if not is_key(secret):
            raise KeyFileError(
                f"the keyring entry {KEYRING_SERVICE}/{KEYRING_USER} is not a "
                "CURVE secret key: delete it and restart to create a new one"
            )
        pair = KeyPair.from_secret(secret)
    else:
        pair = KeyPair.generate()
        stored = False
        if keyring_usable:
            try:
                set_secret(KEYRING_USER, pair.secret)
                stored = True
            except Exception as exc:  # any backend failure: fall back to the private file
                logger.warning(
                    "cannot store the key in the keyring (%s): using %s", exc, secret_file
                )
        if not stored:
            write_private_file(secret_file, _SECRET_HEADER + pair.secret + "\n")
        logger.info("created coordinator key %s", fingerprint(pair.public))
    public_file = config / COORDINATOR_PUB
    if not public_file.exists() or not public_file.read_text().startswith(pair.public):
        atomic_write_text(public_file, f"{pair.public} coordinator@{socket.gethostname()}\n")
    return pair
