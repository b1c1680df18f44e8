"""The coordinator's side of the fleet, one folder per concept:

* :mod:`~fleetgui.fleet.ring`: the transport over the workers: a link to each, the route a
  request takes through the ring (or a hub), setting up a ring epoch, DECODE on one worker.
* :mod:`~fleetgui.fleet.placement`: which worker runs which exported stages, and the error when
  the workers left cannot run them all (pure functions).
* :mod:`~fleetgui.fleet.session`: ``FleetSession`` and its parts: connect, deploy (pushing the
  stage files), fail over; replicas of a model (:func:`fleetgui.assembler.aopen` opens them).
* :mod:`~fleetgui.fleet.replanning`: re-planning a running fleet when a device's speed drifts or
  a device is lost.
* :mod:`~fleetgui.fleet.profiling`: measured layer times for the planner.
* :mod:`~fleetgui.fleet.pairing`: finding and trusting workers (pinned keys, pairing codes, the
  workers added by address, ``--workers`` lists).
* :mod:`~fleetgui.fleet.local_fleet`: worker processes on this PC.
"""
