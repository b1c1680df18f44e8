"""Which worker runs which exported stages: pure functions over plain data.

The export fixes the stage boundaries; a worker runs one or more consecutive stages, and the
ring visits workers in order. The coordinator runs the first stage(s).

* :func:`initial_assignment` spreads the remote stages over the workers in the order given
  (``--workers A,B``), balancing layers; workers beyond the number of stages are spares.
* :func:`assignment_from_plan` deploys a planner's plan over the export's fixed stages.
* :func:`failover_assignment` moves a lost worker's stages with as little reloading as
  possible: to a spare that has the memory, else to a neighbour that has it, else to the
  coordinator; if nobody has the memory it says which layers have nowhere to go and how much
  memory is missing. :func:`failover_all` does it for several workers lost at once.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest
from fleetgui.planner.fixed_stages import stage_groups
from fleetgui.planner.plan import Plan
from fleetgui.shard import Shard

MEMORY_OVERHEAD = 1.25  # compiled stage + KV + activations, relative to its weight files
GB = 1e9


class AssignmentError(FleetguiError):
    """The stages cannot be placed on the fleet; the message says what is missing."""


@dataclass(frozen=True, slots=True)
class StageToPlace:
    """An exported stage as the assignment places it: its index in the export, its layers and
    the size of its files (what a PC needs free to run it: :attr:`need_bytes`)."""

    index: int
    shard: Shard
    weight_bytes: int

    @property
    def need_bytes(self) -> int:
        return int(self.weight_bytes * MEMORY_OVERHEAD)

    @classmethod
    def of_manifest(cls, manifest: Manifest) -> list[StageToPlace]:
        """Every stage of an export, in order."""
        stages = zip(manifest.stages, manifest.shards, strict=True)
        return [cls(s.index, shard, sum(f.size for f in s.files)) for s, shard in stages]


@dataclass(frozen=True, slots=True)
class Member:
    """A worker in the ring and the stages it runs (consecutive indices)."""

    name: str
    indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """Stages per participant: the coordinator's, then the ring's workers in order."""

    local: tuple[int, ...]
    members: tuple[Member, ...]
    spares: tuple[str, ...] = ()

    def indices_of(self, name: str) -> tuple[int, ...]:
        for member in self.members:
            if member.name == name:
                return member.indices
        return ()

    def with_spare(self, name: str) -> Assignment:
        """This layout with ``name`` a spare too (unless it runs stages or is one already)."""
        if name in self.spares or any(m.name == name for m in self.members):
            return self
        return Assignment(self.local, self.members, (*self.spares, name))

    def check(self, n_stages: int, connected: Collection[str], source: object) -> None:
        """Raise unless this layout runs each of ``source``'s ``n_stages`` stages once, in ring
        order, on ``connected`` workers: after a double failure one that lacked the lost stage
        ran stage 0 straight into stage 2 and printed garbage."""
        indices = [*self.local, *(i for m in self.members for i in m.indices)]
        if indices != list(range(n_stages)) or any(not m.indices for m in self.members):
            raise FleetguiError(
                f"the assignment runs stages {indices}, but {source} has {n_stages}: "
                "each must run once, in order"
            )
        unknown = [m.name for m in self.members if m.name not in connected]
        if unknown:
            raise FleetguiError(
                f"the assignment uses {', '.join(unknown)}, which this session is not connected "
                "to: connect them first"
            )


def _layers(units: Sequence[StageToPlace], indices: Sequence[int]) -> int:
    by_index = {u.index: u for u in units}
    return sum(by_index[i].shard.n_stage_layers for i in indices)


def _bytes(units: Sequence[StageToPlace], indices: Sequence[int]) -> int:
    by_index = {u.index: u for u in units}
    return sum(by_index[i].need_bytes for i in indices)


def _layer_text(units: Sequence[StageToPlace], indices: Sequence[int]) -> str:
    by_index = {u.index: u for u in units}
    first, last = by_index[indices[0]].shard, by_index[indices[-1]].shard
    return f"layers {first.start_layer}-{last.end_layer - 1}"


def need_bytes(units: Sequence[StageToPlace], indices: Sequence[int]) -> int:
    """Memory a PC needs to run the stages ``indices`` (weights plus overhead)."""
    return _bytes(units, indices)


def stages_text(units: Sequence[StageToPlace], indices: Sequence[int]) -> str:
    """How a message names stages: ``stage 2 (layers 4-5)``, ``stages 1-2 (layers 2-5)``;
    ``stages 1, 3 (...)`` when they are not consecutive."""
    ordered = sorted(indices)
    if len(ordered) == 1:
        numbers = f"stage {ordered[0]}"
    elif ordered == list(range(ordered[0], ordered[-1] + 1)):
        numbers = f"stages {ordered[0]}-{ordered[-1]}"
    else:
        numbers = "stages " + ", ".join(str(i) for i in ordered)
    by_index = {u.index: u for u in units}
    shards = [by_index[i].shard for i in ordered]
    layers = sorted(layer for s in shards for layer in range(s.start_layer, s.end_layer))
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"{numbers} (layers {layers[0]}-{layers[-1]})"
    return numbers


def size_text(n_bytes: int) -> str:
    """``1.25 GB``, or ``3.2 MB`` below a tenth of a GB (a tiny stage is not ``0.00 GB``)."""
    if n_bytes >= GB / 10:
        return f"{n_bytes / GB:.2f} GB"
    return f"{n_bytes / 1e6:.1f} MB"


def initial_assignment(
    units: Sequence[StageToPlace], workers: Sequence[str], *, local_stages: int = 1
) -> Assignment:
    """Stage 0 (``local_stages`` of them) on the coordinator, the rest split over ``workers``
    in order, as evenly by layers as contiguous groups allow."""
    if not 0 <= local_stages <= len(units):
        raise AssignmentError(f"the coordinator cannot run {local_stages} of {len(units)} stages")
    remote = [u.index for u in units[local_stages:]]
    if remote and not workers:
        raise AssignmentError(
            f"{len(remote)} stage(s) need a worker: give --workers, or export with --stages 1"
        )
    used = min(len(workers), len(remote))
    groups = _even_groups(units, remote, used)
    members = tuple(Member(w, tuple(g)) for w, g in zip(workers, groups, strict=False))
    return Assignment(tuple(range(local_stages)), members, tuple(workers[used:]))


def _even_groups(units: Sequence[StageToPlace], indices: list[int], parts: int) -> list[list[int]]:
    """``indices`` cut into ``parts`` contiguous non-empty groups minimising the largest
    group's layer count (exact, by dynamic programming)."""
    if parts == 0:
        return []
    n = len(indices)
    sizes = [_layers(units, [i]) for i in indices]
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for p in range(1, parts + 1):
        for end in range(p, n + 1):
            for start in range(p - 1, end):
                cost = max(best[p - 1][start], prefix[end] - prefix[start])
                if cost < best[p][end]:
                    best[p][end], cut[p][end] = cost, start
    groups: list[list[int]] = []
    end = n
    for p in range(parts, 0, -1):
        start = cut[p][end]
        groups.append(indices[start:end])
        end = start
    return groups[::-1]


