"""How close an export's next-token distributions are to its model's, as stored in the manifest.

``fleetgui verify`` measures it (:mod:`fleetgui.export.verify`); ``fleetgui export`` and
``fleetgui verify`` write it into ``manifest.json``; the app shows it beside the weight format.
It lives apart from the verifier so that reading a manifest needs neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REFERENCE_HF_FP32 = "hf-fp32"


@dataclass(frozen=True)
class ExportQuality:
    """The export's agreement with the reference model over the verified positions."""

    top1_agreement: float  # share of positions whose argmax is the reference's (exact ties count)
    mean_kl: float  # mean KL(p_reference || p_export) per position, in nats
    positions: int  # how many positions were compared
    passed: bool  # whether the measures met ``thresholds``
    thresholds: dict[str, float] = field(default_factory=dict)  # e.g. {"min_top1_agreement": 0.9}
    reference: str = REFERENCE_HF_FP32  # what the export was compared with
    max_logit_diff: float | None = None  # largest |logit difference|, what fp32 is judged by

    def to_dict(self) -> dict[str, Any]:
        return {
            "top1_agreement": self.top1_agreement,
            "mean_kl": self.mean_kl,
            "positions": self.positions,
            "passed": self.passed,
            "thresholds": dict(self.thresholds),
            "reference": self.reference,
            "max_logit_diff": self.max_logit_diff,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportQuality:
        max_diff = data.get("max_logit_diff")
        return cls(
            top1_agreement=float(data["top1_agreement"]),
            mean_kl=float(data["mean_kl"]),
            positions=int(data["positions"]),
            passed=bool(data["passed"]),
            thresholds={str(k): float(v) for k, v in dict(data.get("thresholds", {})).items()},
            reference=str(data.get("reference", REFERENCE_HF_FP32)),
            max_logit_diff=None if max_diff is None else float(max_diff),
        )

    def label(self) -> str:
        """Short form for a status line, e.g. ``top-1 99.2 %`` (``, failed`` when it did)."""
        text = f"top-1 {self.top1_agreement * 100:.1f} %"
        return text if self.passed else f"{text}, failed verification"


def weights_label(weight_format: str, quality: ExportQuality | None) -> str:
    """The weight format with the export's measured quality, e.g. ``int8 · top-1 99.2 %``."""
    if quality is None:
        return f"{weight_format} · not verified"
    return f"{weight_format} · {quality.label()}"
