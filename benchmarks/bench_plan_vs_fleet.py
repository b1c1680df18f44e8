"""Planner vs fleet: the predicted time per token against the measured one on a loopback fleet.

Three "PCs" on this machine, one OpenVINO thread each:

* ``coord``: this process, pinned to core 0 (it runs stage 0 and the head).
* ``fast``: a worker pinned to core 1.
* ``slow``: a worker pinned to core 1 too, under a CPU quota (cgroup ``cpu.max`` or v1
  ``cpu.cfs_quota_us``, e.g. 2 ms per 4 ms period) and behind a user-space delay relay that adds
  ``--delay-ms`` to every message each way (this kernel has no ``tc netem``).

Each device is profiled for real: ``ms_per_layer`` by :func:`measure_layer_ms` in a subprocess
pinned (and throttled) the way that device runs, ``rtt_ms`` as the median heartbeat round trip
through its actual link (through the relay for ``slow``), bandwidth from heartbeats carrying 1 MiB,
memory from psutil. The coordinator's memory is capped at ``--coordinator-layers`` layers (a small
PC): with equal cores the latency-optimal plan for one user is otherwise the coordinator alone.

The planner solves for latency; the bench Llama (int4, 16 layers) is exported split at the plan's
layer ranges and deployed in the plan's ring order, beside a few other splits (all three devices
evenly, the slow worker instead of the fast one, the coordinator alone as a reference that ignores
its memory cap). Decode ms/token is the median over repeats and prompts; repeats interleave the
splits and re-profile the devices each time. The table gives predicted vs measured per split, and
a measured breakdown (stage compute from the runtime's timings, time in the ring outside worker
compute, and the rest: the coordinator's per-token work outside any stage). Two more errors per
split: the median of each repeat's own prediction against its own measurement (other users' load
on a shared machine drifts between repeats), and the run's own stage compute plus the predicted
hops against the measurement (the time model's structure, without the layer-time profile).

Run: ``.venv/bin/python benchmarks/bench_plan_vs_fleet.py [--tokens 96] [--repeats 3]
[--delay-ms 4] [--quota 0.5] [--coordinator-layers 8]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from bench_fleet import PROMPTS
from common import bench_cache, bench_llama, ensure_export, print_figures

from fleetgui.bench.links import DelayRelays
from fleetgui.fleet.local_fleet.fleet import LocalFleet
from fleetgui.fleet.local_fleet.worker_process import pinned
from fleetgui.fleet.ring.link import WorkerEndpoint, WorkerLink
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import Message, Op
from fleetgui.planner import DeviceProfile, ModelProfile, Plan, PlanConfig, solve
from fleetgui.planner.cost import evaluate, stage_memory_bytes
from fleetgui.planner.model_profile import load_model_profile
from fleetgui.runtime.loader import LocalPipelineConfig
from fleetgui.runtime.metrics import MetricEvent, StageTiming, TransferTiming
from fleetgui.runtime.ov_stage import StageConfig

log = logging.getLogger("bench_plan_vs_fleet")

COORD, FAST, SLOW = "coord", "fast", "slow"
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
BANDWIDTH_PAYLOAD = 1 << 20  # bytes carried by the bandwidth probe's heartbeats

_LAYER_TIMER = """
import json, sys
from pathlib import Path
import psutil
from fleetgui.planner.device_bench import measure_layer_ms
t = measure_layer_ms(
    Path(sys.argv[1]), sys.argv[2], cache_file=Path(sys.argv[3]), refresh=True, warmup=10, steps=100
)
print(json.dumps({"ms": t.ms_per_layer, "memory": int(psutil.virtual_memory().available)}))
"""


# -- the slow PC's CPU quota ------------------------------------------------------------------


@dataclass
class CpuQuota:
    """A cgroup holding the slow PC's processes to ``quota`` of one core (None: none worked)."""

    path: Path | None
    how: str  # what worked, or why nothing did

    def prefix(self) -> list[str]:
        """Command prefix that moves the process into the cgroup before it starts."""
        if self.path is None:
            return []
        procs = self.path / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]


