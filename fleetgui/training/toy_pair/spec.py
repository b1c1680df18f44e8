"""The recipe of each toy pair size: corpus, tokenizer, model shapes and training schedule.

Everything that influences the built weights lives here, so that :data:`BUILDER_VERSION` plus a
:class:`DemoSpec` identify a build. Bump :data:`BUILDER_VERSION` whenever a change anywhere in
``fleetgui.training.toy_pair`` or the shared training code (``fleetgui.training``) alters what
gets written: cached builds made by older versions are then rebuilt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from fleetgui.training.train import TrainSchedule

#: Version of the build recipe; part of the cache key of a built pair.
BUILDER_VERSION = 5

#: Sizes :func:`fleetgui.training.toy_pair.build_demo_pair` knows.
SIZES: tuple[str, ...] = ("small", "medium", "tiny")

BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2


@dataclass(frozen=True)
class ModelDims:
    """Shape of one Llama model (the vocabulary size comes from :class:`DemoSpec`)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class DistillSpec:
    """How the draft learns to imitate the target.

    ``num_prompts`` corpus windows of ``prompt_len`` tokens are continued greedily by the target
    for ``gen_len`` tokens. The draft trains on these sequences and on plain corpus windows
    (``corpus_fraction`` of each batch) with the KL divergence to the target's soft predictions
    plus ``hard_weight`` times the cross-entropy to the target's greedy (argmax) tokens.
    """

    num_prompts: int
    prompt_len: int
    gen_len: int
    gen_batch: int
    schedule: TrainSchedule
    corpus_fraction: float = 0.25
    hard_weight: float = 1.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.schedule.seq_len != self.prompt_len + self.gen_len:
            raise ValueError("distillation seq_len must be prompt_len + gen_len")


@dataclass(frozen=True)
class AcceptanceSpec:
    """Held-out measurement: ``num_prompts`` prompts of ``prompt_len`` tokens from held-out
    files, each continued greedily by the target for ``gen_len`` tokens."""

    num_prompts: int
    prompt_len: int
    gen_len: int
    max_k: int = 8


@dataclass(frozen=True)
class DemoSpec:
    """The complete recipe of one demo size.

    ``threads`` is the torch thread count while building (fixed, for reproducibility). ``bf16``
    runs the training matmuls under bfloat16 autocast: about 3x faster than float32 on CPUs
    with AMX or AVX512-BF16 and just as deterministic; weights stay float32.

    The ``small`` target is sized for its time budget: a 12.6M-parameter model (hidden 384)
    trains at ~2x the tokens per second of the earlier 22M one (hidden 512), so it sees ~1.2M
    tokens instead of 0.43M and ended ~1 nat lower (final loss 3.88 versus 4.84) in less time
    (target phase 380 s versus 673 s). Batches stay small (8 x 256 tokens; measured earlier: a
    4x larger batch with 4x fewer steps ends ~0.5 nats worse).

    The blocks' matrices of both models train with Muon (builder 5). A target step costs
    20-50 % more than with AdamW (the orthogonalisation), so 400 steps take about the time 600
    did, and the target ends better on held-out code: loss 4.09 after 420 Muon steps against
    4.36 after 600 AdamW steps (four batches of eight held-out windows of 256 tokens; 3.95
    after 600 Muon steps, which take too long). A draft distilled in 400 steps from a 420-step
    Muon target agreed with it on 83.7 % of held-out tokens with Muon (lr 0.02) against 81.2 %
    with AdamW (blocks of 4: 62.7 % against 58.3 %), for 6 s more. The build records how often
    the target's greedy completions of held-out code are valid Python (``python``).
    """

    size: str
    corpus_bytes: int
    max_file_bytes: int
    vocab_size: int
    max_positions: int
    target: ModelDims
    draft: ModelDims
    target_train: TrainSchedule
    distill: DistillSpec
    acceptance: AcceptanceSpec
    seed: int = 1234
    threads: int = 1
    bf16: bool = True
    holdout_percent: int = 10

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in ``demo_model.json``)."""
        return asdict(self)


SMALL = DemoSpec(
    size="small",
    corpus_bytes=3_000_000,
    max_file_bytes=60_000,
    vocab_size=4096,
    max_positions=1024,
    target=ModelDims(
        hidden_size=384, intermediate_size=1024, num_layers=6, num_heads=6, num_kv_heads=2
    ),
    draft=ModelDims(
        hidden_size=192, intermediate_size=512, num_layers=2, num_heads=3, num_kv_heads=1
    ),
    target_train=TrainSchedule(
        steps=400, batch_size=8, seq_len=256, lr=3e-3, warmup_steps=20, muon_lr=0.05
    ),
    distill=DistillSpec(
        num_prompts=384,
        prompt_len=64,
        gen_len=128,
        gen_batch=128,
        schedule=TrainSchedule(
            steps=400, batch_size=8, seq_len=192, lr=3e-3, warmup_steps=10, muon_lr=0.02
        ),
    ),
    acceptance=AcceptanceSpec(num_prompts=32, prompt_len=64, gen_len=64),
    threads=2,
)

#: A larger pair for measuring the fleet where the target's compute, not per-message costs,
#: sets the pace, as with the models a real fleet serves. The small target decodes in ~0.9 ms a
#: token on one EPYC core (OpenVINO genai, int8), less than the coordinator and a worker spend
#: on one round's messages (~1.9 ms); this 40.6M one takes 3.3-4.0 ms, and a 5-position verify
#: ~1.36x a one-token step (random weights, one pinned core). The draft is wider and one layer
#: deeper than the small one's, to follow a stronger target; the coordinator drafts with
#: time to spare. Same corpus, tokenizer and schedules. Built on the EPYC (2 cores): 1712 s;
#: per-token acceptance 76.5 % on held-out code (the small pair's build there: 85.6 %), 66 % of
#: greedy completions valid Python (small: 62 %).
MEDIUM = replace(
    SMALL,
    size="medium",
    target=ModelDims(
        hidden_size=640, intermediate_size=1792, num_layers=8, num_heads=10, num_kv_heads=2
    ),
    draft=ModelDims(
        hidden_size=256, intermediate_size=768, num_layers=3, num_heads=4, num_kv_heads=1
    ),
)

TINY = DemoSpec(
    size="tiny",
    corpus_bytes=400_000,
    max_file_bytes=20_000,
    vocab_size=1024,
    max_positions=512,
    target=ModelDims(
        hidden_size=128, intermediate_size=384, num_layers=2, num_heads=4, num_kv_heads=2
    ),
    draft=ModelDims(
        hidden_size=64, intermediate_size=192, num_layers=1, num_heads=2, num_kv_heads=1
    ),
    target_train=TrainSchedule(
        steps=60, batch_size=8, seq_len=128, lr=3e-3, warmup_steps=5, muon_lr=0.05
    ),
    distill=DistillSpec(
        num_prompts=32,
        prompt_len=32,
        gen_len=32,
        gen_batch=32,
        schedule=TrainSchedule(
            steps=40, batch_size=8, seq_len=64, lr=3e-3, warmup_steps=4, muon_lr=0.02
        ),
    ),
    acceptance=AcceptanceSpec(num_prompts=8, prompt_len=32, gen_len=32),
    threads=1,
)

SPECS: dict[str, DemoSpec] = {"small": SMALL, "medium": MEDIUM, "tiny": TINY}


def get_spec(size: str) -> DemoSpec:
    """The recipe for ``size`` (one of :data:`SIZES`)."""
    try:
        return SPECS[size]
    except KeyError:
        raise ValueError(f"unknown demo size {size!r}; choose one of {', '.join(SIZES)}") from None
