"""Measured layer times for the planner, the coordinator's side: the probe stage of an export
and how a PC times it (:mod:`.probe_stage`), every PC measured at once for the plan preview
(:mod:`.layer_times`) and what that gives (:mod:`.measured`). The worker's side of a
measurement is :mod:`fleetgui.worker.probe_timing`."""
