"""PyInstaller hook for ``openvino_tokenizers``: its OpenVINO extension library.

``openvino_tokenizers/__init__.py`` looks for ``openvino_tokenizers/lib/<libname>`` next to the
package and adds it to every ``openvino.Core``; nothing imports the library, so PyInstaller would
leave it out and tokenizer models (string operations) would fail to load.
"""

from __future__ import annotations

from pathlib import Path

from PyInstaller.utils.hooks import get_package_paths

_, _package_dir = get_package_paths("openvino_tokenizers")
_lib = Path(_package_dir) / "lib"

binaries = [
    (str(path), "openvino_tokenizers/lib")
    for path in sorted(_lib.iterdir())
    if path.is_file() and path.suffix in {".so", ".dll", ".dylib"}
]
if not binaries:
    raise SystemExit(f"hook-openvino_tokenizers: no extension library in {_lib}")
