"""``fleetgui demo-model``: the offline demo target/draft pair (built for real, ``tiny`` size)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from fleetgui.errors import FleetguiError
from fleetgui.training.acceptance import block_acceptance
from fleetgui.training.progress import PHASE_LABELS, PHASE_WEIGHTS, BuildProgress, PhaseTracker
from fleetgui.training.toy_pair import INFO_FILE, build_demo_pair, load_pair
from fleetgui.training.toy_pair.corpus import code_only, is_eligible, is_heldout
from fleetgui.training.toy_pair.pretrain import make_llama
from fleetgui.training.toy_pair.spec import EOS_ID, SIZES, TINY, ModelDims, get_spec
from fleetgui.training.train import TrainSchedule, count_parameters, lr_at

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


#: Per-token draft/target agreement the tiny pair must reach on held-out code (the small pair's
#: is measured at build time and recorded in ``demo_model.json``).
TINY_MIN_AGREEMENT = 0.5


# --------------------------------------------------------------------------------------------- #
# Fast unit tests


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("argparse.py", True),
        ("asyncio/tasks.py", True),
        ("test/test_grammar.py", False),
        ("unittest/test/test_case.py", False),
        ("lib2to3/tests/data/bom.py", False),
        ("idlelib/editor.py", False),
        ("site-packages/torch/__init__.py", False),
        ("encodings/cp1252.py", False),
        ("_sysconfigdata__linux_x86_64-linux-gnu.py", False),
        ("README.txt", False),
    ],
)
def test_corpus_excludes_tests_packages_and_generated_files(relpath: str, expected: bool) -> None:
    assert is_eligible(relpath) is expected


def test_corpus_keeps_code_without_docstrings_and_comments() -> None:
    source = (
        '"""Module docstring."""\n'
        "import os  # a comment\n"
        "class A:\n"
        '    """Class docstring."""\n'
        "    def f(self, x):\n"
        '        """Method docstring."""\n'
        '        return os.path.join(x, "doc")\n'
        "    async def g(self):\n"
        '        """Only a docstring."""\n'
    )
    code = code_only(source)
    assert code is not None
    assert "docstring" not in code and "comment" not in code
    assert "return os.path.join(x, 'doc')" in code  # ast.unparse's layout
    assert "async def g(self):\n        pass" in code
    compile(code, "<code>", "exec")
    assert code_only("def broken(:\n") is None
    assert code_only("print 'python 2'\n") is None


def test_heldout_split_is_stable_and_about_ten_percent() -> None:
    names = [f"mod{i}.py" for i in range(2000)]
    held = [n for n in names if is_heldout(n, 10)]
    assert 150 < len(held) < 250
    assert held == [n for n in names if is_heldout(n, 10)]


@pytest.mark.parametrize(
    ("matches", "k", "expected"),
    [
        # 4 accepted + the target's own token, then the 3 left are proposed and accepted
        ([True] * 8, 4, (7, 7, 2)),
        # every block of 2 is rejected at once; the target advances 1 token per step
        ([False] * 4, 2, (0, 7, 4)),
        ([True, False, True, True], 2, (3, 4, 2)),
        ([True, True, False, True, True, True], 3, (5, 6, 2)),
        ([True, True, True], 1, (2, 2, 2)),
    ],
)
def test_block_acceptance_simulates_greedy_speculation(
    matches: list[bool], k: int, expected: tuple[int, int, int]
) -> None:
    assert block_acceptance(matches, k) == expected


def test_learning_rate_warms_up_then_decays_to_floor() -> None:
    sched = TrainSchedule(steps=100, batch_size=1, seq_len=8, lr=1.0, warmup_steps=10)
    rates = [lr_at(s, sched) for s in range(100)]
    assert rates[0] == pytest.approx(0.1)
    assert rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert rates[-1] == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("muon_lr", [0.0, 0.05])
def test_muon_trains_the_blocks_matrices_and_adamw_the_rest(muon_lr: float) -> None:
    from fleetgui.training.toy_pair.pretrain import make_llama
    from fleetgui.training.train import make_optimizers, set_learning_rates

    dims = ModelDims(
        hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, num_kv_heads=1
    )
    model = make_llama(dims, vocab_size=64, max_positions=32, seed=0)
    schedule = TrainSchedule(
        steps=10, batch_size=1, seq_len=8, lr=1e-3, warmup_steps=2, muon_lr=muon_lr
    )
    optimizers = make_optimizers(model, schedule)
    owner = {
        id(p): type(opt).__name__
        for opt in optimizers
        for group in opt.param_groups
        for p in group["params"]
    }
    named = dict(model.named_parameters())
    assert len(owner) == len(named)  # every parameter trained, once
    for name, param in named.items():
        in_blocks = param.ndim == 2 and "embed_tokens" not in name and "lm_head" not in name
        expected = "Muon" if in_blocks and muon_lr else "AdamW"
        assert owner[id(param)] == expected, name
    set_learning_rates(optimizers, 0, schedule)  # the first warm-up step: half of each peak
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            assert group["lr"] == pytest.approx(group["peak_lr"] / 2)
    peaks = {type(o).__name__: {g["peak_lr"] for g in o.param_groups} for o in optimizers}
    assert peaks == ({"AdamW": {1e-3}, "Muon": {muon_lr}} if muon_lr else {"AdamW": {1e-3}})
    assert TINY.target_train.muon_lr > 0  # the tests' builds take the Muon path too


def test_progress_fraction_grows_through_the_phases() -> None:
    events: list[BuildProgress] = []
    tracker = PhaseTracker(events.append)
    for phase in PHASE_WEIGHTS:
        with tracker.phase(phase):
            for done in range(1, 4):
                tracker.report(phase, done, 3)
    assert list(dict.fromkeys(e.phase for e in events)) == list(PHASE_WEIGHTS)
    overall = [e.overall for e in events]
    assert overall == sorted(overall)
    assert overall[0] == 0.0
    assert overall[-1] == pytest.approx(1.0)
    assert set(tracker.times) == set(PHASE_WEIGHTS)


#: Parameter counts (millions) each size's models must fall in: the targets "tens of millions"
#: (the medium one larger), the drafts "a few million"; tiny is for tests.
PARAMETER_RANGES = {
    "small": ((10, 30), (1, 5)),
    "medium": ((30, 100), (1, 10)),
    "tiny": ((0.1, 1), (0.01, 0.5)),
}


@pytest.mark.parametrize("size", SIZES)
def test_each_size_builds_models_of_its_stated_scale(size: str) -> None:
    spec = get_spec(size)
    (target_lo, target_hi), (draft_lo, draft_hi) = PARAMETER_RANGES[size]
    counts = {}
    for role, dims in (("target", spec.target), ("draft", spec.draft)):
        assert dims.hidden_size % dims.num_heads == 0 and dims.num_heads % dims.num_kv_heads == 0
        model = make_llama(dims, spec.vocab_size, spec.max_positions, spec.seed)
        counts[role] = count_parameters(model) / 1e6
    assert target_lo <= counts["target"] <= target_hi, counts
    assert draft_lo <= counts["draft"] <= draft_hi, counts
    assert counts["draft"] < counts["target"] / 3  # cheap enough to propose K tokens


def test_unknown_size_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown demo size"):
        build_demo_pair(tmp_path / "x", "huge")


def test_a_folder_holding_something_else_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FleetguiError, match="does not hold demo models"):
        build_demo_pair(tmp_path, "tiny")
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"


# --------------------------------------------------------------------------------------------- #
# Real builds (the tiny pair, built once per session by the ``demo_pair_tiny`` fixture)


def _load(path: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _info(pair: Path) -> dict[str, Any]:
    return json.loads((pair / INFO_FILE).read_text(encoding="utf-8"))


@pytest.mark.slow
def test_pair_is_two_llamas_sharing_one_tokenizer(demo_pair_tiny: Path) -> None:
    for sub in ("target", "draft"):
        for name in MODEL_FILES:
            assert (demo_pair_tiny / sub / name).is_file(), f"{sub}/{name} missing"
    assert (demo_pair_tiny / "target" / "tokenizer.json").read_bytes() == (
        demo_pair_tiny / "draft" / "tokenizer.json"
    ).read_bytes()

    target, tokenizer = _load(demo_pair_tiny / "target")
    draft, draft_tokenizer = _load(demo_pair_tiny / "draft")
    assert tokenizer.get_vocab() == draft_tokenizer.get_vocab()
    assert len(tokenizer) == TINY.vocab_size
    assert target.config.vocab_size == draft.config.vocab_size == TINY.vocab_size
    assert target.config.model_type == draft.config.model_type == "llama"
    assert [tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token] == [
        "<|bos|>",
        "<|eos|>",
        "<|pad|>",
    ]
    # byte-level: any text round-trips, including characters never seen in training
    text = "def f(x):\n\treturn x + 1  # ünïcødé ✓\n"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text

    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    assert 300_000 < n_target < 2_000_000
    assert 50_000 < n_draft < n_target / 2

    info = _info(demo_pair_tiny)
    assert info["complete"] is True
    assert info["size"] == "tiny"
    assert info["parameters"] == {"target": n_target, "draft": n_draft}
    target_training = info["training"]["target"]
    assert target_training["final_loss"] < target_training["first_loss"] - 1.0
    assert info["training"]["draft"]["final_loss"] < info["training"]["draft"]["first_loss"]
    assert info["corpus"]["train_files"] > 10
    assert info["corpus"]["heldout_files"] > 0
    assert len(info["sha256"]) == 64
    python = info["python"]  # greedy completions of held-out code, checked by the compiler
    assert python["prompts"] == TINY.acceptance.num_prompts
    assert python["new_tokens"] == TINY.acceptance.gen_len
    assert 0.0 <= python["valid_prefix"] <= 1.0
    assert 0.0 < python["distinct_4grams"] <= 1.0


@pytest.mark.slow
def test_distilled_draft_agrees_with_the_target_on_held_out_code(demo_pair_tiny: Path) -> None:
    acceptance = _info(demo_pair_tiny)["acceptance"]
    assert set(acceptance["block_acceptance"]) == {str(k) for k in range(1, 9)}
    block = acceptance["block_acceptance"]
    assert 0.0 < block["8"] < block["1"] <= 1.0  # long blocks are cut short more often...
    assert acceptance["per_token_agreement"] >= TINY_MIN_AGREEMENT
    steps = acceptance["tokens_per_target_step"]
    assert 1.0 < steps["1"] <= 2.0
    assert steps["8"] > steps["1"]  # ...yet yield more tokens per target step


@pytest.mark.slow
def test_cli_rebuild_over_an_incomplete_folder_is_identical_then_reused(
    demo_pair_tiny: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    out = home / "shards_cache" / "demo-model-tiny"
    (out / "target").mkdir(parents=True)
    (out / "target" / "config.json").write_text("{}", encoding="utf-8")
    (out / INFO_FILE).write_text('{"complete": false}', encoding="utf-8")
    assert load_pair(out) is None

    result = run_cli(home, "demo-model", "--size", "tiny")
    assert result.returncode == 0, result.stderr
    assert f"built tiny demo pair in {out}" in result.stdout
    assert "K=2" in result.stdout and "K=8" in result.stdout
    assert "held-out code prompts" in result.stdout and "valid Python" in result.stdout
    for phase in PHASE_WEIGHTS:  # one progress bar per phase of the pair's build, on stderr
        assert PHASE_LABELS[phase] in result.stderr
    assert "100%" in result.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo-model-tiny"]

    # deterministic: the same bytes as the session's in-process build
    for sub in ("target", "draft"):
        for name in MODEL_FILES:
            assert (out / sub / name).read_bytes() == (demo_pair_tiny / sub / name).read_bytes(), (
                f"{sub}/{name}"
            )
    first, second = _info(demo_pair_tiny), _info(out)
    assert second["sha256"] == first["sha256"]
    assert second["training"] == first["training"]
    assert second["acceptance"] == first["acceptance"]
    assert second["sample"] == first["sample"]
    assert second["python"] == first["python"]

    before = (out / "target" / "model.safetensors").stat().st_mtime_ns
    again = run_cli(home, "demo-model", "--size", "tiny", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "reused existing tiny demo pair" in again.stdout
    assert (out / "target" / "model.safetensors").stat().st_mtime_ns == before

    assert load_pair(out, "tiny") is not None
    assert load_pair(out, "small") is None
    record = _info(out)
    record["spec"]["target_train"]["steps"] += 1  # built from another recipe: not reused
    (out / INFO_FILE).write_text(json.dumps(record), encoding="utf-8")
    assert load_pair(out, "tiny") is None
    (out / INFO_FILE).write_text(json.dumps(second), encoding="utf-8")
    assert load_pair(out, "tiny") is not None
    (out / "draft" / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    assert load_pair(out, "tiny") is None  # a changed file: not reused


@pytest.mark.slow
def test_interrupted_build_leaves_no_valid_looking_folder(tmp_path: Path) -> None:
    class StopBuildError(Exception):
        pass

    def stop_in_training(event: BuildProgress) -> None:
        if event.phase == "target" and event.done >= 2:
            raise StopBuildError

    out = tmp_path / "pair"
    stale = tmp_path / ".pair.partial-99999999"  # an earlier build whose process is gone
    (stale / "target").mkdir(parents=True)
    with pytest.raises(StopBuildError):
        build_demo_pair(out, "tiny", progress=stop_in_training)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    assert load_pair(out) is None


@pytest.mark.slow
def test_pair_exports_and_generates_through_the_pipeline(
    demo_pair_tiny: Path, tmp_path: Path
) -> None:
    """The pair is what ``fleetgui export`` takes: 2 target stages and a 1-stage draft give,
    with and without speculation, the HF target's own greedy tokens."""
    import torch
    from runtime_support import export, pipeline

    from fleetgui.export.manifest import read_manifest
    from fleetgui.generation_config import GenerationConfig

    target_export = export(demo_pair_tiny / "target", tmp_path / "target-2s", stages=2)
    draft_export = export(demo_pair_tiny / "draft", tmp_path / "draft-1s", stages=1)
    assert len(read_manifest(target_export).stages) == 2

    prompt = "import os\n\ndef read_file(path):\n"
    n_new = 24
    model, tokenizer = _load(demo_pair_tiny / "target")
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=n_new, do_sample=False)
    expected = [int(t) for t in out[0, ids["input_ids"].shape[1] :] if int(t) != EOS_ID]

    async def main() -> None:
        pipe = pipeline(target_export, draft=draft_export)
        try:
            plain = await pipe.complete(prompt, GenerationConfig(max_new_tokens=n_new))
            assert [t for t in plain.token_ids if t != EOS_ID] == expected
            for k in (2, 4):
                options = GenerationConfig(max_new_tokens=n_new, k=k)
                spec = await pipe.complete(prompt, options)
                assert spec.token_ids == plain.token_ids, k
                assert spec.acceptance_rate is not None
                assert spec.acceptance_rate > 0.2, k
        finally:
            await pipe.close()

    asyncio.run(main())
