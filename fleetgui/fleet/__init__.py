"""The coordinator's side of the fleet: links to workers, deployment, the ring route,
failover and re-planning, pairing and the local fleet."""
