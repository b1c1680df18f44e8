"""Build a ``Pipeline`` from an export folder (and a draft export) in this process."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import openvino as ov
import psutil

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, read_manifest
from fleetgui.runtime.draft_source import NGRAM, DraftSource
from fleetgui.runtime.kv_budget import (
    KvHolder,
    budget_tokens,
    kv_bytes_per_token_per_layer,
    kv_element_bytes,
)
from fleetgui.runtime.metrics import MetricsBus
from fleetgui.runtime.ngram_draft import NgramDraft
from fleetgui.runtime.ov_stage import LocalStage, StageConfig
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.resident import ResidentStreams
from fleetgui.runtime.route import LocalRoute, Route
from fleetgui.runtime.speculative import Drafter, DraftModel
from fleetgui.runtime.stage_factory import compile_stage, warm_up, with_paging_of
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 4096
#: Idle conversations kept when no PC's memory is known: this many contexts' worth of tokens.
DEFAULT_IDLE_CONTEXTS = 4


@dataclass(frozen=True)
class LocalPipelineConfig:
    """How to run an export in this process."""

    stage: StageConfig = field(default_factory=StageConfig)  # every target stage's settings
    draft_stage: StageConfig = field(default_factory=StageConfig)
    context_limit: int | None = None  # None: the model's max_position_embeddings (capped)
    prefill_chunk: int = 256
    kv_reuse: bool = True  # finished streams stay resident for requests that continue them
    # the KV idle conversations may take on each PC that holds stages (None: a share of its free
    # memory, runtime.kv_budget); kv_budget_tokens, if set, is the budget in tokens instead
    kv_budget_bytes: int | None = None
    kv_budget_tokens: int | None = None
    # several streams in each stage pass (paged stages, the pass scheduler); False: one stream
    # a pass on stateful stages, streams interleaved across the stages
    batching: bool = True


def with_context(
    config: LocalPipelineConfig,
    *,
    context: int | None = None,
    kv_reuse: bool | None = None,
    kv_budget: int | None = None,
    batching: bool | None = None,
) -> LocalPipelineConfig:
    """``config`` with what ``--context``, ``--no-kv-reuse``, ``--kv-budget`` (bytes) and
    ``--no-batching`` set; None leaves a setting as it is."""
    if batching is not None:
        stage = replace(config.stage, paged=batching and config.stage.paged)
        config = replace(config, batching=batching, stage=stage)
    if context is not None:
        config = replace(config, context_limit=context)
    if kv_reuse is not None:
        config = replace(config, kv_reuse=kv_reuse)
    if kv_budget is not None:
        config = replace(config, kv_budget_bytes=kv_budget)
    return config


def _single_thread(config: StageConfig) -> bool:
    if config.threads:
        return config.threads == 1
    affinity = getattr(os, "sched_getaffinity", None)
    return affinity is not None and len(affinity(0)) == 1


def safe_stage_config(config: StageConfig, weight_format: str) -> StageConfig:
    """What precision ``auto`` means for a CPU stage with ``weight_format`` weights.

    * int4/int8 weights compute in f32 with the activations quantized to int8 on the fly
      (``f32-dq``): on an AMX Xeon that decoded faster than the plugin's default, bf16
      (docs/design-measurements.md); on CPUs without bf16 (Core Ultra AI PCs) f32 is already
      the default.
    * fp32/fp16 weights on one thread compute in f32: OpenVINO 2026.4's CPU plugin dies
      (SIGFPE) running them at its default bf16 with a single inference thread (seen on an AMX
      Xeon)."""
    if config.precision != "auto" or config.device != "CPU":
        return config
    if weight_format in ("int4", "int8"):
        return replace(config, precision="f32-dq")
    if weight_format in ("fp32", "fp16") and _single_thread(config):
        # chosen for the user, nothing to act on: not a warning (the demo's draft hits it on
        # every start)
        log.info(
            "%s weights on one CPU thread: computing in f32 (bf16 crashes here)", weight_format
        )
        return replace(config, precision="f32")
    return config


def context_limit_of(manifest: Manifest, requested: int | None) -> int:
    model_max = int(manifest.config.get("max_position_embeddings") or DEFAULT_CONTEXT)
    if requested is None:
        return min(model_max, DEFAULT_CONTEXT)
    if requested > model_max:
        raise FleetguiError(
            f"a context of {requested} tokens exceeds the model's {model_max}; use {model_max} "
            "or less"
        )
    return requested


def load_draft(
    draft_dir: DraftSource,
    target: Manifest,
    tokenizer: Tokenizer,
    config: LocalPipelineConfig,
    core: ov.Core,
) -> Drafter:
    """The draft export as a ``DraftModel`` (it must share the target's tokenizer), or for
    :data:`~fleetgui.runtime.draft_source.NGRAM` the draft-free n-gram drafter."""
    if draft_dir == NGRAM:
        return NgramDraft()
    draft_dir = Path(draft_dir)
    manifest = read_manifest(draft_dir)
    if len(manifest.stages) != 1:
        raise FleetguiError(
            f"the draft {draft_dir} has {len(manifest.stages)} stages; export it whole "
            "(--monolithic or --stages 1)"
        )
    draft_tokenizer = Tokenizer(tokenizer_dir_of(draft_dir), core)
    if (
        manifest.vocab_size != target.vocab_size
        or draft_tokenizer.fingerprint() != tokenizer.fingerprint()
    ):
        raise FleetguiError(
            f"the draft {draft_dir} uses a different tokenizer or vocabulary "
            f"({manifest.vocab_size} tokens) than the target ({target.vocab_size}); choose a "
            "draft model from the same family"
        )
    stage = warm_up(
        LocalStage(
            0,
            manifest.shard(0),
            [draft_dir / part for part in manifest.stages[0].model_files],
            safe_stage_config(config.draft_stage, manifest.weight_format),
            core=core,
            outputs={"logits"},  # the draft reads logits only: its top-1 head cost 7 % of a pass
        )
    )
    limit = context_limit_of(manifest, config.context_limit)
    return DraftModel(stage, context_limit=limit, prefill_chunk=config.prefill_chunk)


def load_local_pipeline(
    export_dir: Path,
    *,
    draft_dir: DraftSource | None = None,
    config: LocalPipelineConfig | None = None,
    metrics: MetricsBus | None = None,
) -> Pipeline:
    """Every stage of ``export_dir`` compiled in this process, chained, with an optional draft
    (an export folder, or ``"ngram"``)."""
    config = config or LocalPipelineConfig()
    manifest = read_manifest(export_dir)
    stage_config = safe_stage_config(config.stage, manifest.weight_format)
    config = replace(config, stage=with_paging_of(stage_config, manifest.config))
    core = ov.Core()
    stages = [
        compile_stage(
            entry.index,
            manifest.shard(entry.index),
            [Path(export_dir) / part for part in entry.model_files],
            config.stage,
            core=core,
        )
        for entry in manifest.stages
    ]
    here = KvHolder("this PC", manifest.n_layers, int(psutil.virtual_memory().available))
    return pipeline_over(
        LocalRoute(stages),
        export_dir,
        manifest,
        config,
        core,
        draft_dir=draft_dir,
        metrics=metrics,
        holders=[here],
    )


def pipeline_over(
    route: Route,
    export_dir: Path,
    manifest: Manifest,
    config: LocalPipelineConfig,
    core: ov.Core,
    *,
    draft_dir: DraftSource | None = None,
    metrics: MetricsBus | None = None,
    holders: Sequence[KvHolder] = (),
) -> Pipeline:
    """A ``Pipeline`` running ``route`` (the stages of ``export_dir``, here or on a fleet)
    with the export's tokenizer and context limit, and an optional draft (an export folder,
    or ``"ngram"``) run on this PC. ``holders``: the PCs holding the stages, whose memory sets
    how much KV idle conversations may keep."""
    tokenizer = Tokenizer(tokenizer_dir_of(export_dir), core)
    draft = load_draft(draft_dir, manifest, tokenizer, config, core) if draft_dir else None
    context_limit = context_limit_of(manifest, config.context_limit)
    log.info("context: %d tokens a stream", context_limit)
    return Pipeline(
        route,
        tokenizer,
        context_limit=context_limit,
        draft=draft,
        prefill_chunk=config.prefill_chunk,
        metrics=metrics,
        resident=resident_streams(config, manifest, context_limit, holders),
        batching=config.batching,
    )


def resident_streams(
    config: LocalPipelineConfig,
    manifest: Manifest,
    context_limit: int,
    holders: Sequence[KvHolder] = (),
) -> ResidentStreams | None:
    """Where a pipeline run with ``config`` keeps finished streams (None: reuse off), with a
    budget in tokens: ``kv_budget_tokens``, or what each holder's bytes buy for its layers."""
    if not config.kv_reuse:
        return None
    budget = config.kv_budget_tokens
    if budget is None:
        element = kv_element_bytes(config.stage.precision, config.stage.kv_cache_precision)
        per_layer = kv_bytes_per_token_per_layer(manifest.config, element)
        budget = budget_tokens(holders, per_layer, budget_bytes=config.kv_budget_bytes)
    if budget is None:
        budget = DEFAULT_IDLE_CONTEXTS * context_limit
    log.info("idle conversations may keep %d tokens of KV", budget)
    return ResidentStreams(budget)
