"""A bench run's results (``fleetgui.bench.results``): ratios paired within each repeat, and the
summary naming the full stack and the best K."""

from __future__ import annotations

import pytest

from fleetgui.bench.configurations import build_configurations
from fleetgui.bench.measure import RunFigures
from fleetgui.bench.results import Results


def _run(rate: float, **kw: float) -> RunFigures:
    return RunFigures(
        tokens_per_s=rate, new_tokens=64, ttft_ms=100.0, prompt_tokens=20, wall_s=1, **kw
    )


def test_ratios_are_paired_within_each_repeat_and_the_summary_names_the_best_k() -> None:
    """Repeat 2 ran on a machine twice as slow: the ratios of each repeat still hold."""
    configurations = build_configurations(
        ["ngram"], baseline=False, hub_delay=100.0, ks=(3, 10, "auto"), mb_streams=(2,)
    )
    by_key = {c.key: c for c in configurations}
    results = Results(configurations, [0.0, 100.0], repeats=2)
    figures = {  # key -> rate at 0 ms and at 100 ms, repeat 1 (repeat 2 is half)
        "pp": (40.0, 3.0),
        "pp+mb/2": (60.0, 6.0),
        "pp+sd/k3/ngram": (50.0, 4.5),
        "pp+sd/k10/ngram": (44.0, 6.0),
        "pp+sd/kauto/ngram": (48.0, 5.7),
        "pp+sd+mb/2/kauto/ngram": (80.0, 15.0),
        "pp/hub": (0.0, 2.4),
    }
    for key, rates in figures.items():
        for index, delay in enumerate((0.0, 100.0)):
            if rates[index]:
                for repeat, scale in ((0, 1.0), (1, 0.5)):
                    results.add(by_key[key], delay, repeat, _run(rates[index] * scale, mean_k=6.0))
    summary = results.summary()
    assert summary["full_stack"] == "pp+sd+mb/2/kauto/ngram"
    assert summary["full_stack_over_pp"] == {"0": pytest.approx(2.0), "100": pytest.approx(5.0)}
    (lan,) = summary["k_auto_vs_best_fixed"]["0"]
    (wan,) = summary["k_auto_vs_best_fixed"]["100"]
    assert (lan["best_k"], wan["best_k"]) == (3, 10)
    assert lan["auto_over_best"] == pytest.approx(48 / 50)
    assert wan["auto_over_best"] == pytest.approx(5.7 / 6.0)
    assert summary["ring_over_hub"] == {"delay_ms": 100.0, "ratio": pytest.approx(3.0 / 2.4)}
    pp_at_100 = results.find("pp", 100.0)
    assert pp_at_100 is not None and pp_at_100.tokens_per_s == pytest.approx(2.25)  # median


def test_a_ratio_skips_repeats_where_either_side_did_not_run() -> None:
    """An interrupted run: the second repeat has PP but not the full stack."""
    configurations = build_configurations(["ngram"], baseline=False, hub_delay=None, ks=("auto",))
    by_key = {c.key: c for c in configurations}
    results = Results(configurations, [25.0], repeats=2)
    results.add(by_key["pp"], 25.0, 0, _run(10.0))
    results.add(by_key["pp"], 25.0, 1, _run(12.0))
    results.add(by_key["pp+sd+mb/2/kauto/ngram"], 25.0, 0, _run(30.0))
    assert results.summary()["full_stack_over_pp"] == {"25": pytest.approx(3.0)}
