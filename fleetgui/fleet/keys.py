"""SSH-style trust for the fleet, on ZeroMQ CURVE keys (Z85 text, 40 characters).

* Coordinator identity: the secret key lives in the OS keyring (service ``fleetgui``, user
  ``coordinator-secret``), the public key in ``config_dir()/coordinator.pub``. Without a usable
  keyring (headless Linux) the secret goes to ``config_dir()/coordinator.key`` (mode 0600) with a
  warning. Scripts and tests use an identity folder instead (``fleetgui keys --out DIR``,
  :func:`load_identity`).
* Worker identity: ``worker.key``, readable only by its owner; a key file that group or others
  can read is refused, as ssh does.
* A worker trusts the coordinators listed in its ``authorized_keys`` (``<key> <comment>`` lines),
  or one that presents the worker's one-time pairing code (:class:`PairingCode`). The
  :class:`Authorizer` is the policy the ZAP handler and the message gate consult.
* A coordinator pins each worker's key on first use (``known_workers.json``); a changed key
  raises :class:`WorkerKeyChangedError`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zmq
from zmq.utils import z85

from fleetgui import paths
from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text

logger = logging.getLogger(__name__)

KEYRING_SERVICE = "fleetgui"
KEYRING_USER = "coordinator-secret"
COORDINATOR_KEY = "coordinator.key"
COORDINATOR_PUB = "coordinator.pub"
WORKER_KEY = "worker.key"
AUTHORIZED_KEYS = "authorized_keys"
KNOWN_WORKERS = "known_workers.json"
_SECRET_HEADER = "# fleetgui CURVE secret key: keep this file private (chmod 600)\n"


class KeyFileError(FleetguiError):
    """A key file is missing, malformed or unsafe; the message names the file and the fix."""


class PairingError(FleetguiError):
    """A pairing attempt was refused (wrong, expired, used-up or no code)."""


class WorkerKeyChangedError(FleetguiError):
    """A worker presented a key other than the one pinned for it."""


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


def _keyring_get() -> tuple[Any, str | None]:
    """The keyring module and the stored secret; raises OSError when no keyring is usable."""
    try:
        import keyring
        import keyring.errors
    except ImportError as exc:
        raise OSError("the keyring package is not installed") from exc
    try:
        return keyring, keyring.get_password(KEYRING_SERVICE, KEYRING_USER)
    except (keyring.errors.KeyringError, RuntimeError) as exc:  # NoKeyringError, locked, ...
        raise OSError(f"{type(exc).__name__}: {exc}") from exc


def coordinator_identity() -> KeyPair:
    """This PC's coordinator key pair, created on first use (keyring, else a 0600 file)."""
    config = paths.config_dir()
    secret_file = config / COORDINATOR_KEY
    keyring: Any = None
    secret: str | None = None
    try:
        keyring, secret = _keyring_get()
    except OSError as exc:
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
        if keyring is not None:
            try:
                keyring.set_password(KEYRING_SERVICE, KEYRING_USER, pair.secret)
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


# --------------------------------------------------------------------------------------------
# authorized_keys (worker side)


@dataclass(frozen=True, slots=True)
class AuthorizedKey:
    """One trusted coordinator."""

    public_key: str
    comment: str = ""


def parse_authorized_keys(text: str, source: str = AUTHORIZED_KEYS) -> list[AuthorizedKey]:
    """Parse ``<key> [comment]`` lines; blank lines and ``#`` comments are skipped.

    ``#`` is a Z85 character, but never the first one of a key (a 5-character group's first
    character encodes at most ``(2**32 - 1) // 85**4 = 82``, and ``#`` is 84).
    """
    entries: list[AuthorizedKey] = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.strip().split(maxsplit=1)
        if not words or words[0].startswith("#"):
            continue
        if not is_key(words[0]):
            raise KeyFileError(
                f"{source} line {number}: {words[0][:50]!r} is not a CURVE public key (40 Z85 "
                f"characters, as in coordinator.pub); fix or delete the line"
            )
        entries.append(AuthorizedKey(words[0], words[1] if len(words) > 1 else ""))
    return entries


def read_authorized_keys(path: Path) -> list[AuthorizedKey]:
    """The keys in ``path`` (none if the file does not exist)."""
    try:
        with path.open("rb") as handle:
            writable_by_others = os.name == "posix" and os.fstat(handle.fileno()).st_mode & 0o022
            text = handle.read().decode("utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read {path}: {exc}") from exc
    if writable_by_others:  # anyone who can write it can let themselves in, as sshd knows
        raise KeyFileError(f"{path} can be changed by other users: run `chmod 644 {path}`")
    return parse_authorized_keys(text, str(path))


def add_authorized_key(path: Path, public_key: str, comment: str = "") -> bool:
    """Append ``public_key`` to ``path``; False if it was already there."""
    if not is_key(public_key):
        raise KeyFileError(f"not a CURVE public key: {public_key[:50]!r}")
    if any(entry.public_key == public_key for entry in read_authorized_keys(path)):
        return False
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    comment = " ".join(comment.split())[:200]  # one line, whatever the peer sent
    atomic_write_text(path, f"{text}{public_key} {comment}".rstrip() + "\n")
    return True


# --------------------------------------------------------------------------------------------
# Pairing


