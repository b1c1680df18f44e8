"""``fleetgui bench``: every decoding mode measured side by side at several network delays.

* :mod:`~fleetgui.bench.configurations`: what is measured (the paper's tables);
* :mod:`~fleetgui.bench.options`: the command's flags, checked before any work;
* :mod:`~fleetgui.bench.links`, :mod:`~fleetgui.bench.netns`, :mod:`~fleetgui.bench.packet_hub`,
  :mod:`~fleetgui.bench.delay_proxy`: how the links get their delay;
* :mod:`~fleetgui.bench.fleet`: the workers on those links, pinned to cores;
* :mod:`~fleetgui.bench.sweep`, :mod:`~fleetgui.bench.measure`, :mod:`~fleetgui.bench.baseline`:
  the interleaved runs and what each one measures;
* :mod:`~fleetgui.bench.results`, :mod:`~fleetgui.bench.report`, :mod:`~fleetgui.bench.plot`:
  the figures, paired by repeat, as JSON, markdown and a PNG;
* :mod:`~fleetgui.bench.runner`: all of it for one run.
"""
