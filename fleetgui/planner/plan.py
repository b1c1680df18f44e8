"""The planner's configuration and its result: a :class:`Plan`, which is also the preview the app
shows (``str(plan)`` or :meth:`Plan.table_lines`) and what ``fleetgui plan --json`` prints."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from fleetgui.shard import Shard

log = logging.getLogger(__name__)

OBJECTIVES = ("latency", "throughput")
GB = 1e9


@dataclass(frozen=True)
class PlanConfig:
    """How to plan; the model profile says what to plan for (weights, context, streams)."""

    objective: str = "latency"  # "latency": one user's time per token; "throughput": tokens/s
    headroom_bytes: int = 2_000_000_000  # memory left free on every PC so it stays usable
    runtime_bytes: int = 256 * 1024 * 1024  # OpenVINO runtime and buffers of one stage process
    exact_limit: int = 16  # fleets up to this many devices are solved exactly (MILP)
    time_limit_s: float = 30.0  # MILP time limit (a 16-device fleet takes well under a second)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}: choose one of {OBJECTIVES}")
        if self.headroom_bytes < 0 or self.runtime_bytes < 0:
            raise ValueError("headroom_bytes and runtime_bytes must not be negative")


@dataclass(frozen=True)
class StageAssignment:
    """One device of the ring and what it runs."""

    device: str  # DeviceProfile.name
    shard: Shard  # the half-open layer range it holds
    memory_bytes: int  # predicted memory use: weights, KV cache, embedding/lm_head, runtime
    compute_ms: float  # predicted compute per token: its layers (and the lm_head if last)
    hop_in_ms: float  # hop delivering the activations to it (0 for the coordinator)
    hop_out_ms: float  # return hop to the coordinator if it is the last device, else 0
    load_s: float  # predicted time to read its weights from disk
    # continuous batching: one stream's KV at the plan's context on these layers, and the most
    # streams whose KV the device holds beside the weights (0: not computed)
    stream_kv_bytes: int = 0
    max_streams: int = 0

    @property
    def predicted_ms(self) -> float:
        """Its share of one token's time; the shares of a plan add up to its ms per token."""
        return self.compute_ms + self.hop_in_ms + self.hop_out_ms


@dataclass(frozen=True)
class LeftOut:
    """A device the plan does not use, and why."""

    device: str
    reason: str


def left_out_lines(left_out: tuple[LeftOut, ...]) -> list[str]:
    """The preview's lines naming the PCs a plan or layout leaves out, and why."""
    if not left_out:
        return []
    return ["Left out:", *(f"  {x.device}: {x.reason}" for x in left_out)]