@contextlib.contextmanager
def cpu_quota(quota: float, period_us: int) -> Iterator[CpuQuota]:
    """Create a cgroup limited to ``quota`` cores (v2 ``cpu.max``, else v1 CFS quota)."""
    if quota <= 0:
        yield CpuQuota(None, "no quota asked")
        return
    name = f"fleetgui-bench-slow-{os.getpid()}"
    quota_us = int(quota * period_us)
    attempts: list[tuple[Path, dict[str, str], str]] = []
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        attempts.append(
            (CGROUP_V2 / name, {"cpu.max": f"{quota_us} {period_us}"}, "cgroup v2 cpu.max")
        )
    if (CGROUP_V1_CPU / "cpu.cfs_quota_us").is_file():
        attempts.append(
            (
                CGROUP_V1_CPU / name,
                {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": str(quota_us)},
                "cgroup v1 cpu.cfs_quota_us",
            )
        )
    made: Path | None = None
    errors: list[str] = []
    for path, settings, how in attempts:
        try:
            path.mkdir()
            made = path
            for key, value in settings.items():
                (path / key).write_text(value)
        except OSError as exc:
            errors.append(f"{how}: {exc}")
            if made is not None:
                with contextlib.suppress(OSError):
                    made.rmdir()
                made = None
            continue
        text = f"{how}: {quota_us} us per {period_us} us ({quota:.0%} of a core)"
        break
    if made is None:
        yield CpuQuota(None, "no writable cgroup cpu controller: " + ("; ".join(errors) or "none"))
        return
    try:
        yield CpuQuota(made, text)
    finally:
        for _ in range(50):  # wait until its processes have exited, then remove it
            with contextlib.suppress(OSError):
                made.rmdir()
                break
            time.sleep(0.2)


# -- the three PCs ----------------------------------------------------------------------------


@dataclass
class Pc:
    """How one of the emulated PCs runs its processes."""

    name: str
    prefix: list[str]  # taskset (and the quota's cgroup) for its processes
    endpoint: WorkerEndpoint | None = None  # how the coordinator reaches it (None: coordinator)


def fleet_root() -> Path:
    """The workers' homes and the coordinator's key, kept between runs."""
    return bench_cache() / "fleet-plan"


@contextlib.contextmanager
def start_workers(quota: CpuQuota, args: argparse.Namespace) -> Iterator[dict[str, Pc]]:
    fleet = LocalFleet(
        fleet_root(),
        precision="auto",
        prefixes={SLOW: quota.prefix()},
        cores={FAST: (args.fast_cpu,), SLOW: (args.slow_cpu,)},
    )
    with fleet, DelayRelays(args.delay_ms) as relays:
        fast, slow = fleet.start([FAST, SLOW])
        yield {
            COORD: Pc(COORD, pinned([0])),
            FAST: Pc(FAST, fast.prefix, fast.endpoint),
            SLOW: Pc(SLOW, slow.prefix, relays.front([slow])[0]),
        }


# -- profiling --------------------------------------------------------------------------------


def layer_ms(pc: Pc, model: Path, weights: str, folder: Path) -> tuple[float, int]:
    """(ms_per_layer, available memory) measured in a subprocess run the way ``pc`` runs."""
    cache = folder / f"layer-{pc.name}.json"
    done = subprocess.run(
        [*pc.prefix, sys.executable, "-c", _LAYER_TIMER, str(model), weights, str(cache)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"timing a layer on {pc.name} failed:\n{done.stderr[-2000:]}")
    record = json.loads(lines[-1])
    return float(record["ms"]), int(record["memory"])


async def link_figures(link: WorkerLink, pings: int = 30, loads: int = 8) -> tuple[float, float]:
    """(rtt_ms, bandwidth bytes/s) through ``link``: heartbeats without and with 1 MiB."""

    async def timed(message: Message) -> float:
        started = time.perf_counter()
        await link.call(message)
        return (time.perf_counter() - started) * 1000.0

    empty = Message(Op.HEARTBEAT)
    payload = np.zeros(BANDWIDTH_PAYLOAD // 4, dtype=np.float32)
    loaded = Message(Op.HEARTBEAT, tensors=(payload,))
    await timed(empty)
    rtts = [await timed(empty) for _ in range(pings)]
    big = [await timed(loaded) for _ in range(loads)]
    rtt = statistics.median(rtts)
    extra_s = max(statistics.median(big) - rtt, 1e-3) / 1000.0
    return rtt, BANDWIDTH_PAYLOAD / extra_s


async def measure_links(identity: KeyPair, pcs: dict[str, Pc]) -> dict[str, tuple[float, float]]:
    session = FleetSession(identity, CoordinatorConfig())
    endpoints = [pc.endpoint for pc in pcs.values() if pc.endpoint is not None]
    await session.connect(endpoints)
    try:
        return {e.name: await link_figures(session.workers.links[e.name]) for e in endpoints}
    finally:
        await session.close()


def profile_devices(
    identity: KeyPair, pcs: dict[str, Pc], model: Path, args: argparse.Namespace, folder: Path
) -> list[DeviceProfile]:
    """One measured profile per PC, the coordinator first."""
    links = asyncio.run(measure_links(identity, pcs))
    devices = []
    for name, pc in pcs.items():
        ms, memory = layer_ms(pc, model, args.weights, folder)
        rtt, bandwidth = links.get(name, (0.0, float("inf")))
        devices.append(DeviceProfile(name, memory, ms, 1e9, rtt, bandwidth))
        log.warning(
            "profile %s: %.3f ms/layer, rtt %.2f ms, %.0f MB/s",
            name,
            ms,
            rtt,
            bandwidth / 1e6,
        )
    return devices


def median_profiles(rounds: Sequence[Sequence[DeviceProfile]]) -> list[DeviceProfile]:
    """Each device's median figures over the profiling rounds."""
    out = []
    for column in zip(*rounds, strict=True):
        out.append(
            replace(
                column[0],
                ms_per_layer=statistics.median(d.ms_per_layer for d in column),
                rtt_ms=statistics.median(d.rtt_ms for d in column),
                bandwidth_bytes_per_s=statistics.median(d.bandwidth_bytes_per_s for d in column),
                memory_bytes=min(d.memory_bytes for d in column),
            )
        )
    return out


def cap_coordinator(
    devices: list[DeviceProfile], model: ModelProfile, config: PlanConfig, layers: int
) -> list[DeviceProfile]:
    """The coordinator's memory capped to hold stage 0 with ``layers`` layers (0: no cap)."""
    if layers <= 0:
        return devices
    cap = config.headroom_bytes + stage_memory_bytes(layers, model, config, first=True, last=False)
    coordinator = devices[0]
    return [replace(coordinator, memory_bytes=min(cap, coordinator.memory_bytes)), *devices[1:]]


# -- splits -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """A ring to measure: device names in ring order (coordinator first) and their layer counts."""

    label: str
    ring: tuple[tuple[str, int], ...]

    @property
    def layers_arg(self) -> str:
        parts, start = [], 0
        for _, n in self.ring:
            parts.append(f"{start}:{start + n}")
            start += n
        return ",".join(parts)

    @property
    def workers(self) -> list[str]:
        return [name for name, _ in self.ring[1:]]

    def predict(
        self, devices: Sequence[DeviceProfile], model: ModelProfile, config: PlanConfig
    ) -> Plan:
        by_name = {d.name: d for d in devices}
        return evaluate([(by_name[n], k) for n, k in self.ring], model, config, solver=self.label)


def even_counts(n_layers: int, parts: int) -> list[int]:
    base, extra = divmod(n_layers, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def splits_for(plan: Plan, n_layers: int) -> list[Split]:
    """The plan, then the other candidates (duplicates of an earlier layout dropped)."""
    planned = tuple(zip(plan.devices, plan.layer_counts, strict=True))
    swap = {FAST: SLOW, SLOW: FAST}
    swapped = tuple((swap.get(name, name), n) for name, n in planned)
    candidates = [
        Split("plan", planned),
        Split(
            "even over all 3",
            tuple(zip((COORD, FAST, SLOW), even_counts(n_layers, 3), strict=True)),
        ),
        Split("plan, fast<->slow swapped", swapped),
        Split("even coord+fast", tuple(zip((COORD, FAST), even_counts(n_layers, 2), strict=True))),
        Split("coordinator alone (ref.)", ((COORD, n_layers),)),
    ]
    seen: set[tuple[tuple[str, int], ...]] = set()
    out = []
    for split in candidates:
        if split.ring not in seen:
            seen.add(split.ring)
            out.append(split)
    return out


def export_for(model: Path, split: Split, weights: str) -> Path:
    """The bench Llama exported at the split's layer ranges (cached in the bench cache)."""
    if len(split.ring) == 1:
        return ensure_export(model, f"bench-1stage-{weights}", stages=1, weights=weights)
    layers = split.layers_arg
    if layers == "0:6,6:11,11:16":  # what bench_fleet part B exports under this name
        return ensure_export(model, f"bench-3stage-{weights}", layers=layers, weights=weights)
    ranges = layers.replace(":", "-").replace(",", "_")
    name = f"bench-{len(split.ring)}stage-{weights}-{ranges}"
    return ensure_export(model, name, layers=layers, weights=weights)


# -- measuring a split ------------------------------------------------------------------------


@dataclass
class Measured:
    """One split's decode figures, pooled over prompts and repeats."""

    token_ms: list[float] = field(default_factory=list)  # per run: 1000 / decode tokens/s
    stage_ms: dict[int, list[float]] = field(default_factory=dict)  # per decode step
    ring_ms: list[float] = field(default_factory=list)  # time in the ring minus worker compute

    def breakdown(self) -> dict[str, float]:
        stages = {f"stage{i}": statistics.median(v) for i, v in sorted(self.stage_ms.items())}
        ring = statistics.median(self.ring_ms) if self.ring_ms else 0.0
        token = statistics.median(self.token_ms)
        return {
            "token": token,
            **stages,
            "ring_outside_compute": ring,
            "rest": token - sum(stages.values()) - ring,
        }


async def run_split(
    identity: KeyPair,
    pcs: dict[str, Pc],
    split: Split,
    export: Path,
    *,
    tokens: int,
    into: Measured,
) -> None:
    config = CoordinatorConfig(
        local=LocalPipelineConfig(stage=StageConfig(threads=1)), worker_threads=1, local_stages=1
    )
    session = FleetSession(identity, config)
    endpoints = [pcs[name].endpoint for name in split.workers]
    await session.connect([e for e in endpoints if e is not None])
    stage_ms: dict[int, list[float]] = {}
    ring_ms: list[float] = []

    def collect(event: MetricEvent) -> None:
        if isinstance(event, StageTiming) and event.positions == 1:
            stage_ms.setdefault(event.stage, []).append(event.compute_ms)
        elif isinstance(event, TransferTiming):
            ring_ms.append(event.ms)

    try:
        await session.deploy(export, order=split.workers)
        pipe = session.pipeline()
        await pipe.complete("warm up", GenerationConfig(max_new_tokens=8))
        session.metrics.subscribe(collect)
        for prompt in PROMPTS:
            stage_ms.clear()
            ring_ms.clear()
            result = await pipe.complete(prompt, GenerationConfig(max_new_tokens=tokens))
            into.token_ms.append(1000.0 / result.tokens_per_s)
            # decode steps only: the prefill's StageTiming has positions > 1 and is skipped;
            # its one TransferTiming is dropped with the first entry
            for stage, values in stage_ms.items():
                into.stage_ms.setdefault(stage, []).extend(values)
            into.ring_ms.extend(ring_ms[1:])
    finally:
        await session.close()


# -- the benchmark ----------------------------------------------------------------------------


def machine_load() -> str:
    top = subprocess.run(["top", "-bn1"], capture_output=True, text=True, check=False).stdout
    busy = [
        line.split()
        for line in top.splitlines()[7:]
        if len(line.split()) > 11 and _percent(line.split()[8]) >= 20.0
    ]
    others = ", ".join(f"{p[11]}({p[0]}) {p[8]}%" for p in busy) or "nothing busy"
    return f"load average {os.getloadavg()[0]:.2f}; over 20% CPU: {others}"


def _percent(text: str) -> float:
    try:
        return float(text.replace(",", "."))
    except ValueError:
        return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weights", default="int4")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=4.0, help="relay delay each way (slow)")
    parser.add_argument("--quota", type=float, default=0.5, help="slow PC's share of a core")
    parser.add_argument("--period-us", type=int, default=4000, help="the quota's period")
    parser.add_argument("--fast-cpu", type=int, default=1)
    parser.add_argument("--slow-cpu", type=int, default=1)
    parser.add_argument("--coordinator-layers", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    os.sched_setaffinity(0, {0})  # the coordinator's PC (the relays inherit it: the "network")
    identity = LocalFleet(fleet_root()).identity()
    model = bench_llama()
    reference = ensure_export(model, f"bench-1stage-{args.weights}", stages=1, weights=args.weights)
    profile = load_model_profile(reference)
    config = PlanConfig(objective="latency")
    loads = [machine_load()]
    folder = Path(tempfile.mkdtemp(prefix="fleetgui-plan-bench-"))
    out = Results(loads=loads)
    rounds, measured, per_repeat = out.rounds, out.measured, out.per_repeat
    try:
        with (
            cpu_quota(args.quota, args.period_us) as quota,
            start_workers(quota, args) as pcs,
        ):
            log.warning("slow PC: %s; relay %.1f ms each way", quota.how, args.delay_ms)
            rounds.append(profile_devices(identity, pcs, model, args, folder))
            devices = cap_coordinator(rounds[0], profile, config, args.coordinator_layers)
            plan = out.plan = solve(devices, profile, config)
            print(plan, flush=True)
            splits = out.splits = splits_for(plan, profile.n_layers)
            exports = {s.label: export_for(model, s, args.weights) for s in splits}
            for repeat in range(args.repeats):
                if repeat:
                    rounds.append(profile_devices(identity, pcs, model, args, folder))
                    loads.append(machine_load())
                now = cap_coordinator(rounds[-1], profile, config, args.coordinator_layers)
                order = splits if repeat % 2 == 0 else splits[::-1]
                for split in order:
                    this = Measured()
                    asyncio.run(
                        run_split(
                            identity,
                            pcs,
                            split,
                            exports[split.label],
                            tokens=args.tokens,
                            into=this,
                        )
                    )
                    total = measured.setdefault(split.label, Measured())
                    total.token_ms += this.token_ms
                    for stage, values in this.stage_ms.items():
                        total.stage_ms.setdefault(stage, []).extend(values)
                    total.ring_ms += this.ring_ms
                    predicted = split.predict(now, profile, config).predicted_ms_per_token
                    got = statistics.median(this.token_ms)
                    per_repeat.setdefault(split.label, []).append(
                        {"predicted": predicted, "measured": got}
                    )
                    log.warning(
                        "repeat %d %s: predicted %.1f, measured %.1f ms/token",
                        repeat,
                        split.label,
                        predicted,
                        got,
                    )
            loads.append(machine_load())
            out.slow_how = quota.how
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(args, profile, config, out)


@dataclass
class Results:
    """Everything a run measured, for :func:`report`."""

    loads: list[str]  # machine load before, between and after the repeats
    plan: Plan | None = None  # the plan solved from the first profiling round
    splits: list[Split] = field(default_factory=list)
    rounds: list[list[DeviceProfile]] = field(default_factory=list)  # one profile per repeat
    measured: dict[str, Measured] = field(default_factory=dict)  # by split label
    per_repeat: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    slow_how: str = ""  # how the slow PC's CPU quota was applied


def report(
    args: argparse.Namespace, profile: ModelProfile, config: PlanConfig, out: Results
) -> None:
    plan, splits, rounds, measured = out.plan, out.splits, out.rounds, out.measured
    per_repeat, loads, slow_how = out.per_repeat, out.loads, out.slow_how
    if plan is None:
        raise RuntimeError("nothing was measured")
    devices = cap_coordinator(median_profiles(rounds), profile, config, args.coordinator_layers)
    rows: list[tuple[str, str]] = [
        (
            f"device {d.name}",
            f"{d.ms_per_layer:.2f} ms/layer, rtt {d.rtt_ms:.2f} ms, "
            f"{d.bandwidth_bytes_per_s / 1e6:.0f} MB/s, {d.memory_bytes / 1e9:.2f} GB",
        )
        for d in devices
    ]
    rows.append(("model", f"lm_head = {profile.lm_head_layer_ratio:.2f} layers of time"))
    rows.append(("plan (first profile)", f"{plan.layers_arg} on {', '.join(plan.devices)}"))
    figures: dict[str, Any] = {"devices": [d.to_dict() for d in devices], "splits": {}}
    ranking: list[tuple[float, float, str]] = []
    for split in splits:
        predicted = split.predict(devices, profile, config)
        got = measured[split.label].breakdown()
        error = (predicted.predicted_ms_per_token - got["token"]) / got["token"]
        ring = " ".join(f"{n}:{k}" for n, k in split.ring)
        rows.append(
            (
                f"{split.label} [{ring}]",
                f"predicted {predicted.predicted_ms_per_token:6.1f}  measured {got['token']:6.1f}"
                f" ms/token  error {error:+.1%}",
            )
        )
        parts = ", ".join(f"{k} {v:.1f}" for k, v in got.items() if k != "token")
        want = (
            ", ".join(f"stage{i} {s.compute_ms:.1f}" for i, s in enumerate(predicted.stages))
            + f", hops {sum(s.hop_in_ms + s.hop_out_ms for s in predicted.stages):.1f}"
        )
        rows.append(("  measured parts / predicted parts", f"{parts} / {want}"))
        # the model's structure alone: the run's own stage compute plus the predicted hops
        hops = sum(s.hop_in_ms + s.hop_out_ms for s in predicted.stages)
        structure = sum(v for k, v in got.items() if k.startswith("stage")) + hops
        paired = statistics.median(
            (r["predicted"] - r["measured"]) / r["measured"] for r in per_repeat[split.label]
        )
        rows.append(
            (
                "  error per repeat (median) / with the run's compute",
                f"{paired:+.1%} / {(structure - got['token']) / got['token']:+.1%}",
            )
        )
        ranking.append((predicted.predicted_ms_per_token, got["token"], split.label))
        figures["splits"][split.label] = {
            "ring": split.ring,
            "predicted_ms": round(predicted.predicted_ms_per_token, 3),
            "measured_ms": round(got["token"], 3),
            "error": round(error, 4),
            "median_error_per_repeat": round(paired, 4),
            "structure_ms": round(structure, 3),
            "measured_parts": {k: round(v, 3) for k, v in got.items()},
            "runs_ms": [round(x, 3) for x in measured[split.label].token_ms],
            "per_repeat": per_repeat[split.label],
        }
    by_prediction = [label for *_, label in sorted(ranking)]
    by_measure = [label for _, got, label in sorted(ranking, key=lambda r: r[1])]
    rows.append(("ranking predicted", " < ".join(by_prediction)))
    rows.append(("ranking measured", " < ".join(by_measure)))
    for i, load in enumerate(loads):
        rows.append((f"machine load {i}", load))
    figures["loads"] = loads
    figures["profiles"] = [[d.to_dict() for d in r] for r in rounds]
    print_figures(
        f"plan vs fleet: bench Llama {args.weights}, coord core 0, fast core {args.fast_cpu}, "
        f"slow core {args.slow_cpu} ({slow_how}, relay {args.delay_ms:g} ms each way), "
        f"{args.tokens} new tokens, {args.repeats} repeats x {len(PROMPTS)} prompts",
        rows,
        figures,
    )


if __name__ == "__main__":
    main()
