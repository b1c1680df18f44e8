"""Weight formats: NNCF weight compression for int8/int4, fp16 at save time."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openvino as ov

log = logging.getLogger(__name__)

WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
INT4_GROUP_SIZE = 128


def check_weight_format(weights: str) -> None:
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {weights!r}: choose one of {WEIGHT_FORMATS}")


class _IntoOurLog(logging.Filter):
    """Passes NNCF's records to this module's logger instead of NNCF's own stdout handler:
    its tables go to fleetgui.log at debug level, its warnings stay warnings, stdout stays
    the command's."""

    def filter(self, record: logging.LogRecord) -> bool:
        level = logging.DEBUG if record.levelno <= logging.INFO else record.levelno
        log.log(level, "NNCF: %s", record.getMessage())
        return False


@contextlib.contextmanager
def _nncf_logs_into_ours() -> Iterator[None]:
    nncf_log = logging.getLogger("nncf")
    into_ours = _IntoOurLog()
    nncf_log.addFilter(into_ours)
    try:
        yield
    finally:
        nncf_log.removeFilter(into_ours)


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

    with _nncf_logs_into_ours():
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
