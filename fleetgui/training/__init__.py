"""Training small models on this PC's CPU, deterministically, in minutes to an hour.

Shared by both trainers: the training loop and its schedule (:mod:`~fleetgui.training.train`),
greedy continuations (:mod:`~fleetgui.training.continuations`), draft/target agreement
(:mod:`~fleetgui.training.acceptance`), build progress (:mod:`~fleetgui.training.progress`)
and atomic output folders (:mod:`~fleetgui.training.build_folder`). The trainers:

* :mod:`fleetgui.training.toy_pair`: the offline toy pair, a small code Llama and its
  distilled draft, trained from scratch on the Python standard library;
* :mod:`fleetgui.training.draft_distiller`: SmolLM2-135M-Instruct's draft, distilled on this
  PC from the model's own answers.

torch, transformers and tokenizers are imported only when something is trained.
"""
