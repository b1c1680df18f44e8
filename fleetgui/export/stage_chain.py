"""Run an export's stages one after another in this process, synchronously.

The simplest driver of the shards: used by ``fleetgui verify`` and by the export benchmark's
"plain Python loop". The runtime (``fleetgui.runtime``) drives stages asynchronously, per stream,
across PCs; this one drives one sequence, in order, on one device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from fleetgui.export.manifest import Manifest, read_manifest

log = logging.getLogger(__name__)

# Compile settings for exactness checks: no bf16 compute, no KV-cache compression.
EXACT_CONFIG: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


@dataclass
class StepOutput:
    """What one forward step of the chain produced."""

    stage_outputs: list[np.ndarray]  # each stage's main output (hidden_out, or logits if last)
    logits: np.ndarray  # [1, seq, vocab]
    top1_ids: np.ndarray | None = None  # [1, seq]
    top1_probs: np.ndarray | None = None  # [1, seq]


@dataclass
class StageChain:
    """The compiled stages of one export and one sequence's KV state in each."""

    manifest: Manifest
    requests: list[ov.InferRequest]
    mask: list[int] = field(default_factory=list)  # attention_mask over every KV entry so far
    next_position: int = 0

    @classmethod
    def load(
        cls,
        folder: Path,
        *,
        device: str = "CPU",
        config: dict[str, Any] | None = None,
        core: ov.Core | None = None,
    ) -> StageChain:
        manifest = read_manifest(folder)
        core = core or ov.Core()
        requests = []
        for stage in manifest.stages:
            for part in stage.model_files:  # a chunked stage's parts run like stages
                compiled = core.compile_model(Path(folder) / part, device, dict(config or {}))
                requests.append(compiled.create_infer_request())
        return cls(manifest, requests)

    def reset(self) -> None:
        for request in self.requests:
            request.reset_state()
        self.mask = []
        self.next_position = 0

    def forward(self, token_ids: list[int]) -> StepOutput:
        """Feed ``token_ids`` (prompt chunk or decode tokens) through every stage."""
        n = len(token_ids)
        self.mask += [1] * n
        common = {
            "attention_mask": np.array([self.mask], dtype=np.int64),
            "position_ids": np.arange(self.next_position, self.next_position + n, dtype=np.int64)[
                None, :
            ],
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
        self.next_position += n
        main: np.ndarray = np.array([token_ids], dtype=np.int64)
        outputs: list[np.ndarray] = []
        result: dict[str, np.ndarray] = {}
        ends = {
            sum(len(s.model_files) for s in self.manifest.stages[: i + 1]) - 1
            for i in range(len(self.manifest.stages))
        }
        for index, request in enumerate(self.requests):
            compiled = request.get_compiled_model()
            inputs = {"input_ids" if index == 0 else "hidden_in": main, **common}
            names = {port.get_any_name() for port in compiled.inputs}
            request.infer({name: value for name, value in inputs.items() if name in names})
            result = {
                name: request.get_tensor(name).data.copy()
                for port in compiled.outputs
                for name in [port.get_any_name()]
            }
            main = result.get("hidden_out", result.get("logits"))  # type: ignore[assignment]
            if index in ends:  # report one output per stage, not per part
                outputs.append(main)
        return StepOutput(
            outputs, result["logits"], result.get("top1_ids"), result.get("top1_probs")
        )
