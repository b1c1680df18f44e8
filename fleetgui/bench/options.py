"""``fleetgui bench``'s flags, parsed and checked before any model is fetched or any worker
started: each bad value or combination is one clear error."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fleetgui.bench.configurations import KINDS
from fleetgui.errors import FleetguiError
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import NGRAM, DraftSource, parse_draft

DEFAULT_DELAYS = "0,25,50,100"
DEFAULT_KS = "1,3,5,7,10,auto"
DEFAULT_WORKERS = 2
DEFAULT_MODES = ",".join(KINDS)
MAX_DELAY_MS = 10_000.0
MAX_LOCAL_WORKERS = 16
MAX_TOKENS = 4096
NETWORKS = ("auto", "netem", "packets", "proxy")  # --network: fleetgui.bench.links's methods


@dataclass(frozen=True)
class BenchOptions:
    """A checked ``fleetgui bench`` command line."""

    export_dir: Path | None  # None: the demo model
    local_workers: int  # workers started on this PC (0 with remote workers)
    remote_workers: tuple[tuple[str, int], ...]  # the user's own workers (HOST, PORT)
    draft: DraftSource  # the given drafter (ngram when none was given)
    tokens: int
    repeats: int
    delays: tuple[float, ...]
    ks: tuple[int | Literal["auto"], ...]
    modes: tuple[str, ...]  # the configurations' kinds to measure (configurations.KINDS)
    no_ngram: bool  # with a draft model: leave out the n-gram drafts beside it
    json_out: Path | None
    plot_out: Path | None
    markdown_out: Path | None
    baseline: Path | None  # a monolithic export to run genai on
    no_baseline: bool
    rate_mbit: float
    loss_pct: float
    network: str  # auto | netem | packets | proxy
    pin: bool

    @property
    def local(self) -> bool:
        return not self.remote_workers

    @property
    def n_workers(self) -> int:
        return self.local_workers or len(self.remote_workers)

    @property
    def drafts(self) -> list[DraftSource]:
        """The given drafter, then n-gram (the paper's tables compare both) unless given or
        left out (``--no-ngram``)."""
        return [self.draft] if self.draft == NGRAM or self.no_ngram else [self.draft, NGRAM]

    @property
    def skip_baseline(self) -> bool:
        """Whether no monolithic baseline runs (none is made): asked, or not among the modes."""
        return self.no_baseline or "monolithic" not in self.modes


def positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def delays(text: str) -> tuple[float, ...]:
    """``--delays``: one-way milliseconds a hop, comma-separated, e.g. ``0,25,50,100``."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"need milliseconds, comma-separated (e.g. {DEFAULT_DELAYS}), not {part.strip()!r}"
            ) from None
        if not math.isfinite(value) or not 0 <= value <= MAX_DELAY_MS:
            raise argparse.ArgumentTypeError(
                f"a delay must be 0 to {MAX_DELAY_MS:g} ms, not {part.strip()}"
            )
        values.append(value)
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a delay is listed twice: {text}")
    return tuple(sorted(values))