@dataclass(frozen=True)
class Plan:
    """Devices in ring order (coordinator first), each with its contiguous layer range."""

    model_id: str
    weight_format: str
    objective: str
    streams: int
    context_length: int
    stages: tuple[StageAssignment, ...]
    left_out: tuple[LeftOut, ...]
    predicted_ms_per_token: float  # one token of one user through the whole ring
    bottleneck_ms: float  # the slowest stage or link: caps the aggregate rate of many streams
    overcommitted: tuple[str, ...] = ()  # devices whose memory the plan exceeds (baselines only)
    solver: str = ""  # "milp", "heuristic", "single", or a baseline's name

    @property
    def predicted_tokens_per_s(self) -> float:
        """Aggregate tokens/s of ``streams`` streams: min(S / T_token, 1 / bottleneck)."""
        if self.predicted_ms_per_token <= 0:
            return math.inf
        per_ms = min(self.streams / self.predicted_ms_per_token, 1.0 / self.bottleneck_ms)
        return 1000.0 * per_ms

    @property
    def fits(self) -> bool:
        return not self.overcommitted

    @property
    def score(self) -> float:
        """What the objective minimises: ms per token, or ms per aggregate token."""
        if self.objective == "throughput":
            return 1000.0 / self.predicted_tokens_per_s
        return self.predicted_ms_per_token

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(stage.device for stage in self.stages)

    @property
    def layer_counts(self) -> tuple[int, ...]:
        return tuple(stage.shard.n_stage_layers for stage in self.stages)

    @property
    def layers_arg(self) -> str:
        """The plan's layer ranges as ``fleetgui export --layers`` takes them, e.g.
        ``"0:9,9:16"``: exporting with it gives one stage per device, in ring order."""
        return ",".join(f"{s.shard.start_layer}:{s.shard.end_layer}" for s in self.stages)

    def shard_of(self, device: str) -> Shard | None:
        return next((s.shard for s in self.stages if s.device == device), None)

    @property
    def max_streams(self) -> int:
        """The most streams every stage can hold the KV of at the plan's context: how many
        users one pass may carry (0: not computed)."""
        return min((s.max_streams for s in self.stages), default=0)

    def batch_lines(self, indent: str = "  ") -> list[str]:
        """What several streams in one pass cost each stage, and how many it holds."""
        if not any(s.stream_kv_bytes for s in self.stages):
            return []
        lines = [f"Streams in one pass (KV at {self.context_length:,} tokens each):"]
        for s in self.stages:
            lines.append(
                f"{indent}{s.device}: {s.stream_kv_bytes / GB:.3f} GB a stream, "
                f"{self.streams * s.stream_kv_bytes / GB:.2f} GB for {self.streams}; "
                f"holds up to {s.max_streams}"
            )
        lines.append(f"{indent}largest batch: {self.max_streams} stream(s)")
        return lines

    def same_layout(self, other: Plan) -> bool:
        """True when both plans put the same layers on the same devices in the same order."""
        return [(s.device, s.shard) for s in self.stages] == [
            (s.device, s.shard) for s in other.stages
        ]

    def to_json_dict(self) -> dict[str, Any]:
        """The ``fleetgui plan --json`` document."""
        return {
            "devices": [
                {
                    "name": s.device,
                    "start_layer": s.shard.start_layer,
                    "end_layer": s.shard.end_layer,
                    "memory_bytes": s.memory_bytes,
                    "predicted_ms": round(s.predicted_ms, 4),
                    "stream_kv_bytes": s.stream_kv_bytes,
                    "max_streams": s.max_streams,
                }
                for s in self.stages
            ],
            "left_out": [{"name": x.device, "reason": x.reason} for x in self.left_out],
            "predicted_ms_per_token": round(self.predicted_ms_per_token, 4),
            "predicted_tokens_per_s": round(self.predicted_tokens_per_s, 4),
            "max_streams": self.max_streams,
        }

    def stage_lines(self, indent: str = "  ") -> list[str]:
        """The table's header and one row per stage: device, layers, memory, compute, hops."""
        lines = [
            f"{indent}{'#':>2}  {'device':<20} {'layers':>9} {'memory':>9} {'compute':>10} "
            f"{'hops':>9} {'load':>7}"
        ]
        for index, s in enumerate(self.stages):
            layers = f"{s.shard.start_layer}:{s.shard.end_layer}"
            hops = s.hop_in_ms + s.hop_out_ms
            lines.append(
                f"{indent}{index:>2}  {s.device:<20} {layers:>9} {s.memory_bytes / GB:>6.2f} GB "
                f"{s.compute_ms:>7.2f} ms {hops:>6.2f} ms {s.load_s:>5.1f} s"
            )
        return lines

    def table_lines(self) -> list[str]:
        """A readable table: which PC gets which layers, memory, time, who was left out."""
        lines = [
            f"Plan for {self.model_id} ({self.weight_format} weights, {self.context_length} "
            f"tokens x {self.streams} stream(s), objective: {self.objective})",
            *self.stage_lines(),
        ]
        lines.append(
            f"Predicted: {self.predicted_ms_per_token:.2f} ms/token for one user, "
            f"{self.predicted_tokens_per_s:.1f} tokens/s with {self.streams} stream(s) "
            f"(bottleneck {self.bottleneck_ms:.2f} ms)"
        )
        if self.overcommitted:
            lines.append(f"Does not fit in memory on: {', '.join(self.overcommitted)}")
        return lines + self.batch_lines() + left_out_lines(self.left_out)

    def __str__(self) -> str:
        return "\n".join(self.table_lines())
