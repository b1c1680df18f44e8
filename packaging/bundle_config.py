"""What the two PyInstaller bundles hold, shared by ``fleetgui-worker.spec`` and
``fleetgui-app.spec`` (and read by ``tests/e2e/test_packaging.py``).

* :func:`version` is ``fleetgui.__version__``, read from the source without importing fleetgui;
  :func:`write_windows_version_file` turns it into the version resource of each ``.exe`` (which
  the Inno Setup script reads back, so the version lives in one place).
* :data:`WORKER_EXCLUDES` keeps the worker bundle runtime-only: no Qt, torch, transformers or
  exporter stack; :data:`APP_EXCLUDES` keeps other Qt bindings and unused heavy packages out of
  the app.
* The hooks in ``packaging/hooks`` collect what PyInstaller's own analysis misses (OpenVINO's
  device plugins and frontends, the openvino_tokenizers extension, zeroconf's compiled modules).
"""

from __future__ import annotations

import ast
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGING = Path(__file__).resolve().parent
ROOT = PACKAGING.parent
HOOKS = PACKAGING / "hooks"
RESOURCES = ROOT / "resources"
ICON_ICO = RESOURCES / "icons" / "fleetgui.ico"

WORKER_NAME = "fleetgui-worker"
#: Windows only: the same worker without a console window, started at login by the installer.
WORKER_BACKGROUND_NAME = "fleetgui-worker-background"
APP_NAME = "fleetgui"
#: Windows only: the app folder's console twin of the windowed ``fleetgui.exe``, for the CLI.
APP_CLI_NAME = "fleetgui-cli"

COMPANY = "fleetgui developers"
PRODUCT = "fleetgui"
COPYRIGHT = "Apache-2.0, the fleetgui developers"

#: Frontends the worker needs: it only reads OpenVINO IR (``.xml`` + ``.bin``) shards.
WORKER_FRONTENDS = ("ir",)

_QT_AND_GUI = (
    "PySide6",
    "shiboken6",
    "PySide2",
    "PyQt5",
    "PyQt6",
    "qasync",
    "pyqtgraph",
    "keyring",
    "tkinter",
    "_tkinter",
    "matplotlib",
)
_EXPORT_STACK = (
    "torch",
    "torchvision",
    "torchaudio",
    "torchgen",
    "functorch",
    "triton",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface_hub",
    "accelerate",
    "datasets",
    "nncf",
    "optimum",
    "openvino_genai",
    "onnx",
    "onnxruntime",
    "sentencepiece",
    "tiktoken",
    "tensorflow",
    "jax",
    "jaxlib",
    "paddle",
)
_NOT_USED = (
    "scipy",
    "sympy",
    "pandas",
    "sklearn",
    "IPython",
    "jupyter",
    "notebook",
    "pytest",
    "mypy",
    "ruff",
    "setuptools",
    "pip",
)

#: Modules the worker bundle must not contain (also what the packaging test scans for).
WORKER_EXCLUDES: list[str] = [*_QT_AND_GUI, *_EXPORT_STACK, *_NOT_USED]
#: The fleetgui parts only the app uses; the worker's command line still lists their commands.
WORKER_EXCLUDES += ["fleetgui.app"]
#: OpenVINO's model converters (``ov.convert_model``; imported in a try block) and its Python
#: frontends: a worker only reads IR, and these drag in their frontend libraries.
WORKER_EXCLUDES += [
    "openvino.tools",
    "openvino.torch",
    *(f"openvino.frontend.{name}" for name in ("pytorch", "tensorflow", "jax", "paddle", "onnx")),
    "yaml",  # numpy.__config__.show_config only
]

#: torchvision is hidden from imports at run time (fleetgui/torch_env.py): leave it out.
APP_EXCLUDES: list[str] = [
    "torchvision",
    "torchaudio",
    "PySide2",
    "PyQt5",
    "PyQt6",
    "tkinter",
    "_tkinter",
    "matplotlib",
    "tensorflow",
    "jax",
    "jaxlib",
    "paddle",
    "onnxruntime",
    "IPython",
    "jupyter",
    "notebook",
    "pytest",
    "mypy",
    "ruff",
]

#: Loaded by name at run time, so PyInstaller's import analysis cannot see them.
APP_HIDDEN_IMPORTS: list[str] = [
    "fleetgui.app.views.main_window",
    "PySide6.QtSvg",  # the SVG window icon
]

#: Architectures ``fleetgui export`` supports: transformers imports their modules lazily.
#: (Module names under ``transformers.models``: model_type ``gemma3_text`` lives in ``gemma3``.)
TRANSFORMERS_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")


