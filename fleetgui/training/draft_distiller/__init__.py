"""The draft distiller: a 4-layer draft of SmolLM2-135M-Instruct, distilled on this PC.

:func:`~fleetgui.training.draft_distiller.distiller.build_smollm2_draft` builds (or reuses) it
from the target's own answers (:mod:`~fleetgui.training.draft_distiller.target_answers`) to
programmatic questions (:mod:`~fleetgui.training.draft_distiller.chat_prompts`), trained on a
candidate set of tokens (:mod:`~fleetgui.training.draft_distiller.candidates`).
"""
