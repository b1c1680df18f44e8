"""Planner benchmark: solve times of the exact MILP and of the heuristic on random fleets.

For 4, 8 and 16 devices (exact) and 32 and 64 devices (heuristic, with the MILP alongside for
reference), on an 80-layer 70B-class int4 model and random heterogeneous fleets (laptops,
desktops, old PCs; wired and Wi-Fi links), prints the median and worst time of the solver alone
and of a full ``solve`` (which also explains every device left out), and the heuristic's gap to
the exact optimum.

Run: ``.venv/bin/python benchmarks/bench_planner.py [--fleets 5] [--seed 0]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from fleetgui.planner import PlanConfig, solve
from fleetgui.planner.examples import llama_70b_like, random_fleet
from fleetgui.planner.heuristic import solve_heuristic
from fleetgui.planner.milp import solve_milp
from fleetgui.planner.problem import build_problem


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=5, help="random fleets per size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    import scipy.optimize  # imported before timing anything

    del scipy
    print(
        f"{'devices':>7} {'objective':>10} {'solver':>9} {'median s':>9} {'worst s':>8} "
        f"{'solve() s':>9} {'heur. gap':>9}"
    )
    for size in (4, 8, 16, 32, 64):
        for objective, streams in (("latency", 1), ("throughput", 8)):
            config = PlanConfig(objective=objective)
            model = llama_70b_like(streams)
            exact_times, heuristic_times, full_times, gaps = [], [], [], []
            no_fit = 0
            for _ in range(args.fleets):
                fleet = random_fleet(size, rng)
                problem = build_problem(fleet, model, config)
                exact, seconds = timed(lambda p=problem: solve_milp(p))
                exact_times.append(seconds)
                heuristic, seconds = timed(lambda p=problem: solve_heuristic(p))
                heuristic_times.append(seconds)
                if exact is not None and heuristic is not None:
                    gaps.append(problem.score(heuristic)[0] / problem.score(exact)[0] - 1)
                if exact is None:
                    no_fit += 1
                    continue
                _, seconds = timed(lambda f=fleet, m=model, c=config: solve(f, m, c))
                full_times.append(seconds)
            used = "milp" if size <= 16 else "heuristic"
            times = exact_times if size <= 16 else heuristic_times
            gap = f"{100 * max(gaps):.1f}%" if gaps else "-"
            full = f"{statistics.median(full_times):>9.3f}" if full_times else f"{'-':>9}"
            print(
                f"{size:>7} {objective:>10} {used:>9} {statistics.median(times):>9.3f} "
                f"{max(times):>8.3f} {full} {gap:>9}"
                + (
                    f"  ({no_fit} of {args.fleets} fleets too small for the model)"
                    if no_fit
                    else ""
                )
            )
            if size > 16:
                print(
                    f"{'':>7} {'':>10} {'(milp)':>9} {statistics.median(exact_times):>9.3f} "
                    f"{max(exact_times):>8.3f}"
                )


if __name__ == "__main__":
    main()
