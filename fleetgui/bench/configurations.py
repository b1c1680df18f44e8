"""What ``fleetgui bench`` measures: one :class:`Configuration` per mode, streams, K and drafter.

The list follows the paper's tables: the monolithic baseline on this PC, PP, PP+MB, PP+SD at
each K (and K auto) with each drafter, the full stack PP+SD+MB, TTFT per prompt length, and PP
over a hub instead of the ring at one delay. Pure data: no OpenVINO, no sockets.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.modes import Mode


class Measurement(StrEnum):
    """What a configuration measures that is not a decoding mode of the fleet."""

    MONOLITHIC = "monolithic"  # openvino_genai.LLMPipeline on this PC: no fleet, no network
    TTFT = "ttft"  # PP, one new token: the time to the first token of a prompt of a given length


K_VALUES: tuple[int | Literal["auto"], ...] = (1, 3, 5, 7, 10, "auto")
#: What ``--modes`` names: a measurement or a decoding mode, or ``hub`` for PP over a hub (the
#: ring's comparison); in the order a run measures them.
KINDS: tuple[str, ...] = (
    Measurement.MONOLITHIC.value,
    *(m.value for m in Mode),
    Measurement.TTFT.value,
    "hub",
)
MB_STREAMS: tuple[int, ...] = (2, 3)
TTFT_LENGTHS: tuple[int, ...] = (16, 128, 512)


@dataclass(frozen=True)
class Configuration:
    """One thing to measure at each delay (or once, for the monolithic baseline)."""

    mode: Mode | Measurement
    streams: int = 1
    k: int | Literal["auto"] = "auto"  # speculative modes: a fixed K, or K auto
    draft: str | None = None  # speculative modes: the drafter's label (``ngram`` or a folder name)
    topology: Wiring = Wiring.RING
    prompt_tokens: int | None = None  # TTFT: the prompt's length in tokens
    at_delay: float | None = None  # measured at this delay only (the hub's comparison)

    @property
    def speculative(self) -> bool:
        return isinstance(self.mode, Mode) and self.mode.speculative

    @property
    def per_delay(self) -> bool:
        """Whether it runs on the fleet at each delay (the monolithic baseline runs once)."""
        return self.mode != Measurement.MONOLITHIC

    @property
    def k_text(self) -> str:
        return str(self.k)

    @property
    def key(self) -> str:
        """A stable identifier, e.g. ``pp+sd/k5/ngram`` or ``pp+mb/2``."""
        parts = [self.mode.value]
        if self.mode in (Mode.PP_MB, Mode.PP_SD_MB):
            parts.append(str(self.streams))
        if self.speculative:
            parts += [f"k{self.k_text}", str(self.draft)]
        if self.mode == Measurement.TTFT:
            parts.append(str(self.prompt_tokens))
        if self.topology is not Wiring.RING:
            parts.append(self.topology)
        return "/".join(parts)

    @property
    def label(self) -> str:
        """How tables and plots name it."""
        draft = "" if self.draft is None else f" ({draft_name(self.draft)})"
        match self.mode:
            case Measurement.MONOLITHIC:
                return "monolithic (openvino_genai, 1 core)"
            case Mode.PP:
                return "PP" if self.topology is Wiring.RING else f"PP, {self.topology}"
            case Mode.PP_MB:
                return f"PP+MB, {self.streams} streams"
            case Mode.PP_SD:
                return f"PP+SD K={self.k_text}{draft}"
            case Mode.PP_SD_MB:
                return f"PP+SD+MB, {self.streams} streams, K={self.k_text}{draft}"
            case Measurement.TTFT:
                return f"TTFT, {self.prompt_tokens}-token prompt"
        raise AssertionError(self.mode)

    @property
    def kind(self) -> str:
        """What ``--modes`` calls it: its mode, or ``hub`` for PP over a hub."""
        return "hub" if self.topology is Wiring.HUB else self.mode.value

    def runs_at(self, delay_ms: float) -> bool:
        return self.per_delay and (self.at_delay is None or self.at_delay == delay_ms)


def draft_name(draft: str) -> str:
    return "n-gram" if draft == "ngram" else draft


def build_configurations(
    drafts: Sequence[str],
    *,
    baseline: bool,
    hub_delay: float | None,
    ks: Sequence[int | Literal["auto"]] = K_VALUES,
    mb_streams: Sequence[int] = MB_STREAMS,
    ttft_lengths: Sequence[int] = TTFT_LENGTHS,
    kinds: Collection[str] = KINDS,
) -> list[Configuration]:
    """Every configuration of a run, in a fixed order. ``drafts``: drafter labels, the given
    one first (the full stack uses it); ``hub_delay``: where PP over a hub is compared with the
    ring (None: not compared, e.g. a fleet of one worker, where the two are the same);
    ``kinds``: the :data:`KINDS` to measure (the rest left out)."""
    if not drafts:
        raise ValueError("a benchmark needs at least one drafter")
    out: list[Configuration] = []
    if baseline:
        out.append(Configuration(Measurement.MONOLITHIC))
    out.append(Configuration(Mode.PP))
    out += [Configuration(Mode.PP_MB, streams=s) for s in mb_streams]
    out += [Configuration(Mode.PP_SD, k=k, draft=d) for d in drafts for k in ks]
    out += [Configuration(Mode.PP_SD_MB, streams=s, draft=drafts[0]) for s in mb_streams]
    out += [Configuration(Measurement.TTFT, prompt_tokens=n) for n in ttft_lengths]
    if hub_delay is not None:
        out.append(Configuration(Mode.PP, topology=Wiring.HUB, at_delay=hub_delay))
    return [c for c in out if c.kind in kinds]


def full_stack(configurations: Sequence[Configuration]) -> Configuration | None:
    """The paper's full stack: PP+SD+MB at K auto with the given drafter, 2 streams (the
    paper's operating point) if measured, else the fewest streams measured."""
    stacks = [c for c in configurations if c.mode == Mode.PP_SD_MB]
    return min(stacks, key=lambda c: (c.streams != 2, c.streams), default=None)
