"""An export's stages chained by a minimal synchronous loop: the floor for a pass's cost.

No coordinator, no threads, no messages: each stage's InferRequest runs in turn on the calling
thread, one OpenVINO thread each. Benchmarks set the pipeline's figures beside it and derive
ceilings from it (:mod:`ceilings`).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetgui.runtime.loader import safe_stage_config
from fleetgui.runtime.ov_stage import StageConfig, infer_now, input_dtypes


class BareLoop:
    """The stages of ``export`` (the last one with the top-1 head) in one synchronous loop."""

    def __init__(self, export: Path, prompt_ids: list[int], max_tokens: int) -> None:
        import openvino as ov

        from fleetgui.export.manifest import read_manifest

        manifest = read_manifest(export)
        core = ov.Core()
        props = safe_stage_config(StageConfig(threads=1), manifest.weight_format).ov_properties()
        compiled = [
            core.compile_model(export / s.model_file, "CPU", props) for s in manifest.stages
        ]
        self.requests = [c.create_infer_request() for c in compiled]
        self.dtypes = [input_dtypes(c) for c in compiled]
        self.prompt_ids = prompt_ids
        self.mask = np.ones((1, len(prompt_ids) + max_tokens), dtype=np.int64)
        self.beam = np.zeros(1, dtype=np.int32)
        self.stage_ms = [0.0 for _ in self.requests]  # each stage's time in the last pass

    def _step(self, ids: list[int], position: int) -> int:
        n = len(ids)
        common = {
            "attention_mask": self.mask[:, : position + n],
            "position_ids": np.arange(position, position + n, dtype=np.int64)[None, :],
            "beam_idx": self.beam,
        }
        payload: Any = np.array([ids], dtype=np.int64)
        for index, request in enumerate(self.requests):
            main = "input_ids" if index == 0 else "hidden_in"
            started = time.perf_counter()
            infer_now(request, {main: payload, **common}, self.dtypes[index])
            self.stage_ms[index] = (time.perf_counter() - started) * 1000
            if index < len(self.requests) - 1:
                payload = request.get_tensor("hidden_out").data
        return int(self.requests[-1].get_tensor("top1_ids").data[0, -1])

    def _prefill(self) -> tuple[int, int]:
        for request in self.requests:
            request.reset_state()
        return self._step(self.prompt_ids, 0), len(self.prompt_ids)

    def decode_steps_ms(self, n_tokens: int) -> list[float]:
        """Each decode step's time after a fresh prefill of the prompt, in ms."""
        token, position = self._prefill()
        steps = []
        for _ in range(n_tokens - 1):
            started = time.perf_counter()
            token = self._step([token], position)
            steps.append((time.perf_counter() - started) * 1000)
            position += 1
        return steps

    def pass_ms(self, width: int, passes: int = 16) -> list[float]:
        """Each stage's median time for a pass of ``width`` positions (a K+1-position verify
        when ``width`` is K+1), over ``passes`` passes after a fresh prefill of the prompt."""
        if len(self.prompt_ids) + width * passes > self.mask.shape[1]:
            raise ValueError(f"{passes} passes of {width} positions overrun the loop's context")
        _, position = self._prefill()
        per_stage: list[list[float]] = [[] for _ in self.requests]
        for _ in range(passes):
            self._step([7] * width, position)
            position += width
            for index, ms in enumerate(self.stage_ms):
                per_stage[index].append(ms)
        return [statistics.median(times) for times in per_stage]
