"""What measuring the PCs' layer times gives the plan preview
(:func:`~fleetgui.fleet.profiling.layer_times.measure_devices`): device profiles to plan with,
and which layer times are still estimates and why. Kept apart from the measuring, so that the
app's interfaces can name it without loading the fleet's links and sessions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fleetgui.planner import DeviceProfile


@dataclass(frozen=True)
class MeasuredDevices:
    """Device profiles to plan with, and which layer times are estimates (``str``: what the
    plan preview says about them)."""

    profiles: tuple[DeviceProfile, ...]  # coordinator first
    estimated: Mapping[str, str] = field(default_factory=dict)  # PC name -> why not measured
    probe: str = ""  # what was timed, e.g. "stage_2-3.xml (layer 2), int4"

    def __str__(self) -> str:
        names = [p.name for p in self.profiles]
        measured = [n for n in names if n not in self.estimated]
        if not measured:
            reasons = sorted(set(self.estimated.values()))
            return f"Layer times are estimates: {'; '.join(reasons) or 'not measured'}."
        text = f"Layer times measured on {', '.join(measured)}"
        text += f" with {self.probe}" if self.probe else ""
        if not self.estimated:
            return text + "."
        guessed = "; ".join(f"{n}: {why}" for n, why in self.estimated.items())
        return f"{text}; estimated for {guessed}."


MeasureProgress = Callable[[str], None]
