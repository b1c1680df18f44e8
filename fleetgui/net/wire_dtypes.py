"""Tensor element types on the wire and their numpy dtypes (always little-endian)."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np


class DType(enum.IntEnum):
    """Tensor element types on the wire (always little-endian)."""

    I64 = 1
    I32 = 2
    F32 = 3
    F16 = 4
    U8 = 5
    F64 = 6  # SparseDist probabilities may be float64; keeping them exact keeps sampling exact


NUMPY_DTYPES: dict[DType, np.dtype[Any]] = {
    DType.I64: np.dtype("<i8"),
    DType.I32: np.dtype("<i4"),
    DType.F32: np.dtype("<f4"),
    DType.F16: np.dtype("<f2"),
    DType.U8: np.dtype("u1"),
    DType.F64: np.dtype("<f8"),
}
CODE_BY_DTYPE = {dtype.newbyteorder("="): code for code, dtype in NUMPY_DTYPES.items()}
# Plain-int lookups for the decoder: enum construction costs microseconds per call.
DTYPE_BY_CODE = {int(code): dtype for code, dtype in NUMPY_DTYPES.items()}