def failover_assignment(
    current: Assignment,
    units: Sequence[StageToPlace],
    lost: str,
    free_bytes: dict[str, int],
    *,
    coordinator_free_bytes: int = 0,
) -> Assignment:
    """A new assignment without ``lost`` (see module doc). ``free_bytes`` is each live worker's
    available memory (spares included); a member's own stages are already counted in it."""
    position = next((i for i, m in enumerate(current.members) if m.name == lost), None)
    if position is None:  # a spare was lost: nothing to move
        return Assignment(
            current.local, current.members, tuple(s for s in current.spares if s != lost)
        )
    moving = current.members[position].indices
    need = _bytes(units, moving)
    others = [m for m in current.members if m.name != lost]
    spares = [s for s in current.spares if s != lost]
    for spare in spares:
        if free_bytes.get(spare, 0) >= need:
            members = list(current.members)
            members[position] = Member(spare, moving)
            return Assignment(current.local, tuple(members), tuple(s for s in spares if s != spare))
    candidates: list[tuple[int, int]] = []  # (-free, member position) for neighbours that fit
    for neighbour in (position - 1, position + 1):
        if 0 <= neighbour < len(current.members):
            name = current.members[neighbour].name
            if free_bytes.get(name, 0) >= need:
                candidates.append((-free_bytes[name], neighbour))
    if candidates:
        _, chosen = min(candidates)
        members = list(current.members)
        merged = tuple(sorted(members[chosen].indices + moving))
        members[chosen] = Member(members[chosen].name, merged)
        del members[position]
        return Assignment(current.local, tuple(members), tuple(spares))
    if position == 0 and coordinator_free_bytes >= need:
        return Assignment(tuple(sorted(current.local + moving)), tuple(others), tuple(spares))
    best_free = max([free_bytes.get(m.name, 0) for m in others] + [0])
    raise AssignmentError(
        f"{_layer_text(units, moving)} of worker {lost!r} have nowhere to go: they need "
        f"{need / GB:.2f} GB and the most any remaining PC has free is {best_free / GB:.2f} GB "
        f"({(need - best_free) / GB:.2f} GB missing). Add a PC, or export with smaller weights "
        "(--weights int4)."
    )


