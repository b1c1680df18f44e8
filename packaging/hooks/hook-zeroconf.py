"""PyInstaller hook for ``zeroconf``: its Cython-compiled modules import their siblings from C
code, which the import analysis cannot read; collect every submodule."""

from __future__ import annotations

from PyInstaller.utils.hooks import collect_submodules

hiddenimports = collect_submodules("zeroconf")
