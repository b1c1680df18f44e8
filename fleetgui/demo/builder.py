"""Build the demo target/draft pair into a folder, atomically, and reuse complete builds.

Layout of a build folder::

    DIR/target/          HF model folder: config.json, model.safetensors, generation_config.json,
    DIR/draft/           tokenizer.json, tokenizer_config.json (same tokenizer in both)
    DIR/demo_model.json  recipe, seeds, parameter counts, losses, acceptance, code checks,
                         timings, hashes

The build happens in a hidden sibling folder, ``.DIR.partial-PID``, that is renamed to ``DIR`` only
when complete (after ``demo_model.json``), so an interrupted build never leaves a folder that looks
valid; the leftovers of a build whose process is gone are deleted by the next build.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgui.demo.progress import PhaseTracker, ProgressCallback
from fleetgui.demo.spec import BUILDER_VERSION, SIZES, get_spec
from fleetgui.errors import FleetguiError
from fleetgui.fsutil import replace_dir, sha256_file

log = logging.getLogger(__name__)

INFO_FILE = "demo_model.json"
FORMAT = "fleetgui-demo-model"
MODEL_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
_PARTIAL_MARK = ".partial-"


@dataclass(frozen=True)
class DemoPair:
    """A built demo pair: the two HF model folders and the build record."""

    root: Path
    info: dict[str, Any]
    reused: bool = False

    @property
    def target_dir(self) -> Path:
        """HF folder of the target model."""
        return self.root / "target"

    @property
    def draft_dir(self) -> Path:
        """HF folder of the draft model."""
        return self.root / "draft"


def default_dir(size: str) -> Path:
    """Where :func:`ensure_demo_pair` keeps the pair of ``size``."""
    from fleetgui.paths import shards_cache_dir

    return shards_cache_dir() / f"demo-model-{size}"


def _is_current(info: Any, size: str | None) -> bool:
    """Whether a build record is a complete build by this builder version from the current
    recipe of its size (and of ``size`` when given)."""
    if not isinstance(info, dict) or info.get("format") != FORMAT or not info.get("complete"):
        return False
    built_size = info.get("size")
    if info.get("builder_version") != BUILDER_VERSION or built_size not in SIZES:
        return False
    if size is not None and built_size != size:
        return False
    return bool(info.get("spec") == _as_json(get_spec(built_size).to_dict()))


def load_pair(out_dir: Path, size: str | None = None) -> DemoPair | None:
    """The pair in ``out_dir`` if it is a complete build by this builder version from the
    current recipe of its size (and of ``size`` when given) whose model files all match their
    recorded hashes; else None."""
    root = Path(out_dir)
    try:
        info = json.loads((root / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not _is_current(info, size):
        return None
    files = info.get("files")
    expected = {f"{sub}/{name}" for sub in ("target", "draft") for name in MODEL_FILES}
    if not isinstance(files, dict) or set(files) != expected:
        return None
    for name, digest in files.items():
        path = root / name
        if not path.is_file() or sha256_file(path) != digest:
            log.info("%s does not match its recorded hash: rebuilding", path)
            return None
    return DemoPair(root, info, reused=True)


def ensure_demo_pair(
    size: str = "small",
    out_dir: Path | None = None,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> DemoPair:
    """The demo pair of ``size`` in ``out_dir`` (default :func:`default_dir`): reused when a
    complete build is there (``DemoPair.reused``), else built. ``force`` always rebuilds."""
    root = default_dir(size) if out_dir is None else Path(out_dir)
    if not force:
        pair = load_pair(root, size)
        if pair is not None:
            log.info("reusing the %s demo pair in %s", size, root)
            return pair
    return build_demo_pair(root, size, progress)


def _remove_stale_builds(out_dir: Path) -> None:
    """Delete the partial folders of earlier builds of ``out_dir`` whose process is gone."""
    import psutil

    for path in out_dir.parent.glob(f".{out_dir.name}{_PARTIAL_MARK}*"):
        pid = path.name.rsplit(_PARTIAL_MARK, 1)[-1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            log.info("removing leftovers of an interrupted build: %s", path)
            shutil.rmtree(path, ignore_errors=True)


def check_replaceable(
    out_dir: Path,
    marker: str = INFO_FILE,
    what: str = "demo models",
    error: type[FleetguiError] = FleetguiError,
) -> None:
    """Refuse to replace a folder that is not a (possibly incomplete) build of ``what``, whose
    builds hold ``marker``; raises ``error`` naming the fix. Also used by the SmolLM2 draft."""
    if out_dir.is_file():
        raise error(f"{out_dir} is a file, not a folder for {what}; choose a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / marker).is_file():
        raise error(
            f"{out_dir} exists and does not hold {what} ({marker} is missing); "
            "choose another output folder or delete it"
        )


@contextmanager
def staging_dir(out_dir: Path) -> Iterator[Path]:
    """A fresh hidden sibling of ``out_dir``, deleted if the body raises (also used by the
    SmolLM2 draft's build)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}{_PARTIAL_MARK}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_demo_pair(
    out_dir: Path, size: str = "small", progress: ProgressCallback | None = None
) -> DemoPair:
    """Build the demo pair of ``size`` into ``out_dir``, replacing an earlier (or incomplete)
    build there; a non-empty folder that holds something else is refused (``FleetguiError``).

    Deterministic: the same Python standard library, software versions and CPU give identical
    weights. ``progress`` receives :class:`~fleetgui.demo.progress.BuildProgress` events; an
    exception raised by it aborts the build and leaves ``out_dir`` untouched.
    """
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose one of {', '.join(SIZES)}")
    from fleetgui.demo.pipeline import run_pipeline

    out_dir = Path(out_dir).absolute()
    check_replaceable(out_dir)
    spec = get_spec(size)
    phases = PhaseTracker(progress)
    log.info("building the %s demo pair into %s", size, out_dir)
    with staging_dir(out_dir) as tmp:
        info = run_pipeline(spec, tmp, phases)
        files = {
            f"{sub}/{name}": sha256_file(tmp / sub / name)
            for sub in ("target", "draft")
            for name in MODEL_FILES
        }
        info.update(
            format=FORMAT,
            builder_version=BUILDER_VERSION,
            size=size,
            phase_times_s=phases.times,
            build_time_s=round(time.perf_counter() - phases.started, 2),
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            files=files,
            sha256=_combined_hash(files),
            complete=True,
        )
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        replace_dir(tmp, out_dir)
    log.info("demo pair ready in %s (%.0f s)", out_dir, info["build_time_s"])
    return DemoPair(out_dir, info)


def _as_json(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def _combined_hash(files: dict[str, str]) -> str:
    """One hash over the per-file hashes (identifies the built pair)."""
    import hashlib

    text = "".join(f"{name}\0{digest}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()
