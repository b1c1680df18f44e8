"""The error that ends a generation when the workers left cannot run every stage.

Running an incomplete ring would give wrong text; instead the user is told who was lost, which
stages have no place, how much memory they need against what is free, and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetgui.errors import FleetguiError
from fleetgui.fleet.placement.assignment import (
    StageToPlace,
    UnplacedStagesError,
    need_bytes,
    size_text,
    stages_text,
)


class FleetTooSmallError(FleetguiError):
    """Workers were lost and what is left cannot run every stage: the generation ends here
    rather than run an incomplete ring. The message names who was lost, which stages have no
    place and what to do."""

    def __init__(self, message: str, lost: Sequence[str], stages: Sequence[int]) -> None:
        super().__init__(message)
        self.lost = tuple(lost)  # every worker of the session that is lost now, in ring order
        self.stages = tuple(stages)  # the stages nobody left can run


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def fleet_too_small(
    units: Sequence[StageToPlace],
    gone: Sequence[str],
    left: Sequence[str],
    exc: UnplacedStagesError,
    local_failover: bool,
) -> FleetTooSmallError:
    """The error for ``exc`` (stages nobody could take) with workers ``gone`` lost and ``left``
    still there; ``local_failover``: whether this PC may take stages."""
    unplaced, free = exc.stages, exc.free_bytes
    need = need_bytes(units, unplaced)
    if not left:
        room = "no worker is left"
    elif len(left) == 1:
        room = f"worker {left[0]} has {size_text(max(0, free.get(left[0], 0)))} free"
    else:
        best = max(left, key=lambda n: free.get(n, 0))
        room = (
            f"the most any of workers {_and(left)} has free is "
            f"{size_text(max(0, free.get(best, 0)))}"
        )
    if not local_failover:
        room += ", and this PC is set not to take them (--no-local-failover)"
    elif exc.coordinator_free_bytes is not None:
        room += f", and this PC has {size_text(max(0, exc.coordinator_free_bytes))} free"
    workers = "worker" if len(gone) == 1 else "workers"
    verb = "was" if len(gone) == 1 else "were"
    message = (
        f"{workers} {_and(gone)} {verb} lost, and what is left cannot run "
        f"{stages_text(units, unplaced)}, which need {size_text(need)}: {room}. "
        f"Restart {_and(gone)} or add a worker, then try again."
    )
    return FleetTooSmallError(message, gone, unplaced)