def version() -> str:
    """``fleetgui.__version__``, read from ``fleetgui/__init__.py`` without importing it."""
    tree = ast.parse((ROOT / "fleetgui" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    raise ValueError("fleetgui/__init__.py defines no __version__ = '...'")


def version_numbers(text: str) -> tuple[int, int, int, int]:
    """``"0.1.0"`` -> ``(0, 1, 0, 0)``; a suffix such as ``rc1`` or ``.dev3`` is dropped."""
    numbers: list[int] = []
    for part in text.split(".")[:4]:
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
    if not numbers:
        raise ValueError(f"version {text!r} does not start with a number")
    numbers += [0] * (4 - len(numbers))
    return (numbers[0], numbers[1], numbers[2], numbers[3])


def windows_version_text(exe_name: str, description: str) -> str:
    """The ``VSVersionInfo`` text PyInstaller embeds in ``exe_name``.exe (``EXE(version=...)``).

    ProductVersion is the plain package version: ``packaging/windows/fleetgui.iss`` reads it
    back from ``fleetgui.exe`` as the installer's version."""
    text = version()
    numbers = version_numbers(text)
    strings = {
        "CompanyName": COMPANY,
        "FileDescription": description,
        "FileVersion": text,
        "InternalName": exe_name,
        "LegalCopyright": COPYRIGHT,
        "OriginalFilename": f"{exe_name}.exe",
        "ProductName": PRODUCT,
        "ProductVersion": text,
    }
    string_structs = ",\n".join(
        f"          StringStruct({key!r}, {value!r})" for key, value in strings.items()
    )
    return f"""# UTF-8
# Generated by packaging/bundle_config.py from fleetgui.__version__ ({text}); do not edit.
VSVersionInfo(
  ffi=FixedFileInfo(
    filevers={numbers},
    prodvers={numbers},
    mask=0x3f,
    flags=0x0,
    OS=0x40004,
    fileType=0x1,
    subtype=0x0,
    date=(0, 0)
  ),
  kids=[
    StringFileInfo(
      [
        StringTable(
          '040904B0',
          [
{string_structs}
          ]
        )
      ]
    ),
    VarFileInfo([VarStruct('Translation', [1033, 1200])])
  ]
)
"""


def write_windows_version_file(folder: Path, exe_name: str, description: str) -> Path:
    """Write ``folder/version-<exe_name>.txt`` (only if changed, so rebuilds stay cached)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"version-{exe_name}.txt"
    text = windows_version_text(exe_name, description)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
        log.info("wrote %s", path)
    return path


def resource_datas() -> list[tuple[str, str]]:
    """``resources/`` as ``<bundle>/resources``: the app finds it next to the ``fleetgui``
    package (``fleetgui/app/application.py`` looks two folders above its module)."""
    if not RESOURCES.is_dir():
        raise FileNotFoundError(f"{RESOURCES} is missing")
    return [(str(RESOURCES), "resources")]


def icon() -> str | None:
    """The ``.ico`` for the executables (Windows only; None elsewhere)."""
    if sys.platform != "win32":
        return None
    if not ICON_ICO.is_file():
        raise FileNotFoundError(f"{ICON_ICO} is missing: run python packaging/make_icon.py")
    return str(ICON_ICO)


def without_stray_openvino_copies(
    toc: list[tuple[str, str, str]], binaries: list[tuple[str, str, str]]
) -> list[tuple[str, str, str]]:
    """``toc`` (PyInstaller entries ``(dest, src, typecode)``: ``a.binaries`` or ``a.datas``)
    without the extra copies of OpenVINO's libraries that dependency analysis puts at the
    bundle's top level (files, or on Linux symlinks, which PyInstaller lists among the datas);
    ``binaries`` is ``a.binaries``, which holds the real ones in ``openvino/libs``.

    ``libopenvino`` finds its plugins and frontends in its own folder. Two copies of it (a
    symlink on Linux, a second file on Windows, where the DLL search order between the two
    folders is unspecified) could make the process load the top-level one and then find no
    device. The top-level copies are never needed: ``openvino/__init__`` adds ``openvino/libs``
    to the DLL search path on Windows, the libraries carry ``$ORIGIN`` run paths on Linux, and
    the extension libraries load after ``libopenvino`` is already in memory."""
    in_libs = {
        Path(dest).name
        for dest, _, _ in binaries
        if Path(dest).parent.as_posix() == "openvino/libs"
    }
    kept = []
    for entry in toc:
        dest = Path(entry[0])
        if dest.parent == Path(".") and dest.name in in_libs:
            log.info("leaving out the top-level copy %s (it is in openvino/libs)", dest.name)
            continue
        kept.append(entry)
    return kept


def transformers_hidden_imports() -> list[str]:
    """The modeling and tokenizer modules of the exportable architectures, which transformers
    imports lazily by name (``AutoModelForCausalLM`` from ``config.model_type``)."""
    modules = []
    for arch in TRANSFORMERS_ARCHITECTURES:
        base = f"transformers.models.{arch}"
        modules += [base, f"{base}.configuration_{arch}", f"{base}.modeling_{arch}"]
    return modules
