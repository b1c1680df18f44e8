"""Verification that can fail a compressed export: top-1 agreement and mean KL divergence against
HF fp32 over the decode positions, judged per weight format, printed, stored in the manifest
(by ``fleetgui export`` and by ``fleetgui verify``) and shown in the app.

The model is the tiny demo target (trained, so its next-token distributions are not the flat
ones of a random model, where int8 noise alone flips many argmaxes)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import EXACT, perturbed_copy

from fleetgui import cli
from fleetgui.export.exporter import ExportRequest, export_model
from fleetgui.export.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestStage,
    check_files,
    read_manifest,
)
from fleetgui.export.quality import ExportQuality, weights_label
from fleetgui.export.verify import QUALITY_THRESHOLDS, VerificationError, verify_export

QtBot = Any


@pytest.fixture(scope="module")
def demo_target(demo_pair_tiny: Path) -> Path:
    return demo_pair_tiny / "target"


@pytest.fixture(scope="module")
def int8_export(demo_target: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The target exported in 2 int8 stages by ``fleetgui export`` (verification on), with what
    the command printed on stderr."""
    out = tmp_path_factory.mktemp("quality") / "int8"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = cli.main(
            ["export", str(demo_target), "--out", str(out), "--stages", "2", "--weights", "int8"]
        )
    assert code == 0, stderr.getvalue()[-2000:]
    return out, stderr.getvalue()


def _manifest(quality: ExportQuality | None) -> Manifest:
    stage = ManifestStage(0, 0, 2, (), ("input_ids",), ("logits",), ())
    return Manifest("m", "0" * 64, "llama", 2, 64, 512, "int8", (stage,), quality=quality)


def test_a_manifest_without_quality_still_loads_and_one_with_it_round_trips(
    tmp_path: Path,
) -> None:
    quality = ExportQuality(0.969, 0.0065, 96, True, dict(QUALITY_THRESHOLDS["int8"]))
    _manifest(quality).write(tmp_path)
    assert read_manifest(tmp_path).quality == quality
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert data["quality"]["reference"] == "hf-fp32"
    del data["quality"]  # as written before verification recorded it
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    old = read_manifest(tmp_path)
    assert old.quality is None and old.weight_format == "int8"
    assert weights_label(old.weight_format, old.quality) == "int8 · not verified"
    assert weights_label("int8", quality) == "int8 · top-1 96.9 %"
    failed = ExportQuality(0.62, 0.5, 96, False, dict(QUALITY_THRESHOLDS["int4"]))
    assert weights_label("int4", failed) == "int4 · top-1 62.0 %, failed verification"


@pytest.mark.slow
def test_a_good_int8_export_passes_and_its_manifest_says_how_good(
    int8_export: tuple[Path, str],
) -> None:
    out, printed = int8_export
    quality = read_manifest(out).quality
    assert quality is not None and quality.passed
    assert quality.reference == "hf-fp32"
    assert quality.positions == 3 * 32  # the default prompts, 32 decode steps each
    assert quality.thresholds == QUALITY_THRESHOLDS["int8"]
    assert quality.top1_agreement >= QUALITY_THRESHOLDS["int8"]["min_top1_agreement"]
    assert 0 <= quality.mean_kl <= QUALITY_THRESHOLDS["int8"]["max_mean_kl"]
    lines = printed.splitlines()
    prompt_lines = [line for line in lines if line.startswith("  '")]
    assert len(prompt_lines) == 3
    assert all("top-1 " in line and " %, KL " in line for line in prompt_lines)
    [overall] = [line for line in lines if line.startswith("  overall vs HF fp32 over 96 ")]
    assert f"top-1 agreement {quality.top1_agreement * 100:.1f} %" in overall
    assert "int8 needs top-1 >= 90 %, KL <= 0.02" in overall
    assert "PASS" in lines


@pytest.mark.slow
def test_verify_fails_a_damaged_export_and_records_it_in_the_manifest(
    demo_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every weight 30 % off (relative Gaussian noise), then int8: an export whose answers
    differ from the model's. ``fleetgui verify`` prints the measures, fails, and stores them."""
    damaged = perturbed_copy(demo_target, tmp_path / "damaged", scale=0.3)
    out = tmp_path / "int8"
    export_model(ExportRequest(damaged, out, stages=2, weights="int8"))
    before = read_manifest(out)
    assert before.quality is None  # exported without verification
    code = cli.main(["verify", str(out), "--reference", str(demo_target)])
    printed = capsys.readouterr().out
    assert code == 1
    assert printed.splitlines()[-1] == "FAIL"
    assert "overall vs HF fp32 over 96 positions" in printed
    after = read_manifest(out)
    quality = after.quality
    assert quality is not None and not quality.passed
    assert quality.top1_agreement < QUALITY_THRESHOLDS["int8"]["min_top1_agreement"]
    assert quality.mean_kl > QUALITY_THRESHOLDS["int8"]["max_mean_kl"]
    assert f"top-1 agreement {quality.top1_agreement * 100:.1f} %" in printed
    assert after.stages == before.stages  # only the quality changed; the files still check
    assert all(check_files(out, stage.files) == [] for stage in after.stages)


@pytest.mark.slow
def test_verify_against_another_models_shape_is_one_clear_error(
    int8_export: tuple[Path, str], tiny_models: Callable[..., Path]
) -> None:
    with pytest.raises(VerificationError, match=r"is not the model .* was exported from"):
        verify_export(int8_export[0], tiny_models("llama"))


@pytest.mark.slow
def test_the_app_shows_the_quality_beside_the_weight_format(
    qtbot: QtBot, int8_export: tuple[Path, str], demo_target: Path, tmp_path: Path
) -> None:
    pytest.importorskip("PySide6")
    from fleetgui.app.core import build_core
    from fleetgui.app.deploy.local import LocalDeployer
    from fleetgui.app.views.main_window import MainWindow
    from fleetgui.fleet.placement.preview import PreviewRequest, preview_plan
    from fleetgui.planner import DeviceProfile, PlanConfig

    out, _ = int8_export
    quality = read_manifest(out).quality
    assert quality is not None
    expected = f"int8 · top-1 {quality.top1_agreement * 100:.1f} %"
    core = build_core(
        settings_path=tmp_path / "settings.json",
        history_dir=tmp_path / "chats",
        deployer=LocalDeployer(EXACT),
    )
    window = MainWindow(core)
    qtbot.addWidget(window)
    view = window.deploy_view
    assert core.deployment.choose_model(out)
    assert view.weights_info.text() == expected
    this_pc = DeviceProfile("this-pc", 8_000_000_000, 0.5, 1e9)
    plan = preview_plan(PreviewRequest(out, (this_pc,), PlanConfig()))
    view.on_plan(plan)
    assert f"({expected}): predicted" in view.plan_summary.text()
    assert core.deployment.choose_model(demo_target)  # a HuggingFace model: no quality yet
    assert view.weights_info.text() == ""
