"""The time and memory model every strategy is scored with (solver, baselines, brute force).

Time of one token for one user, through a ring ``c = d0 -> d1 -> ... -> dk -> c``::

    T = sum_d n_d * ms_per_layer_d          (each device's decoder layers)
      + r * ms_per_layer_last               (lm_head on the last device; r = lm_head / layer
                                             parameters, since decode time ~ weight bytes)
      + sum of the k + 1 hops               (none if the coordinator runs everything)

Hops: every PC hangs off one switch or access point, and the coordinator's measured
``rtt_ms`` and ``bandwidth_bytes_per_s`` to device d describe d's own link (the coordinator's link
is taken as the fast one: its latency 0 and bandwidth unlimited). A message from i to j crosses
i's link and j's link, so ``hop(i, j) = rtt_i / 2 + rtt_j / 2 + A / bw_i + A / bw_j``, where ``A``
is the activation bytes of one position (the return hop carries the same). For the coordinator
this is ``rtt / 2 + A / bandwidth`` as measured; between two workers both links add up (exact for
two Wi-Fi PCs talking through an access point, pessimistic for switched Ethernet). Every device
in the ring has one hop in and one out, so the ring's hops total ``sum over workers of
rtt_d + 2 A / bw_d``: only *which* devices take part matters, not their order.

Throughput with ``S`` streams in flight: aggregate tokens/s ~ ``min(S / T, 1 / B)``, where the
bottleneck ``B`` is the busiest resource per token: a device's compute, or its link, which carries
two messages per token (``2 A / bw_d``). Propagation latency does not occupy a link, so it counts
in ``T`` only.

Memory of a device: its layers' weights and KV cache (context x streams), the embedding on the
coordinator, the lm_head on the last device, plus the runtime; it must stay within
``memory_bytes - headroom``.

Several independent groups serving users side by side (pipelines over disjoint PCs, or whole
copies), and a group that does not hold the coordinator, are costed with these functions in
:mod:`fleetgui.planner.groups`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fleetgui.planner.model_profile import ModelProfile
from fleetgui.planner.plan import LeftOut, Plan, PlanConfig, StageAssignment
from fleetgui.planner.profiles import DeviceProfile
from fleetgui.shard import Shard

log = logging.getLogger(__name__)


def link_latency_ms(device: DeviceProfile, is_coordinator: bool) -> float:
    """One-way latency of the device's own link."""
    return 0.0 if is_coordinator else device.rtt_ms / 2.0


def link_transfer_ms(device: DeviceProfile, n_bytes: int, is_coordinator: bool) -> float:
    """Time the device's own link takes to carry ``n_bytes``."""
    if is_coordinator:
        return 0.0
    return 1000.0 * n_bytes / device.bandwidth_bytes_per_s


def hop_ms(
    src: DeviceProfile, dst: DeviceProfile, n_bytes: int, coordinator: DeviceProfile
) -> float:
    """Predicted time of one message from ``src`` to ``dst`` (see the module docstring)."""
    src_c, dst_c = src.name == coordinator.name, dst.name == coordinator.name
    return (
        link_latency_ms(src, src_c)
        + link_latency_ms(dst, dst_c)
        + link_transfer_ms(src, n_bytes, src_c)
        + link_transfer_ms(dst, n_bytes, dst_c)
    )


def ring_link_ms(device: DeviceProfile, model: ModelProfile, is_coordinator: bool) -> float:
    """What taking part adds to the hops of a token: one message in and one out."""
    if is_coordinator:
        return 0.0
    return 2.0 * (
        link_latency_ms(device, False) + link_transfer_ms(device, model.activation_bytes, False)
    )


def link_busy_ms(device: DeviceProfile, model: ModelProfile, is_coordinator: bool) -> float:
    """How long the device's link is busy per token (a throughput bottleneck candidate)."""
    return 2.0 * link_transfer_ms(device, model.activation_bytes, is_coordinator)


def lm_head_ms(device: DeviceProfile, model: ModelProfile) -> float:
    return device.ms_per_layer * model.lm_head_layer_ratio


def capacity_bytes(device: DeviceProfile, config: PlanConfig) -> int:
    """Memory a stage may use on the device: its memory minus the headroom."""
    return device.memory_bytes - config.headroom_bytes


def stage_memory_bytes(
    n_layers: int, model: ModelProfile, config: PlanConfig, *, first: bool, last: bool
) -> int:
    return (
        n_layers * model.layer_memory_bytes
        + config.runtime_bytes
        + (model.embedding_bytes if first else 0)
        + (model.lm_head_bytes if last else 0)
    )


def evaluate(
    ring: Sequence[tuple[DeviceProfile, int]],
    model: ModelProfile,
    config: PlanConfig,
    *,
    left_out: Sequence[LeftOut] = (),
    solver: str = "",
) -> Plan:
    """Score a ring of ``(device, n_layers)``, coordinator first, as a :class:`Plan`.

    Memory is not enforced here: devices over their capacity are listed in ``overcommitted``.
    """
    if not ring:
        raise ValueError("a ring needs at least the coordinator")
    if any(n < 1 for _, n in ring):
        raise ValueError("every device in a ring needs at least one layer")
    if sum(n for _, n in ring) != model.n_layers:
        raise ValueError(f"a ring must hold all {model.n_layers} layers")
    coordinator = ring[0][0]
    stages: list[StageAssignment] = []
    over: list[str] = []
    bottleneck = 0.0
    start = 0
    for index, (device, n) in enumerate(ring):
        first, last = index == 0, index == len(ring) - 1
        compute = n * device.ms_per_layer + (lm_head_ms(device, model) if last else 0.0)
        hop_in = (
            0.0
            if first
            else hop_ms(ring[index - 1][0], device, model.activation_bytes, coordinator)
        )
        hop_out = (
            hop_ms(device, coordinator, model.activation_bytes, coordinator)
            if last and not first
            else 0.0
        )
        memory = stage_memory_bytes(n, model, config, first=first, last=last)
        if memory > capacity_bytes(device, config):
            over.append(device.name)
        weights = memory - n * model.layer_kv_bytes - config.runtime_bytes
        stream_kv = n * model.kv_bytes_per_token_per_layer * model.context_length
        room = capacity_bytes(device, config) - (memory - n * model.layer_kv_bytes)
        bottleneck = max(bottleneck, compute, link_busy_ms(device, model, first))
        stages.append(
            StageAssignment(
                device=device.name,
                shard=Shard(model.model_id, start, start + n, model.n_layers),
                memory_bytes=memory,
                compute_ms=compute,
                hop_in_ms=hop_in,
                hop_out_ms=hop_out,
                load_s=weights / device.disk_read_bytes_per_s,
                stream_kv_bytes=stream_kv,
                max_streams=max(0, room // stream_kv) if stream_kv else 0,
            )
        )
        start += n
    return Plan(
        model_id=model.model_id,
        weight_format=model.weight_format,
        objective=config.objective,
        streams=model.streams,
        context_length=model.context_length,
        stages=tuple(stages),
        left_out=tuple(left_out),
        predicted_ms_per_token=sum(s.predicted_ms for s in stages),
        bottleneck_ms=bottleneck,
        overcommitted=tuple(over),
        solver=solver,
    )
