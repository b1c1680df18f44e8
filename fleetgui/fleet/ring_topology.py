"""The two ways activations can travel between a fleet's workers."""

import enum


class Topology(enum.StrEnum):
    """How activations travel between workers. A ring passes them worker to worker (N-1 hops
    plus the answer); a hub sends every worker's output back through the coordinator (2(N-1)
    hops), which ``fleetgui bench`` measures to show what the ring saves on slow links."""

    RING = "ring"
    HUB = "hub"
