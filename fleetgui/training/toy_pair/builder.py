"""Build the toy target/draft pair into a folder, atomically, and reuse complete builds.

Layout of a build folder::

    DIR/target/          HF model folder: config.json, model.safetensors, generation_config.json,
    DIR/draft/           tokenizer.json, tokenizer_config.json (same tokenizer in both)
    DIR/demo_model.json  recipe, seeds, parameter counts, losses, acceptance, code checks,
                         timings, hashes

The build happens in a hidden sibling folder, ``.DIR.partial-PID``, that is renamed to ``DIR`` only
when complete (after ``demo_model.json``), so an interrupted build never leaves a folder that looks
valid; the leftovers of a build whose process is gone are deleted by the next build
(:mod:`fleetgui.training.build_folder`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgui.fsutil import replace_dir, sha256_file
from fleetgui.training.build_folder import check_replaceable, mismatched_file, staging_dir
from fleetgui.training.progress import PhaseTracker, ProgressCallback
from fleetgui.training.toy_pair.spec import BUILDER_VERSION, SIZES, get_spec

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
    changed = mismatched_file(root, files)
    if changed is not None:
        log.info("%s does not match its recorded hash: rebuilding", changed)
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


def build_demo_pair(
    out_dir: Path, size: str = "small", progress: ProgressCallback | None = None
) -> DemoPair:
    """Build the demo pair of ``size`` into ``out_dir``, replacing an earlier (or incomplete)
    build there; a non-empty folder that holds something else is refused (``FleetguiError``).

    Deterministic: the same Python standard library, software versions and CPU give identical
    weights. ``progress`` receives :class:`~fleetgui.training.progress.BuildProgress` events; an
    exception raised by it aborts the build and leaves ``out_dir`` untouched.
    """
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose one of {', '.join(SIZES)}")
    from fleetgui.training.toy_pair.steps import run_steps

    out_dir = Path(out_dir).absolute()
    check_replaceable(out_dir, INFO_FILE, "demo models")
    spec = get_spec(size)
    phases = PhaseTracker(progress)
    log.info("building the %s demo pair into %s", size, out_dir)
    with staging_dir(out_dir) as tmp:
        info = run_steps(spec, tmp, phases)
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
