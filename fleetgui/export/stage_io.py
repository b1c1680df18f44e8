"""The names of an exported stage's inputs, outputs and KV states, and a guard that keeps
openvino-telemetry quiet during conversions: what the exporter needs without importing torch
(``fleetgui demo`` checks an up-to-date export in well under a second instead of paying torch's
import, 2-3 s here)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from fleetgui.export.stateful import BEAM_IDX
from fleetgui.shard import Shard

_TELEMETRY_METHODS = (
    "send_event",
    "send_error",
    "send_stack_trace",
    "start_session",
    "end_session",
)


@contextmanager
def quiet_openvino_telemetry() -> Iterator[None]:
    """Silence openvino-telemetry while converting, unless ``FLEETGUI_OV_TELEMETRY=1``.

    Without an opt-out consent file, ``ov.convert_model`` sends telemetry events, and on Linux
    each one forks the whole (torch-laden, possibly many-GB) Python process to try an HTTP
    request: 47 forks for one tiny stage here. Measured on 2 cores: 4 tiny stage conversions took
    39 s wall and 12 s of child CPU with it, 9-11 s and none without. Undone on exit.
    """
    if os.environ.get("FLEETGUI_OV_TELEMETRY") == "1":
        yield
        return
    try:
        from openvino_telemetry import Telemetry
    except ImportError:
        yield
        return
    saved = {
        name: Telemetry.__dict__[name] for name in _TELEMETRY_METHODS if name in Telemetry.__dict__
    }

    def _noop(*args: object, **kwargs: object) -> None:
        return None

    for name in saved:
        setattr(Telemetry, name, _noop)
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(Telemetry, name, method)


@dataclass(frozen=True, slots=True)
class StageIO:
    """The names a runtime needs to drive an exported stage."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    states: tuple[str, ...]


def past_name(layer: int, kind: str) -> str:
    """Name of the past-KV input (and of its state variable) of global layer ``layer``."""
    return f"past_key_values.{layer}.{kind}"


def present_name(layer: int, kind: str) -> str:
    """Name of the present-KV output of global layer ``layer`` before it becomes state."""
    return f"present.{layer}.{kind}"


def stage_io_names(shard: Shard, *, beam_idx_gather: bool = True) -> StageIO:
    """The input, output and state names ``export_stage`` gives ``shard``'s IR."""
    main = "input_ids" if shard.is_first else "hidden_in"
    inputs = (main, "attention_mask", "position_ids") + ((BEAM_IDX,) if beam_idx_gather else ())
    outputs = ("logits", "top1_ids", "top1_probs") if shard.is_last else ("hidden_out",)
    states = tuple(
        past_name(layer, kind)
        for layer in range(shard.start_layer, shard.end_layer)
        for kind in ("key", "value")
    )
    return StageIO(inputs, outputs, states)
