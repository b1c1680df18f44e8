"""A :class:`Layout`: independent groups of PCs serving a number of users at once, chosen by
:func:`fleetgui.planner.layouts.plan_layout`; what ``fleetgui plan --users`` prints
(``str(layout)``, or :meth:`Layout.to_json_dict` with ``--json``) and the app can preview.

Each group is a :class:`~fleetgui.planner.plan.Plan`: a pipeline over its PCs, or a whole copy
when it has one PC. Groups use disjoint PCs; a group whose first PC is not the coordinator gets
token ids from the coordinator and sends tokens back (see :mod:`fleetgui.planner.groups`). A
group's plan is made for its users (``plan.streams``), so its KV caches are those users'.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleetgui.planner.groups import group_tokens_per_s, meets, user_tokens_per_s
from fleetgui.planner.plan import LeftOut, Plan, left_out_lines

log = logging.getLogger(__name__)

TABLE_ALTERNATIVES = 8  # the best alternatives the table lists; a big fleet has dozens


class LayoutKind(enum.StrEnum):
    """What a layout's groups are (:func:`kind_of`)."""

    PIPELINE = "pipeline"  # one group over several PCs
    PIPELINES = "pipelines"  # several such groups
    COPIES = "copies"  # every group is one PC
    MIXED = "mixed"  # copies beside pipelines


def kind_of(groups: Sequence[Plan]) -> LayoutKind:
    """The kind of a layout of ``groups`` (see :class:`LayoutKind`)."""
    singles = [len(g.stages) == 1 for g in groups]
    if all(singles):
        return LayoutKind.COPIES
    if len(groups) == 1:
        return LayoutKind.PIPELINE
    return LayoutKind.MIXED if any(singles) else LayoutKind.PIPELINES


def describe(groups: Sequence[Plan]) -> str:
    """A short label, e.g. ``copies: desk | laptop`` or ``pipelines: desk+a | b+c``."""
    return f"{kind_of(groups)}: " + " | ".join("+".join(g.devices) for g in groups)


def _headline(groups: Sequence[Plan]) -> str:
    kind = kind_of(groups)
    copies = sum(1 for g in groups if len(g.stages) == 1)
    pipelines = len(groups) - copies
    if kind is LayoutKind.COPIES:
        return (
            "a whole copy of the model on one PC"
            if copies == 1
            else (f"{copies} whole copies of the model, one per PC")
        )
    if kind is LayoutKind.PIPELINE:
        return f"one pipeline over {len(groups[0].stages)} PCs"
    if kind is LayoutKind.PIPELINES:
        return f"{pipelines} independent pipelines"
    return f"{copies} whole cop{'y' if copies == 1 else 'ies'} and {pipelines} pipeline(s)"


