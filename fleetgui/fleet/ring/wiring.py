"""The two ways activations can travel between a fleet's workers."""

import enum


class Wiring(enum.StrEnum):
    """How activations travel between workers. A ring passes them worker to worker (N-1 hops
    plus the answer); a hub sends every worker's output back through the coordinator (2(N-1)
    hops), which ``fleetgui bench`` measures to show what the ring saves on slow links. The
    values are what ``fleetgui bench`` writes and reads ("ring", "hub")."""

    RING = "ring"
    HUB = "hub"
