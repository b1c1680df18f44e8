"""The monolithic baseline's openvino_genai properties: on one thread with fp32/fp16 weights it
computes in f32, as the loader makes a stage do (the CPU plugin's default bf16 dies with SIGFPE
there on an AMX Xeon, which killed ``fleetgui bench`` right after its first genai run)."""

from __future__ import annotations

import pytest

from fleetgui.bench.baseline import PRECISIONS, baseline_precisions, genai_properties
from fleetgui.runtime.loader import safe_stage_config
from fleetgui.runtime.ov_stage import StageConfig


@pytest.mark.parametrize("weights", ["fp32", "fp16"])
def test_one_thread_with_float_weights_never_runs_the_default_precision(weights: str) -> None:
    # the same rule as a stage's: what the loader chooses for auto there
    assert safe_stage_config(StageConfig(threads=1), weights).precision == "f32"
    for precision in PRECISIONS:
        props = genai_properties(precision, 1, weights)
        assert props == {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    assert baseline_precisions(1, weights) == ("f32",)  # the default run would be the same


@pytest.mark.parametrize(("threads", "weights"), [(1, "int8"), (1, "int4"), (4, "fp16")])
def test_elsewhere_the_default_precision_runs_beside_f32(threads: int, weights: str) -> None:
    assert genai_properties("default", threads, weights) == {"INFERENCE_NUM_THREADS": threads}
    assert genai_properties("f32", threads, weights)["INFERENCE_PRECISION_HINT"] == "f32"
    assert baseline_precisions(threads, weights) == ("default", "f32")
