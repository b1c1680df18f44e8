"""Several users on one fleet: continuous batching against interleaved streams, side by side.

``fleetgui serve`` (core 0, one OpenVINO thread, stage 0) with one worker process (core 1, one
thread, stage 1) on a 2-stage export (default: the demo's SmolLM2-135M-Instruct, int8); the
``openai`` client, streamed, ``--max-streams 16``:

- throughput: 1, 2, 4, 8 and 16 users at once, each asking for a 64-token story; aggregate
  completion tokens per second from the first request sent to the last answer done, and each
  user's own decode rate. Batching (the default) against ``--no-batching`` (stateful stages,
  one stream a pass, streams interleaved: before continuous batching).
- prefill beside a running user: one user streams a long completion (counting on); the time
  between its tokens while the server is otherwise idle, and while a second user's
  2,000-token prompt is prefilled (from that request sent to its first token).

With ``--llama-server BIN --gguf Q8_0.gguf``, the same users against ``llama-server -np 16``
alone on both cores (one process, 2 threads) on the same model.

Every measurement runs ``--repeat`` times (3) and its medians are reported.

Run: ``.venv/bin/python benchmarks/bench_batching.py [--users 1,2,4,8,16] [--llama-server BIN
--gguf Q8_0.gguf] [--export DIR] [--no-beside] [--repeat 3]``. The ~1.2B random Llama:
``E=$(.venv/bin/python benchmarks/random_llama_gguf.py --export)`` and
``G=$(.venv/bin/python benchmarks/random_llama_gguf.py)``, then ``--export $E --gguf $G``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import statistics
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_conversation import filler, fleetgui_server
from common import bench_cache, demo_run_args, print_figures

log = logging.getLogger("benchmarks")

N_TOKENS = 64
LONG_PROMPT_WORDS = 1800  # about 2,000 tokens


def client(url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=900)


def stream_count(url: str, n_tokens: int, times: list[float]) -> None:
    """A plain completion that goes on counting (no chat turn to end): each streamed chunk's
    arrival time, appended to ``times`` as they come."""
    counting = ", ".join(str(n) for n in range(1, 40)) + ","
    chunks = client(url).completions.create(
        model="m", prompt=counting, max_tokens=n_tokens, temperature=0, stream=True
    )
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].text:
            times.append(time.perf_counter())


def stream_answer(
    url: str, prompt: str, n_tokens: int, times: list[float] | None = None
) -> list[float]:
    """The arrival time of each streamed chunk of one answer (perf_counter seconds), appended
    to ``times`` as they come."""
    times = [] if times is None else times
    chunks = client(url).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=n_tokens,
        temperature=0,
        stream=True,
    )
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.perf_counter())
    return times


def users_at_once(url: str, n_users: int, run: int = 0) -> dict[str, float]:
    """``n_users`` answers started together (prompts of their own in each ``run``): aggregate
    and per-user tokens/s."""
    arrivals: list[list[float]] = [[] for _ in range(n_users)]

    def one(i: int) -> None:
        arrivals[i] = stream_answer(url, f"Story {i}: {filler(i + 17 * run, 12)}", N_TOKENS)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n_users)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = max(times[-1] for times in arrivals)
    tokens = sum(len(times) for times in arrivals)
    per_user = [(len(t) - 1) / (t[-1] - t[0]) for t in arrivals if len(t) > 1]
    log.info(
        "%d users: %.1f tok/s, each %.1f",
        n_users,
        tokens / (ended - started),
        statistics.median(per_user),
    )
    return {
        "aggregate": tokens / (ended - started),
        "per_user": statistics.median(per_user),
        "tokens": tokens,
    }


def prefill_beside(url: str, seed: int) -> dict[str, float]:
    """A running user's time between tokens idle, and while another's long prompt (words of
    ``seed``: no other run's prompt is kept to start from) prefills."""
    times: list[float] = []
    running = threading.Thread(target=stream_count, args=(url, 600, times))
    running.start()
    while len(times) < 120:  # idle gaps after its first 40 tokens
        if not running.is_alive():
            raise RuntimeError(f"the running user's answer ended after {len(times)} tokens")
        time.sleep(0.05)
    sent = time.perf_counter()
    first = stream_answer(url, filler(seed, LONG_PROMPT_WORDS) + " Summarise.", 1)[0]
    running.join()
    log.info(
        "running user: %d tokens, %d before the long prompt, %d before its first token",
        len(times),
        sum(t < sent for t in times),
        sum(t < first for t in times),
    )
    idle = [b - a for a, b in itertools.pairwise(times) if b < sent][40:]
    during = [b - a for a, b in itertools.pairwise(times) if sent <= a and b <= first]
    return {
        "idle_ms": 1000 * statistics.mean(idle),
        "during_ms": 1000 * statistics.mean(during),
        "during_max_ms": 1000 * max(during),
        "prefill_s": first - sent,
    }


@contextlib.contextmanager
def llama_server(binary: str, gguf: Path, slots: int) -> Iterator[str]:
    """``llama-server`` alone on both cores, ``slots`` parallel sequences."""
    server = subprocess.Popen(
        [
            binary, "-m", str(gguf), "-t", "2", "-np", str(slots), "-c", str(slots * 2048),
            "--port", "8098", "--jinja",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8098/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield "http://127.0.0.1:8098/v1"
    finally:
        server.terminate()
        server.wait(30)


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over ``runs`` (this machine's neighbours slow a short run now and
    then)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def measure(url: str, counts: list[int], beside: bool, repeat: int) -> dict[str, Any]:
    stream_answer(url, "warm up", 8)
    out: dict[str, Any] = {
        str(n): median_of([users_at_once(url, n, run) for run in range(repeat)]) for n in counts
    }
    if beside:
        runs = [prefill_beside(url, seed) for seed in range(2, 2 + repeat)]
        for run in runs:  # each run's own idle value: the ratio is taken within a run
            run["ratio"] = run["during_ms"] / run["idle_ms"]
        out["beside"] = median_of(runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", default="1,2,4,8,16")
    parser.add_argument("--llama-server", help="llama-server binary")
    parser.add_argument("--gguf", type=Path, help="the same model as a GGUF file")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each measurement (medians reported)"
    )
    parser.add_argument(
        "--no-beside", dest="beside", action="store_false", help="skip the prefill-beside test"
    )
    args = demo_run_args(parser)
    counts = [int(n) for n in args.users.split(",")]
    from fleetgui.fleet.local_fleet.fleet import LocalFleet

    runs: dict[str, dict[str, Any]] = {}
    with LocalFleet(bench_cache() / "batching", cores={"w1": (1,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        fleet.identity()
        identity_dir = fleet.root / "coordinator"
        for name, flags in (("batching", ()), ("interleaving", ("--no-batching",))):
            with fleetgui_server(
                args.export, worker, identity_dir, "--max-streams", "16", *flags
            ) as url:
                runs[name] = measure(url, counts, args.beside, args.repeat)
    if args.llama_server and args.gguf:
        os.sched_setaffinity(0, {0, 1})
        with llama_server(args.llama_server, args.gguf, max(counts)) as url:
            runs["llama-server"] = measure(url, counts, False, args.repeat)
    report(runs, counts)


def report(runs: dict[str, dict[str, Any]], counts: list[int]) -> None:
    rows: list[tuple[str, str]] = []
    for name, run in runs.items():
        rows.append(
            (
                f"{name}: tok/s for {', '.join(map(str, counts))} users",
                " / ".join(f"{run[str(n)]['aggregate']:.0f}" for n in counts),
            )
        )
        rows.append(
            (
                f"{name}: each user's tok/s",
                " / ".join(f"{run[str(n)]['per_user']:.0f}" for n in counts),
            )
        )
        if "beside" in run:
            b = run["beside"]
            rows.append(
                (
                    f"{name}: TBT idle / during a 2k prefill",
                    f"{b['idle_ms']:.1f} / {b['during_ms']:.1f} ms "
                    f"({b['ratio']:.2f}x; max {b['during_max_ms']:.0f} ms, "
                    f"prefill {b['prefill_s']:.2f} s)",
                )
            )
    top = str(max(counts))
    eight = "8" if "8" in runs["batching"] else top
    gain = runs["batching"][eight]["aggregate"] / runs["interleaving"][eight]["aggregate"]
    rows.append((f"batching / interleaving at {eight} users", f"{gain:.2f}x"))
    if "llama-server" in runs:
        ratio = runs["batching"][eight]["aggregate"] / runs["llama-server"][eight]["aggregate"]
        rows.append((f"batching / llama-server at {eight} users", f"{ratio:.2f}x"))
    out: dict[str, Any] = {**runs, "machine": os.uname().machine}
    print_figures("Several users: continuous batching, coordinator + 1 worker", rows, out)


if __name__ == "__main__":
    main()