@dataclass(frozen=True)
class Alternative:
    """A layout considered and not chosen, with its figures for the same users and why."""

    description: str  # e.g. "copies: desk | laptop", or what was tried when nothing fit
    kind: LayoutKind | None  # None: it does not fit
    predicted_tokens_per_s: float | None  # aggregate for the users; None: it does not fit
    slowest_user_tokens_per_s: float | None
    reason: str  # why it lost: fewer tokens/s, below the floor, does not fit, ...

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "kind": self.kind,
            "predicted_tokens_per_s": _rounded(self.predicted_tokens_per_s),
            "slowest_user_tokens_per_s": _rounded(self.slowest_user_tokens_per_s),
            "reason": self.reason,
        }

    def line(self) -> str:
        if self.predicted_tokens_per_s is None or self.slowest_user_tokens_per_s is None:
            return f"{self.description}: {self.reason}"
        return (
            f"{self.description}: {self.predicted_tokens_per_s:.1f} tokens/s in all, "
            f"{self.slowest_user_tokens_per_s:.1f} for the slowest user: {self.reason}"
        )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class Layout:
    """Groups of PCs serving ``users`` users at once; ``users_per_group[i]`` are group i's."""

    model_id: str
    weight_format: str
    context_length: int  # tokens of KV cache per user
    coordinator: str  # the fleet's devices[0]: it routes every user's tokens
    users: int
    groups: tuple[Plan, ...]  # disjoint PCs; a group of one PC is a whole copy
    users_per_group: tuple[int, ...]  # each >= 1, summing to ``users``
    floor_tok_s: float | None = None  # the per-user floor asked for
    alternatives: tuple[Alternative, ...] = ()  # best first
    left_out: tuple[LeftOut, ...] = ()  # PCs in no group, and why

    def __post_init__(self) -> None:
        if not self.groups or len(self.users_per_group) != len(self.groups):
            raise ValueError("a layout needs at least one group, and users for each group")
        if min(self.users_per_group) < 1 or sum(self.users_per_group) != self.users:
            raise ValueError(f"every group needs users and they must add up to {self.users}")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"groups must not share a PC: {self.devices}")

    @property
    def kind(self) -> LayoutKind:
        return kind_of(self.groups)

    @property
    def description(self) -> str:
        return describe(self.groups)

    @property
    def group_tokens_per_s(self) -> tuple[float, ...]:
        """Each group's aggregate tokens/s for its users."""
        return tuple(group_tokens_per_s(g) for g in self.groups)

    @property
    def user_tokens_per_s(self) -> tuple[float, ...]:
        """What each user of each group gets."""
        return tuple(user_tokens_per_s(g) for g in self.groups)

    @property
    def predicted_tokens_per_s(self) -> float:
        """All users together."""
        return sum(self.group_tokens_per_s)

    @property
    def slowest_user_tokens_per_s(self) -> float:
        return min(self.user_tokens_per_s)

    @property
    def mean_ms_per_token(self) -> float:
        """One token's time through its group, averaged over the users (hops included)."""
        pairs = zip(self.groups, self.users_per_group, strict=True)
        return sum(g.predicted_ms_per_token * n for g, n in pairs) / self.users

    @property
    def meets_floor(self) -> bool:
        return meets(self.slowest_user_tokens_per_s, self.floor_tok_s)

    @property
    def devices(self) -> tuple[str, ...]:
        """The PCs in some group."""
        return tuple(name for g in self.groups for name in g.devices)

    def starts_at_coordinator(self, index: int) -> bool:
        """True when group ``index`` starts at the coordinator (as a single plan does); False
        when the coordinator only sends it token ids and takes its tokens back."""
        return self.groups[index].devices[0] == self.coordinator

    def to_json_dict(self) -> dict[str, Any]:
        """The ``fleetgui plan --users N --json`` document."""
        groups = []
        for index, (plan, users) in enumerate(zip(self.groups, self.users_per_group, strict=True)):
            doc = plan.to_json_dict()
            del doc["left_out"]  # the layout's own list says which PCs no group uses
            groups.append(
                {
                    "users": users,
                    "starts_at_coordinator": self.starts_at_coordinator(index),
                    **doc,
                    "user_tokens_per_s": round(self.user_tokens_per_s[index], 4),
                    "bottleneck_ms": round(plan.bottleneck_ms, 4),
                }
            )
        return {
            "users": self.users,
            "floor_tokens_per_s": self.floor_tok_s,
            "kind": self.kind,
            "description": self.description,
            "predicted_tokens_per_s": round(self.predicted_tokens_per_s, 4),
            "slowest_user_tokens_per_s": round(self.slowest_user_tokens_per_s, 4),
            "meets_floor": self.meets_floor,
            "groups": groups,
            "left_out": [{"name": x.device, "reason": x.reason} for x in self.left_out],
            "alternatives": [a.to_json_dict() for a in self.alternatives],
        }

    def table_lines(self) -> list[str]:
        """The chosen layout, each group's PCs and layers, and why the alternatives lost."""
        lines = [
            f"Layout for {self.model_id} ({self.weight_format} weights, {self.context_length} "
            f"tokens of context) for {self.users} user(s): {_headline(self.groups)}"
        ]
        for index, (plan, users) in enumerate(zip(self.groups, self.users_per_group, strict=True)):
            what = "copy on" if len(plan.stages) == 1 else "pipeline"
            via = "" if self.starts_at_coordinator(index) else f", tokens via {self.coordinator}"
            lines.append(
                f"Group {index + 1}: {what} {' -> '.join(plan.devices)}{via}; {users} user(s): "
                f"{self.group_tokens_per_s[index]:.1f} tokens/s, "
                f"{self.user_tokens_per_s[index]:.1f} per user "
                f"({plan.predicted_ms_per_token:.2f} ms/token)"
            )
            lines.extend(plan.stage_lines(indent="    "))
        floor = ""
        if self.floor_tok_s is not None:
            met = "met" if self.meets_floor else "not met by any layout"
            floor = f" (floor {self.floor_tok_s:g} tokens/s: {met})"
        lines.append(
            f"Predicted: {self.predicted_tokens_per_s:.1f} tokens/s in all for {self.users} "
            f"user(s), {self.slowest_user_tokens_per_s:.1f} tokens/s for the slowest user{floor}"
        )
        if self.alternatives:
            lines.append(f"Why: the alternatives for {self.users} user(s):")
            shown = self.alternatives[:TABLE_ALTERNATIVES]
            lines.extend(f"  {a.line()}" for a in shown)
            if len(self.alternatives) > len(shown):
                more = len(self.alternatives) - len(shown)
                lines.append(f"  ... and {more} more (all of them in the JSON document)")
        return lines + left_out_lines(self.left_out)

    def __str__(self) -> str:
        return "\n".join(self.table_lines())
