"""``fleetgui demo``: what it serves and how it starts.

* :mod:`fleetgui.demo.smollm2` fetches the real chat model (SmolLM2-135M-Instruct) once;
* :mod:`fleetgui.demo.models` says what the demo serves and exports it (the real model, its
  draft, or the offline toy pair);
* :mod:`fleetgui.demo.start` starts the demo on a local two-worker fleet.

The models the demo trains on this PC are built by :mod:`fleetgui.training`. Nothing is
imported here, so importing a submodule stays cheap.
"""