def ks(text: str) -> tuple[int | Literal["auto"], ...]:
    """``--ks``: Ks to compare, numbers and ``auto``, e.g. ``1,3,5,7,10,auto``."""
    from fleetgui.generation_config import K_MAX, K_MIN, parse_draft_tokens

    values: list[int | Literal["auto"]] = []
    for part in text.split(","):
        try:
            values.append(parse_draft_tokens(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"each K must be {K_MIN} to {K_MAX} or auto, not {part.strip().lower()!r}"
            ) from None
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a K is listed twice: {text}")
    return tuple(values)


def modes(text: str) -> tuple[str, ...]:
    """``--modes``: what to measure, comma-separated, e.g. ``pp,pp+sd``
    (:data:`~fleetgui.bench.configurations.KINDS`)."""
    values = tuple(p.strip().lower() for p in text.split(","))
    for value in values:
        if value not in KINDS:
            raise argparse.ArgumentTypeError(
                f"each mode must be one of {', '.join(KINDS)}; not {value!r}"
            )
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a mode is listed twice: {text}")
    return values


def workers(text: str) -> int | tuple[tuple[str, int], ...]:
    """``--workers``: how many local workers, or the user's own as ``HOST:PORT,...``."""
    if text.strip().isdigit():
        count = int(text)
        if not 1 <= count <= MAX_LOCAL_WORKERS:
            raise argparse.ArgumentTypeError(
                f"local workers: 1 to {MAX_LOCAL_WORKERS}, not {count}"
            )
        return count
    from fleetgui.fleet.pairing.worker_addresses import parse_worker_list

    try:
        return tuple(parse_worker_list(text))
    except (FleetguiError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def _output(path: Path | None, flag: str, suffix: str) -> None:
    if path is None:
        return
    if path.suffix.lower() != suffix:
        raise FleetguiError(f"{flag} {path}: give a {suffix} file")
    if path.is_dir():
        raise FleetguiError(f"{flag} {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise FleetguiError(f"{flag} {path}: the folder {path.parent} does not exist")


def _export(path: Path, flag: str, layout: str) -> None:
    from fleetgui.export.manifest import read_manifest

    if not path.is_dir():
        raise FleetguiError(f"{flag} {path} is not a folder")
    try:
        manifest = read_manifest(path)
    except (FleetguiError, OSError, ValueError) as exc:
        raise FleetguiError(f"{flag} {path} is not a fleetgui export: {exc}") from exc
    if layout == "stages" and manifest.layout != "stages":
        raise FleetguiError(
            f"{path} is a monolithic export; benchmark a stage export (fleetgui export MODEL "
            "--stages N) and give this one as --baseline"
        )
    if layout == "monolithic" and manifest.layout != "monolithic":
        raise FleetguiError(
            f"--baseline {path} is a stage export; give a monolithic one (fleetgui export MODEL "
            "--monolithic)"
        )


def from_args(args: argparse.Namespace) -> BenchOptions:
    """The checked options (see module doc); raises ``FleetguiError``."""
    given = args.workers if args.workers is not None else DEFAULT_WORKERS
    remote = () if isinstance(given, int) else given
    options = BenchOptions(
        export_dir=args.export_dir,
        local_workers=given if isinstance(given, int) else 0,
        remote_workers=remote,
        draft=parse_draft(args.draft) if args.draft else NGRAM,
        tokens=args.tokens,
        repeats=args.repeats,
        delays=args.delays or ((0.0,) if remote else delays(DEFAULT_DELAYS)),
        ks=args.ks,
        modes=args.modes,
        no_ngram=args.no_ngram,
        json_out=args.json,
        plot_out=args.plot,
        markdown_out=args.markdown,
        baseline=args.baseline,
        no_baseline=args.no_baseline,
        rate_mbit=args.rate,
        loss_pct=args.loss,
        network=args.network,
        pin=not args.no_pin,
    )
    check(options)
    return options


def check(options: BenchOptions) -> None:
    """Refuse what cannot go together or does not exist (see module doc)."""
    if options.tokens < 2 or options.tokens > MAX_TOKENS:
        raise FleetguiError(
            f"--tokens {options.tokens}: a decode rate needs 2 to {MAX_TOKENS} new tokens"
        )
    if options.export_dir is not None:
        _export(options.export_dir, "EXPORT_DIR", "stages")
    _check_drafts(options)
    if options.baseline is not None:
        if options.no_baseline:
            raise FleetguiError("--baseline and --no-baseline contradict each other")
        _export(options.baseline, "--baseline", "monolithic")
    _output(options.json_out, "--json", ".json")
    _output(options.plot_out, "--plot", ".png")
    _output(options.markdown_out, "--markdown", ".md")
    if options.plot_out is not None:
        from fleetgui.bench.plot import plot_support

        missing = plot_support()
        if missing:
            raise FleetguiError(missing)
    if options.loss_pct >= 100:
        raise FleetguiError(f"--loss {options.loss_pct:g}: a loss below 100 %, please")
    if options.remote_workers:
        if options.delays != (0.0,):
            raise FleetguiError(
                "added delay needs local workers (their links are made here); with your own "
                "workers (--workers HOST:PORT,...) give --delays 0: your network as it is"
            )
        if options.rate_mbit or options.loss_pct:
            raise FleetguiError("--rate and --loss shape local workers' links; leave them out")
    if options.network == "proxy" and (options.rate_mbit or options.loss_pct):
        raise FleetguiError("the delay relay (--network proxy) models no --rate or --loss")


def _check_drafts(options: BenchOptions) -> None:
    if options.draft != NGRAM:
        _export(Path(options.draft), "--draft", "any")
    elif options.no_ngram:
        raise FleetguiError(
            "--no-ngram leaves out n-gram drafts beside a draft model: give one with --draft DIR"
        )
    if options.no_ngram and not {Mode.PP_SD, Mode.PP_SD_MB} & set(options.modes):
        raise FleetguiError("--no-ngram: no speculative mode (pp+sd, pp+sd+mb) in --modes")
