"""PyInstaller hook for ``openvino``: collect what the import analysis cannot see.

``libopenvino`` loads its device plugins (``openvino_intel_cpu_plugin`` and friends) and model
frontends (``openvino_ir_frontend``...) at run time from its own folder, ``openvino/libs``, by
name; pip wheels of OpenVINO 2024 and later ship no ``plugins.xml`` (the plugin list is built
in), older ones do. On Windows ``openvino/__init__.py`` also insists that ``openvino/libs``
exists. So the whole ``openvino/libs`` folder is collected in place: every shared library (the
core, TBB, hwloc, plugins), the selected frontends, and its data files (``plugins.xml`` when
present, ``cache.json``: the GPU plugin's kernel tuning cache).

Hook option (``hooksconfig={"openvino": {"frontends": ["ir"]}}``): the frontends to collect, by
name (``ir``, ``onnx``, ``paddle``, ``pytorch``, ``tensorflow``, ``tensorflow_lite``, ``jax``,
``gguf``); all of them by default.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from PyInstaller.utils.hooks import get_hook_config, get_package_paths

log = logging.getLogger(__name__)

FRONTEND = re.compile(r"openvino_(\w+?)_frontend")
DATA_SUFFIXES = (".xml", ".json")
SKIPPED_SUFFIXES = (".pc", ".lib", ".cmake", ".h", ".hpp")


def libs_dir() -> Path:
    _, package_dir = get_package_paths("openvino")
    return Path(package_dir) / "libs"


def hook(hook_api: Any) -> None:
    wanted = get_hook_config(hook_api, "openvino", "frontends")
    folder = libs_dir()
    if not folder.is_dir():
        log.warning("hook-openvino: %s not found; OpenVINO plugins are not collected", folder)
        return
    binaries: list[tuple[str, str]] = []
    datas: list[tuple[str, str]] = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.name.endswith(SKIPPED_SUFFIXES):
            continue
        match = FRONTEND.search(path.name)
        if match and wanted is not None and match.group(1) not in wanted:
            log.info("hook-openvino: leaving out frontend %s", path.name)
            continue
        if path.name.endswith(DATA_SUFFIXES):
            datas.append((str(path), "openvino/libs"))
        else:
            binaries.append((str(path), "openvino/libs"))
    if not any("plugin" in Path(src).name for src, _ in binaries):
        log.warning("hook-openvino: no device plugins found in %s", folder)
    log.info(
        "hook-openvino: %d libraries, %d data files from %s", len(binaries), len(datas), folder
    )
    hook_api.add_binaries(binaries)
    hook_api.add_datas(datas)
