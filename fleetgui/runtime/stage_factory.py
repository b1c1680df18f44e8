"""Compile a stage the way it runs best here: paged (several streams a pass) where its model
allows, else stateful (one stream a pass)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import openvino as ov

from fleetgui.runtime.ov_stage import LocalStage, StageConfig
from fleetgui.runtime.paged_graph import PagedGraphError, paged_attention_fits
from fleetgui.runtime.paged_stage import PagedStage
from fleetgui.runtime.stage import ForwardRequest, StageError
from fleetgui.shard import Shard

log = logging.getLogger(__name__)

CompiledStage = LocalStage | PagedStage  # an exported stage compiled in this process

# The plugin sets up its kernels and scratch memory on a compiled model's first passes: cold,
# a 155-token prompt took 2.4x (2.9x on a first stage) its warm time and a first decode step 2x
# on the demo stages. A prompt chunk of the pipeline's default size, then two steps, at compile
# time puts that cost on deployment instead of on the first user's first answer.
WARM_UP_POSITIONS = 256
WARM_UP_STREAM = -1  # never a pipeline's stream id (those count up from 0)
_S = TypeVar("_S", LocalStage, PagedStage)


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
            return warm_up(PagedStage(index, shard, paths, config, core=core))
        except PagedGraphError as exc:
            log.warning("stage %d runs one stream a pass: %s", index, exc)
    return warm_up(LocalStage(index, shard, paths, config, core=core))


def warm_up(stage: _S, positions: int = WARM_UP_POSITIONS) -> _S:
    """``stage`` after a throwaway stream's prompt chunk of ``positions`` and two decode steps
    (blocking; nothing of it is kept), so a first request runs at the warm speed."""
    width = stage.hidden_width
    if not stage.is_first and width is None:
        log.debug("stage %d: hidden width unknown, not warmed up", stage.index)
        return stage
    started = time.perf_counter()
    try:
        for n in (positions, 1, 1):
            if stage.is_first:
                payload = np.zeros((1, n), np.int64)
            else:
                payload = np.zeros((1, n, width or 0), np.float32)  # width: checked above
            stage.forward_blocking(ForwardRequest(WARM_UP_STREAM, payload))
    except StageError as exc:  # only a first answer's speed is at stake
        log.warning("stage %d: warm-up failed, its first pass will be slower: %s", stage.index, exc)
        return stage
    finally:
        stage.release_blocking(WARM_UP_STREAM)
    log.info("stage %d warmed up in %.2f s", stage.index, time.perf_counter() - started)
    return stage