class UnplacedStagesError(AssignmentError):
    """:func:`failover_all` found no place for ``stages``; ``free_bytes`` is what each live
    worker had left for them, ``coordinator_free_bytes`` what the coordinator had (None: it
    could not take them, as they do not follow its own)."""

    def __init__(
        self,
        message: str,
        stages: Sequence[int],
        free_bytes: dict[str, int],
        coordinator_free_bytes: int | None,
    ) -> None:
        super().__init__(message)
        self.stages = tuple(sorted(stages))
        self.free_bytes = dict(free_bytes)
        self.coordinator_free_bytes = coordinator_free_bytes


def failover_all(
    current: Assignment,
    units: Sequence[StageToPlace],
    lost: Sequence[str],
    free_bytes: dict[str, int],
    *,
    coordinator_free_bytes: int = 0,
) -> Assignment:
    """``current`` without every worker in ``lost`` (in that order, each as by
    :func:`failover_assignment`). Whoever takes stages has that much less memory for the next
    lost worker's, so two losses at once cannot both be given the same free memory. Raises
    :class:`UnplacedStagesError` with the stages that have nowhere to go: the first that found
    no place and those of every lost worker after it."""
    free = dict(free_bytes)
    here = coordinator_free_bytes
    for position, name in enumerate(lost):
        moving = current.indices_of(name)
        try:
            after = failover_assignment(current, units, name, free, coordinator_free_bytes=here)
        except AssignmentError as exc:
            unplaced = [*moving, *(i for n in lost[position + 1 :] for i in current.indices_of(n))]
            eligible = bool(current.members) and current.members[0].name == name
            raise UnplacedStagesError(str(exc), unplaced, free, here if eligible else None) from exc
        need = _bytes(units, moving)
        for member in after.members:
            if len(member.indices) > len(current.indices_of(member.name)):
                free[member.name] = free.get(member.name, 0) - need
        if len(after.local) > len(current.local):
            here -= need
        current = after
    return current


def assignment_from_plan(
    plan: Plan, stages: Sequence[Shard], usable: Sequence[str], *, coordinator: str
) -> Assignment:
    """The assignment that deploys ``plan`` on an export with ``stages`` (their shards, in
    order): the ``coordinator`` (the plan's first device) runs the first group of stages, each
    further device its group, in ring order; the other ``usable`` workers are spares. Raises
    ``FleetguiError`` when the plan does not fit the export's stages or names a PC that cannot be
    used now."""
    groups = stage_groups(plan, stages)
    (first, local), rest = groups[0], groups[1:]
    if first != coordinator:
        raise FleetguiError(
            f"the plan starts on {first}, not on this PC ({coordinator}): preview the plan again"
        )
    missing = [name for name, _ in rest if name not in usable]
    if missing:
        raise FleetguiError(
            f"the plan puts stages on {', '.join(missing)}, which cannot be used now: "
            "preview the plan again"
        )
    members = tuple(Member(name, indices) for name, indices in rest)
    used = {m.name for m in members}
    return Assignment(local, members, tuple(n for n in usable if n not in used))
