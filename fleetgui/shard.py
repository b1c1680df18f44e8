"""The one value every part passes around: which layers of which model a stage holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Shard:
    """A contiguous, half-open range of decoder layers ``[start_layer, end_layer)`` of a model.

    The first shard also holds the token embedding; the last also holds the final norm and the
    lm_head. Exporter, planner, deployer and runtime all describe a stage with this value.
    """

    model_id: str  # identity of the source model (name and hash), as in the export manifest
    start_layer: int  # first decoder layer this stage runs
    end_layer: int  # one past the last decoder layer this stage runs
    n_layers: int  # decoder layers in the whole model

    def __post_init__(self) -> None:
        if not 0 <= self.start_layer < self.end_layer <= self.n_layers:
            raise ValueError(
                f"invalid layer range [{self.start_layer}, {self.end_layer}) for a model with "
                f"{self.n_layers} layers: need 0 <= start < end <= {self.n_layers}"
            )

    @property
    def is_first(self) -> bool:
        return self.start_layer == 0

    @property
    def is_last(self) -> bool:
        return self.end_layer == self.n_layers

    @property
    def n_stage_layers(self) -> int:
        return self.end_layer - self.start_layer

    def __str__(self) -> str:
        return f"layers {self.start_layer}:{self.end_layer} of {self.n_layers}"


def even_split(model_id: str, n_layers: int, n_stages: int) -> list[Shard]:
    """Split ``n_layers`` into ``n_stages`` contiguous shards whose sizes differ by at most one.

    Earlier stages get the extra layers, since the last stage also carries the lm_head.
    """
    if n_stages < 1:
        raise ValueError(f"need at least one stage, got {n_stages}")
    if n_stages > n_layers:
        raise ValueError(
            f"cannot split {n_layers} layers into {n_stages} stages: every stage needs at least "
            f"one layer; use --stages {n_layers} or fewer"
        )
    base, extra = divmod(n_layers, n_stages)
    shards: list[Shard] = []
    start = 0
    for index in range(n_stages):
        end = start + base + (1 if index < extra else 0)
        shards.append(Shard(model_id, start, end, n_layers))
        start = end
    return shards


def parse_layer_ranges(model_id: str, n_layers: int, text: str) -> list[Shard]:
    """Parse ``"0:10,10:22,22:32"`` into shards that cover ``[0, n_layers)`` exactly once."""
    shards: list[Shard] = []
    for part in text.split(","):
        pieces = part.strip().split(":")
        if len(pieces) != 2:
            raise ValueError(f"bad layer range {part!r}: write START:END, e.g. 0:10,10:22")
        try:
            start, end = int(pieces[0]), int(pieces[1])
        except ValueError:
            raise ValueError(f"bad layer range {part!r}: START and END must be integers") from None
        if start >= end:
            raise ValueError(f"empty or reversed layer range {part!r}: END must exceed START")
        if end > n_layers:
            raise ValueError(
                f"layer range {part!r} exceeds the model's {n_layers} layers (last valid END is "
                f"{n_layers})"
            )
        shards.append(Shard(model_id, start, end, n_layers))
    expected = 0
    for shard in shards:
        if shard.start_layer < expected:
            raise ValueError(
                f"layer ranges overlap at layer {shard.start_layer}: ranges must be in order and "
                f"half-open, e.g. 0:10,10:22"
            )
        if shard.start_layer > expected:
            raise ValueError(
                f"layer ranges leave layers {expected}:{shard.start_layer} unassigned: ranges must "
                f"cover every layer"
            )
        expected = shard.end_layer
    if expected != n_layers:
        raise ValueError(
            f"layer ranges stop at {expected} but the model has {n_layers} layers: add "
            f"{expected}:{n_layers}"
        )
    return shards
