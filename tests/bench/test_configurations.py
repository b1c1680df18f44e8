"""The bench's configurations (``fleetgui.bench.configurations``), by tables: those of the
paper's tables, the hub compared only with a second worker, only the modes asked for. (The
other pure parts of ``fleetgui bench`` are in the files beside this one.)"""

from __future__ import annotations

from fleetgui.bench.configurations import (
    Configuration,
    Measurement,
    build_configurations,
    full_stack,
)
from fleetgui.bench.options import DEFAULT_MODES
from fleetgui.modes import Mode


def test_the_configurations_follow_the_papers_tables() -> None:
    configurations = build_configurations(["draft", "ngram"], baseline=True, hub_delay=100.0)
    keys = [c.key for c in configurations]
    assert keys[:4] == ["monolithic", "pp", "pp+mb/2", "pp+mb/3"]
    assert keys.count("pp+sd/kauto/draft") == keys.count("pp+sd/kauto/ngram") == 1
    assert [k for k in keys if k.startswith("pp+sd/") and k.endswith("/ngram")] == [
        f"pp+sd/k{k}/ngram" for k in (1, 3, 5, 7, 10, "auto")
    ]
    # the full stack uses the given drafter, not n-gram
    assert [k for k in keys if k.startswith("pp+sd+mb")] == [
        "pp+sd+mb/2/kauto/draft",
        "pp+sd+mb/3/kauto/draft",
    ]
    assert keys[-4:] == ["ttft/16", "ttft/128", "ttft/512", "pp/hub"]
    assert len(set(keys)) == len(keys)
    hub = configurations[-1]
    assert hub.runs_at(100.0) and not hub.runs_at(0.0)
    assert not configurations[0].runs_at(0.0)  # the baseline runs once, on no network
    assert full_stack(configurations) == Configuration(Mode.PP_SD_MB, streams=2, draft="draft")


def test_without_a_second_worker_there_is_no_hub_to_compare() -> None:
    configurations = build_configurations(["ngram"], baseline=False, hub_delay=None)
    assert all(c.topology == "ring" for c in configurations)
    assert all(c.mode != Measurement.MONOLITHIC for c in configurations)


def test_modes_keep_only_what_was_asked_for() -> None:
    """``--modes pp,pp+sd,hub``: the K comparison and the hub, nothing else; the draft flags
    decide the drafters (``--no-ngram`` leaves n-gram out beside a draft model)."""
    from fleetgui.bench.options import modes

    configurations = build_configurations(
        ["draft"], baseline=True, hub_delay=100.0, kinds=modes("pp,pp+sd,hub")
    )
    keys = [c.key for c in configurations]
    assert keys == ["pp", *(f"pp+sd/k{k}/draft" for k in (1, 3, 5, 7, 10, "auto")), "pp/hub"]
    assert full_stack(configurations) is None
    everything = build_configurations(["draft"], baseline=True, hub_delay=100.0)
    assert everything == build_configurations(
        ["draft"], baseline=True, hub_delay=100.0, kinds=modes(DEFAULT_MODES)
    )
