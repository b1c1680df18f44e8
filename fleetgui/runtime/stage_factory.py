"""Compile a stage the way it runs best here: paged (several streams a pass) where its model
allows, else stateful (one stream a pass)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import openvino as ov

from fleetgui.runtime.ov_stage import LocalStage, StageConfig
from fleetgui.runtime.paged_graph import PagedGraphError, paged_attention_fits
from fleetgui.runtime.paged_stage import PagedStage
from fleetgui.shard import Shard

log = logging.getLogger(__name__)

CompiledStage = LocalStage | PagedStage  # an exported stage compiled in this process


def with_paging_of(config: StageConfig, model_config: Mapping[str, Any] | None) -> StageConfig:
    """``config`` with ``paged`` off for a model whose attention paging would change (a
    sliding window, soft-capped scores) and off the CPU, where it is not tested."""
    fits = config.device == "CPU" and paged_attention_fits(model_config)
    return config if fits or not config.paged else replace(config, paged=False)


def compile_stage(
    index: int,
    shard: Shard,
    paths: Sequence[Path],
    config: StageConfig,
    *,
    core: ov.Core | None = None,
) -> CompiledStage:
    """A :class:`PagedStage` when ``config.paged`` (see :func:`with_paging_of`) and its graph
    converts, else a :class:`LocalStage`."""
    if config.paged:
        try:
            return PagedStage(index, shard, paths, config, core=core)
        except PagedGraphError as exc:
            log.warning("stage %d runs one stream a pass: %s", index, exc)
    return LocalStage(index, shard, paths, config, core=core)
