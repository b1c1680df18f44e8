"""Weight formats: NNCF weight compression for int8/int4, fp16 at save time."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openvino as ov

log = logging.getLogger(__name__)

WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
INT4_GROUP_SIZE = 128


def check_weight_format(weights: str) -> None:
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {weights!r}: choose one of {WEIGHT_FORMATS}")


def compress_weights(model: ov.Model, weights: str) -> ov.Model:
    """Compress a stage's weights in place of the fp32 ones (int8, int4), data-free.

    ``all_layers=True``: without it NNCF takes a middle stage's last MatMul for the model's
    output layer and keeps it INT8, so middle stages would be compressed unlike the rest.
    INT4 uses symmetric groups of 128; a channel that 128 does not divide (tiny models) gets the
    largest group size that does, down to 32, and is kept INT8 beyond that.
    """
    check_weight_format(weights)
    if weights in ("fp32", "fp16"):
        return model  # fp16 is applied when the model is saved
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedCompressionParameters,
        GroupSizeFallbackMode,
    )

    if weights == "int8":  # INT8 modes compress every layer already (and refuse all_layers)
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    return nncf.compress_weights(
        model,
        mode=nncf.CompressWeightsMode.INT4_SYM,
        group_size=INT4_GROUP_SIZE,
        ratio=1.0,
        all_layers=True,
        advanced_parameters=AdvancedCompressionParameters(
            group_size_fallback_mode=GroupSizeFallbackMode.ADJUST
        ),
    )


def save_compressed(model: ov.Model, xml_path: str, weights: str) -> None:
    """Save a stage; fp16 halves the fp32 weights on disk, int formats are already packed."""
    import openvino as ov

    ov.save_model(model, xml_path, compress_to_fp16=(weights == "fp16"))
