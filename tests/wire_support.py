"""What the tests of the wire format share (``tests/net``): payloads of token ids and hidden
states, frames as the peer receives them, and the sampling fields and draft distribution heads
carry."""

from __future__ import annotations

import numpy as np

from fleetgui.generation_config import GenerationConfig
from fleetgui.net.protocol import FrameLike
from fleetgui.runtime.head import SparseDist

RNG = np.random.default_rng(0)
PARAMS = GenerationConfig(temperature=0.7, top_k=40, top_p=0.9, seed=1234)
DIST_A = SparseDist.from_dense([0.1, 0.0, 0.6, 0.3])  # float32


def tokens(n: int) -> np.ndarray:
    """Token ids ``[1, n]``."""
    return RNG.integers(0, 32000, size=(1, n), dtype=np.int64)


def hidden(n: int, dtype: type = np.float32) -> np.ndarray:
    """Hidden states ``[1, n, 16]``."""
    return RNG.standard_normal((1, n, 16)).astype(dtype)


def wire(frames: list[FrameLike]) -> list[bytes]:
    """What the peer receives: plain bytes, as ZeroMQ would deliver them."""
    return [bytes(f) for f in frames]