class PairingCode:
    """A one-time numeric code: valid for ``ttl_s`` seconds, single use, at most
    ``max_attempts`` tries in all, and at least ``min_interval_s`` between tries."""

    def __init__(
        self,
        *,
        ttl_s: float = 300.0,
        max_attempts: int = 5,
        digits: int = 6,
        min_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.code = f"{secrets.randbelow(10**digits):0{digits}d}"
        self._clock = clock
        self.expires_at = clock() + ttl_s
        self._attempts_left = max_attempts
        self._min_interval_s = min_interval_s
        self._last_attempt = -float("inf")
        self._used = False

    @property
    def active(self) -> bool:
        """Whether the code can still be used."""
        return not self._used and self._attempts_left > 0 and self._clock() < self.expires_at

    def check(self, candidate: str) -> None:
        """Consume the code if ``candidate`` matches it; else raise :class:`PairingError`."""
        now = self._clock()
        if self._used:
            raise PairingError(
                "this pairing code was already used; start the worker with "
                "--pair again for a new one"
            )
        if now >= self.expires_at:
            raise PairingError("the pairing code expired; start the worker with --pair again")
        if self._attempts_left <= 0:
            raise PairingError("too many wrong pairing codes; start the worker with --pair again")
        if now - self._last_attempt < self._min_interval_s:
            raise PairingError("pairing attempts too fast; wait a second and try again")
        self._last_attempt = now
        self._attempts_left -= 1
        given = "".join(str(candidate).split()).replace("-", "").encode("utf-8")[:64]
        if not hmac.compare_digest(given, self.code.encode("ascii")):
            raise PairingError(f"wrong pairing code ({self._attempts_left} attempts left)")
        self._used = True


class Authorizer:
    """Who may talk to a worker: the ZAP policy and the per-message gate.

    ``is_allowed`` (ZAP, per connection) accepts authorized keys, and any key while a pairing
    code is active; ``is_authorized`` (per message) accepts only authorized keys, so an
    unpaired connection can do nothing but :meth:`pair`. Thread-safe. ``authorized_keys`` is
    re-read when the file changes.
    """

    def __init__(self, authorized_keys: Path | None = None, keys: Iterable[str] = ()) -> None:
        self.path = authorized_keys
        self._extra = set(keys)
        self._file_keys: frozenset[str] = frozenset()
        self._stamp: tuple[int, int] | None = None
        self._pairing: PairingCode | None = None
        self._ring_peers: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._reload()

    def _reload(self) -> None:
        if self.path is None:
            return
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp or stamp is None:
            entries = read_authorized_keys(self.path) if stamp else []
            self._file_keys, self._stamp = frozenset(e.public_key for e in entries), stamp

    @property
    def pairing_open(self) -> bool:
        """Whether a pairing code is active (unknown keys may connect, to pair only)."""
        return self._pairing is not None and self._pairing.active

    def open_pairing(self, **options: Any) -> PairingCode:
        """Start pairing with a new code (``PairingCode`` options); show ``.code`` to the user."""
        with self._lock:
            self._pairing = PairingCode(**options)
            return self._pairing

    def close_pairing(self) -> None:
        with self._lock:
            self._pairing = None

    def is_authorized(self, public_key: str) -> bool:
        """Whether ``public_key`` is a trusted coordinator (authorized_keys or paired)."""
        with self._lock:
            return public_key in self._extra or public_key in self._file_keys

    def set_ring_peers(self, public_keys: Iterable[str]) -> None:
        """The workers a trusted coordinator put before this one in its ring: they may connect
        and pass activations on (FORWARD only), for as long as that ring stands."""
        with self._lock:
            self._ring_peers = frozenset(public_keys)

    def is_ring_peer(self, public_key: str) -> bool:
        with self._lock:
            return public_key in self._ring_peers

    def is_allowed(self, public_key: str) -> bool:
        """The ZAP decision for a new connection from ``public_key``."""
        with self._lock:
            try:
                self._reload()
            except KeyFileError as exc:
                logger.error("%s; keeping the keys read before", exc)
            known = public_key in self._extra or public_key in self._file_keys
            known = known or public_key in self._ring_peers
        return known or self.pairing_open

    def pair(self, public_key: str, code: str, comment: str = "") -> None:
        """Trust ``public_key`` if ``code`` is the active pairing code; else raise."""
        with self._lock:
            if self._pairing is None:
                raise PairingError("this worker is not pairing; start it with --pair")
            self._pairing.check(code)
            self._pairing = None
            self._extra.add(public_key)
        if self.path is not None:
            try:
                add_authorized_key(self.path, public_key, comment or "paired")
            except (KeyFileError, OSError) as exc:
                logger.error("paired for this run only, could not save the key: %s", exc)
        logger.warning("paired coordinator %s (%s)", fingerprint(public_key), comment)


# --------------------------------------------------------------------------------------------
# Known workers (coordinator side): trust on first use


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
        entry = self._load().get(f"{name}@{address}")
        return entry.get("public_key") if isinstance(entry, dict) else None

    def check(self, address: str, name: str, public_key: str) -> bool:
        """Pin ``public_key`` on first contact (True), accept it if it is the pinned key
        (False), else raise :class:`WorkerKeyChangedError`."""
        workers = self._load()
        entry_id = f"{name}@{address}"
        entry = workers.get(entry_id)
        pinned = entry.get("public_key") if isinstance(entry, dict) else None
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
        if workers.pop(f"{name}@{address}", None) is None:
            return False
        atomic_write_text(self.path, json.dumps({"version": 1, "workers": workers}, indent=2))
        return True
