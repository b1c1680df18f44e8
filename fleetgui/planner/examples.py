"""Model shapes and fleets for examples, tests and benchmarks of the planner.

The models are profiles only (no weights): the shapes of Llama-3-8B and Llama-3-70B class models,
and of SmolLM2-135M (the real model the fleet is measured with). Device speeds are per layer of the
model they are used with, at int4.
"""

from __future__ import annotations

import random

from fleetgui.planner.model_profile import ModelProfile, config_parameters
from fleetgui.planner.profiles import DeviceProfile

GB = 1_000_000_000
WIFI = {"rtt_ms": 6.0, "mbit_s": 200.0}  # a typical home Wi-Fi link to the coordinator
WIRED = {"rtt_ms": 0.5, "mbit_s": 880.0}  # gigabit Ethernet


def llama_8b_like(
    streams: int = 1, weight_format: str = "int4", context: int = 4096
) -> ModelProfile:
    """32 layers of 218M parameters, 8 KV heads of 128, 128k vocabulary, untied."""
    return ModelProfile(
        model_id="llama-8b-like@example",
        n_layers=32,
        weight_format=weight_format,
        layer_parameters=218_000_000,
        embedding_parameters=525_336_576,
        lm_head_parameters=525_340_672,
        kv_elements_per_token_per_layer=2 * 8 * 128,
        hidden_size=4096,
        vocab_size=128_256,
        context_length=context,
        streams=streams,
    )


def llama_70b_like(
    streams: int = 1, weight_format: str = "int4", context: int = 4096
) -> ModelProfile:
    """80 layers of 856M parameters, 8 KV heads of 128, 128k vocabulary, untied."""
    return ModelProfile(
        model_id="llama-70b-like@example",
        n_layers=80,
        weight_format=weight_format,
        layer_parameters=856_000_000,
        embedding_parameters=1_050_673_152,
        lm_head_parameters=1_050_681_344,
        kv_elements_per_token_per_layer=2 * 8 * 128,
        hidden_size=8192,
        vocab_size=128_256,
        context_length=context,
        streams=streams,
    )


def smollm2_135m_like(
    streams: int = 1, weight_format: str = "int4", context: int = 4096
) -> ModelProfile:
    """SmolLM2-135M's shape: 30 layers of 3.5M parameters, 3 KV heads of 64, hidden 576, a 49152
    vocabulary whose tied embedding the last stage holds a copy of (lm_head ~8 layers' worth)."""
    config = {
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "intermediate_size": 1536,
        "vocab_size": 49152,
    }
    layer, embedding, lm_head = config_parameters(config)
    return ModelProfile(
        model_id="smollm2-135m-like@example",
        n_layers=30,
        weight_format=weight_format,
        layer_parameters=layer,
        embedding_parameters=embedding,
        lm_head_parameters=lm_head,
        kv_elements_per_token_per_layer=2 * 3 * 64,
        hidden_size=576,
        vocab_size=49152,
        context_length=context,
        streams=streams,
    )


# One core of the 2-core test VM running SmolLM2-135M at int4: two llama.cpp processes, each a
# whole copy on its own core, made ~155 tokens/s in all, so ~12.9 ms a token over 30 layers and
# an lm_head of ~8 layers' worth. A coordinator and a worker on loopback spent 1.74 ms a token
# on the ring besides compute (docs/performance.md, "Fleet on loopback"): the link's round trip.
ONE_CORE_SMOLLM2_MS_PER_LAYER = 1000.0 / 77.5 / 38.0
LOOPBACK = {"rtt_ms": 1.74, "mbit_s": 8000.0}


def device(
    name: str,
    memory_gb: float,
    ms_per_layer: float,
    *,
    rtt_ms: float = WIRED["rtt_ms"],
    mbit_s: float = WIRED["mbit_s"],
    disk_gb_s: float = 1.0,
) -> DeviceProfile:
    """A device profile in friendly units (GB, ms, Mbit/s, GB/s)."""
    return DeviceProfile(
        name=name,
        memory_bytes=int(memory_gb * GB),
        ms_per_layer=ms_per_layer,
        disk_read_bytes_per_s=disk_gb_s * GB,
        rtt_ms=rtt_ms,
        bandwidth_bytes_per_s=mbit_s * 1e6 / 8,
    )


KINDS = (  # (kind, memory GB range, ms per 70B-class int4 layer range)
    ("ultra-laptop", (12.0, 28.0), (3.0, 5.0)),
    ("desktop", (24.0, 56.0), (2.5, 4.0)),
    ("old-pc", (6.0, 14.0), (9.0, 16.0)),
)


def random_fleet(size: int, rng: random.Random, *, speed_scale: float = 1.0) -> list[DeviceProfile]:
    """A random home fleet: laptops, desktops and old PCs, half wired and half on Wi-Fi."""
    devices = []
    for index in range(size):
        kind, memory, ms = KINDS[rng.randrange(len(KINDS))]
        wired = index == 0 or rng.random() < 0.5
        devices.append(
            device(
                f"{kind}-{index:02d}",
                rng.uniform(*memory),
                rng.uniform(*ms) * speed_scale,
                rtt_ms=rng.uniform(0.2, 1.0) if wired else rng.uniform(2.0, 8.0),
                mbit_s=rng.uniform(600, 940) if wired else rng.uniform(60, 320),
                disk_gb_s=rng.uniform(0.3, 3.0),
            )
        )
    return devices
