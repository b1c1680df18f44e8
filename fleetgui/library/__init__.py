"""The model library: the models on this PC that fleetgui can find, each described from its
metadata alone (never its weights) with whether fleetgui can use it and why not.

Where it looks (:class:`~fleetgui.library.roots.LibraryRoots`): the HuggingFace hub cache, LM
Studio's models folders, Ollama's model store, folders the user added, and fleetgui's own
exports. :class:`~fleetgui.library.scan.Library` scans them (caching what it read, so a
background refresh costs little) into :class:`~fleetgui.library.entry.ModelEntry` rows.
"""

from fleetgui.library.entry import Format, ModelEntry, ModelFacts, Source
from fleetgui.library.roots import LibraryRoots, default_roots
from fleetgui.library.scan import Library

__all__ = [
    "Format",
    "Library",
    "LibraryRoots",
    "ModelEntry",
    "ModelFacts",
    "Source",
    "default_roots",
]
