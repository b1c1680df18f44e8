"""``fleetgui bench``: the paper's tables on this PC's local fleet (or your own), with real delay.

Every mode side by side in one run, interleaved and repeated (:mod:`fleetgui.bench`); the
figures go to the terminal as a markdown table, and on request to JSON, markdown and a PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from fleetgui.bench import options as flags
from fleetgui.bench.configurations import KINDS

if TYPE_CHECKING:
    from fleetgui.bench.runner import BenchRun

NAME = "bench"
HELP = "measure every decoding mode on a local fleet at several network delays"
DESCRIPTION = (
    "Benchmark an export (default: the demo model, SmolLM2-135M-Instruct) on local worker "
    "processes, one core and one OpenVINO thread each, with real per-hop network delay "
    "(network namespaces and tc netem, as root; else emulated by a delay relay, and said so): "
    "the monolithic baseline, PP, PP+MB, PP+SD per K and K auto with the given draft and with "
    "n-gram drafts, the full stack PP+SD+MB, TTFT per prompt length and the per-token "
    "breakdown, side by side in one run. With --workers HOST:PORT,... it measures your own "
    "workers on your network instead. Ctrl+C stops cleanly and keeps what was measured."
)
log = logging.getLogger(__name__)
EXIT_INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "export_dir",
        nargs="?",
        type=Path,
        metavar="EXPORT_DIR",
        help="a stage export to benchmark (default: the demo model, fetched and exported once)",
    )
    parser.add_argument(
        "--workers",
        type=flags.workers,
        metavar="N|HOST:PORT,...",
        help=f"local workers to start (default {flags.DEFAULT_WORKERS}), or your own workers",
    )
    parser.add_argument(
        "--draft",
        metavar="DIR|ngram",
        help="the draft export for PP+SD (n-gram drafts run beside it); default: ngram",
    )
    parser.add_argument(
        "--tokens", type=flags.positive_int, default=64, metavar="N", help="new tokens a stream"
    )
    parser.add_argument(
        "--repeats", type=flags.positive_int, default=3, metavar="R", help="interleaved repeats"
    )
    parser.add_argument(
        "--delays",
        type=flags.delays,
        metavar="MS,...",
        help=f"one-way delay per hop, ms (default {flags.DEFAULT_DELAYS}; with your own "
        "workers 0: their network as it is)",
    )
    parser.add_argument(
        "--ks",
        type=flags.ks,
        default=flags.ks(flags.DEFAULT_KS),
        metavar="K,...",
        help=f"PP+SD's Ks to compare (default {flags.DEFAULT_KS})",
    )
    parser.add_argument(
        "--modes",
        type=flags.modes,
        default=KINDS,
        metavar="MODE,...",
        help=f"what to measure (default all: {flags.DEFAULT_MODES}); e.g. pp,pp+sd to choose K",
    )
    parser.add_argument(
        "--no-ngram",
        action="store_true",
        help="with --draft DIR, leave out the n-gram drafts measured beside it",
    )
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="write every figure")
    parser.add_argument("--plot", type=Path, metavar="OUT.png", help="draw the figures")
    parser.add_argument("--markdown", type=Path, metavar="OUT.md", help="write the table")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="a monolithic export of the same model for the openvino_genai baseline "
        "(made automatically for the demo model)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the baseline")
    parser.add_argument(
        "--rate",
        type=flags.non_negative,
        default=0.0,
        metavar="MBIT",
        help="each link's rate, Mbit/s (default: unlimited)",
    )
    parser.add_argument(
        "--loss",
        type=flags.non_negative,
        default=0.0,
        metavar="PCT",
        help="packets lost per hop, %% (default 0)",
    )
    parser.add_argument(
        "--network",
        choices=flags.NETWORKS,
        default="auto",
        help="how links are delayed: netem, packets (user space, where the kernel has no "
        "netem), proxy (emulated, no root needed); default auto: the first that works",
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="do not pin workers to cores (taskset)"
    )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a run as Ctrl+C does: everything torn down, what ran written."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _command_text() -> str:
    argv = sys.argv[1:]
    return "fleetgui " + shlex.join(argv) if NAME in argv else "fleetgui bench"


def run(args: argparse.Namespace) -> int:
    from fleetgui.bench.links import DelayMethod, choose_links
    from fleetgui.bench.runner import BenchRun, plan_configurations, prepare_target
    from fleetgui.errors import FleetguiError

    options = flags.from_args(args)
    links = choose_links(options.network, local=options.local)
    if links.method == DelayMethod.PROXY:
        if options.rate_mbit or options.loss_pct:
            raise FleetguiError(
                f"--rate and --loss need real links ({links.reason}); leave them out"
            )
        print(
            f"fleetgui bench: {links.reason}: the delays are EMULATED by a TCP relay in front "
            "of each worker, and every output says so",
            file=sys.stderr,
        )
    elif links.reason:
        print(f"fleetgui bench: {links.label} ({links.reason})", file=sys.stderr)
    target = prepare_target(options)
    configurations, notes = plan_configurations(options, target)
    bench = BenchRun(options, links, target, configurations, _command_text())
    bench.info.notes += notes
    started = time.monotonic()
    interrupted = False
    try:
        with _sigterm_as_interrupt():
            bench.run()
    except KeyboardInterrupt:
        interrupted = True
        print("fleetgui bench: interrupted; writing what was measured", file=sys.stderr)
    except BaseException as exc:  # what ran before the failure is still worth keeping
        bench.info.notes.append(f"stopped by an error: {exc}")
        bench.info.interrupted = True
        with contextlib.suppress(Exception):
            _write_outputs(options, bench)
        raise
    finally:
        bench.info.duration_s = round(time.monotonic() - started, 1)
    bench.info.interrupted = interrupted
    _write_outputs(options, bench)
    return EXIT_INTERRUPTED if interrupted else 0


def _write_outputs(options: flags.BenchOptions, bench: BenchRun) -> None:
    from fleetgui.bench.plot import write_plot
    from fleetgui.bench.report import markdown, write_json, write_markdown

    info, results = bench.info, bench.results
    if not results.cells:
        return
    if options.json_out is not None:
        write_json(options.json_out, info, results)
    if options.plot_out is not None:
        title = (
            f"{bench.target.describe()} | {info.machine['cpu']}, {info.machine['cores']} cores "
            f"| {info.network['label']}"
        )
        write_plot(options.plot_out, results, title)
    if options.markdown_out is not None:
        write_markdown(options.markdown_out, info, results, options.plot_out)
    print(markdown(info, results))
    for path in (options.json_out, options.plot_out, options.markdown_out):
        if path is not None:
            print(f"fleetgui bench: wrote {path}", file=sys.stderr)
