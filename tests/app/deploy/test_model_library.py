"""The model library in the app, offscreen: the models laid out at test time in each place are
listed by scans off the GUI thread, the demo model first and, with no model deployed, offered
first; the ones that cannot be used say why; folders the user adds are remembered; "Use on the
fleet" exports with a progress bar and Cancel and previews the plan, and Deploy then puts the
model on a loopback fleet of real worker processes and the chat answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")
pytest.importorskip("gguf")

from app_support import (
    TIMEOUT_MS,
    QtBot,
    SlowCoordinator,
    drive,
    fleet_window,
    new_chat,
    send_and_wait,
)
from fleet_support import FAST_LINKS, app_controller_config, running_workers
from library_support import Places, lay_out
from runtime_support import EXACT

from fleetgui.app.core import AppCore, build_core
from fleetgui.app.deploy.fleet import FleetDeployer
from fleetgui.app.deploy.local import LocalDeployer
from fleetgui.app.deploy.model_choice import ModelKind
from fleetgui.app.fleet_app import build_fleet_core
from fleetgui.app.settings import Settings
from fleetgui.app.views.library_view import COLUMNS, USABLE_COLUMN
from fleetgui.app.views.main_window import MainWindow
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.library import LibraryRoots, ModelEntry
from fleetgui.net.keys import KeyPair

NAME, SOURCE, EXPORT = COLUMNS.index("Name"), COLUMNS.index("Source"), COLUMNS.index("Export")


@pytest.fixture(scope="module")
def places(tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Places:
    return lay_out(tmp_path_factory.mktemp("places"), tiny_models("llama"))


def roots_for(places: Places, exports: Path) -> Callable[[Sequence[str]], LibraryRoots]:
    """The laid-out places, with the folders the user added (from the settings) and
    ``exports`` (also where the app exports to)."""
    return lambda folders: replace(
        places.roots, folders=tuple(Path(f) for f in folders), exports=exports
    )


def make_window(folder: Path, places: Places) -> tuple[AppCore, MainWindow]:
    core = build_core(
        settings_path=folder / "settings.json",
        history_dir=folder / "chats",
        deployer=LocalDeployer(EXACT),
        library_roots=roots_for(places, folder / "exports"),
    )
    core.deployment.export_root = folder / "exports"
    window = MainWindow(core)
    window.show()
    return core, window


def shown(core: AppCore, qtbot: QtBot) -> list[str]:
    """Once the scan under way (if any) is shown: the names in the table, in order."""
    qtbot.waitUntil(lambda: not core.library.scanning and bool(core.library.entries))
    table = core.library.entries
    return [e.name for e in table]


def row_of(window: MainWindow, name: str) -> int:
    table = window.deploy_view.library.table
    return next(r for r in range(table.rowCount()) if table.item(r, NAME).text() == name)


def test_the_library_lists_every_place_off_the_gui_thread_demo_first(
    qtbot: QtBot, places: Places, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleetgui.library.scan

    on_gui_thread: list[bool] = []
    original = fleetgui.library.scan.Library.scan

    def recording(self: Any, roots: LibraryRoots) -> list[ModelEntry]:
        on_gui_thread.append(threading.current_thread() is threading.main_thread())
        return original(self, roots)

    monkeypatch.setattr(fleetgui.library.scan.Library, "scan", recording)
    core, window = make_window(tmp_path, places)
    qtbot.addWidget(window)
    view = window.deploy_view.library
    assert window.tabs.currentWidget() is window.deploy_view  # first run: where to start
    names = shown(core, qtbot)
    assert names[0] == "SmolLM2-135M-Instruct (demo)"
    assert {"acme/tiny-llama", "tiny-llama-Q8_0", "tiny:latest", "acme/tiny-bloom",
            "tiny-llama-Q8_1", "tiny-bloom", "gone:latest"} == set(names[1:])  # fmt: skip
    # with no model deployed, the demo is offered first, then the models found
    assert view.first_run.isVisible() and view.selected_entry() == core.library.entries[0]
    assert on_gui_thread == [False]
    table = view.table
    assert table.rowCount() == len(names)
    assert table.item(row_of(window, "tiny:latest"), SOURCE).text() == "Ollama"
    bloom = row_of(window, "tiny-bloom")
    usable = table.item(bloom, USABLE_COLUMN)
    assert usable.text().startswith("no: GGUF architecture 'bloom' is not supported")
    assert "supported: gemma2" in usable.toolTip()
    quant = table.item(row_of(window, "tiny-llama-Q8_1"), USABLE_COLUMN)
    assert quant.text().startswith("no: tensor blk.1.ffn_up.weight is quantized as Q8_1")
    assert "Use another quantization of the model" in quant.toolTip()
    demo = core.library.entries[0]
    if not demo.exports:  # fetched and exported by another test, or not yet: either is said
        assert table.item(0, EXPORT).text() == demo.note != ""  # what using it will do
    table.selectRow(bloom)
    assert not view.use_button.isEnabled()  # nothing to use: the reason is on the row
    table.selectRow(row_of(window, "tiny-llama-Q8_0"))
    assert view.use_button.isEnabled()

    # a folder the user adds is remembered and scanned; forgetting it stops listing it
    added = places.roots.folders[0]
    view.add_folder_requested.emit(str(added))
    qtbot.waitUntil(lambda: "tiny-llama-copy" in [e.name for e in core.library.entries])
    saved = json.loads((tmp_path / "settings.json").read_text())
    assert saved["model_folders"] == [str(added)]
    assert Settings(tmp_path / "settings.json").values.model_folders == (str(added),)
    row = row_of(window, "tiny-llama-copy")
    assert table.item(row, SOURCE).text() == "folder my models"
    table.selectRow(row)
    view.forget_button.click()
    qtbot.waitUntil(lambda: "tiny-llama-copy" not in [e.name for e in core.library.entries])
    assert core.settings.values.model_folders == ()
    assert on_gui_thread and not any(on_gui_thread)
    # a folder that does not exist says so
    view.add_folder_requested.emit(str(tmp_path / "nowhere"))
    assert "does not exist" in window.messages.label.text()


def test_use_on_the_fleet_exports_with_a_progress_bar_and_cancel(
    qtbot: QtBot,
    qloop: Any,
    places: Places,
    tmp_path: Path,
) -> None:
    core, window = make_window(tmp_path, places)
    qtbot.addWidget(window)
    deployment, deploy_view = core.deployment, window.deploy_view
    deployment.export_weights = "fp32"
    shown(core, qtbot)
    view = deploy_view.library
    view.table.selectRow(row_of(window, "acme/tiny-llama"))
    steps: list[tuple[int, int, str]] = []

    def cancel_at_first_step(step: int, total: int, message: str) -> None:
        steps.append((step, total, message))
        if len(steps) == 1:
            assert deploy_view.progress.maximum() == total > 1  # the bar shows the steps
            deploy_view.cancel_button.click()

    deployment.export_progress.connect(cancel_at_first_step)
    with qtbot.waitSignal(deployment.cancelled, timeout=TIMEOUT_MS):
        view.use_button.click()
    qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
    assert steps[0][0] == 0  # cancelled at the first step
    assert "cancelled" in window.messages.label.text()
    assert deployment.model_dir == places.hf_snapshot  # the model stays chosen, not exported
    assert list((tmp_path / "exports").glob("*/manifest.json")) == []  # nothing half-made
    assert view.use_button.isEnabled()  # usable again once the job ended


def entry_named(core: AppCore, name: str) -> ModelEntry:
    return next(e for e in core.library.entries if e.name == name)


@pytest.mark.slow
def test_an_ollama_model_used_on_the_fleet_is_exported_previewed_deployed_and_answers(
    qtbot: QtBot,
    qloop: Any,
    places: Places,
    tmp_path: Path,
    identity: KeyPair,
    authorized_keys: Path,
) -> None:
    """Use on the fleet on Ollama's blob (a GGUF file named by its hash): exported with the
    progress bar moving, the export's plan previewed on the two workers, Deploy runs it there,
    the chat answers, and the library now lists the export as the Ollama model's."""
    home = tmp_path / "app"
    with running_workers(tmp_path, ["lib-w1", "lib-w2"], authorized_keys) as workers:
        core, controller = build_fleet_core(
            identity,
            controller_config=app_controller_config(home),
            coordinator_config=CoordinatorConfig(link=FAST_LINKS, local=EXACT),
            settings_path=home / "settings.json",
            history_dir=home / "chats",
            library_roots=roots_for(places, home / "exports"),
        )
        deployment = core.deployment
        # every PC here is this one: a slow coordinator makes the plan use the workers
        deployment.devices = SlowCoordinator(deployment.devices, factor=1000.0)
        deployment.export_root, deployment.export_weights = home / "exports", "fp32"
        with fleet_window(core) as window:
            qtbot.addWidget(window)
            for worker in workers:
                drive(core.fleet_actions.add_worker(worker.address))
            qtbot.waitUntil(lambda: len(controller.usable_endpoints()) == 2, timeout=TIMEOUT_MS)
            shown(core, qtbot)
            view, deploy_view = window.deploy_view.library, window.deploy_view
            view.table.selectRow(row_of(window, "tiny:latest"))
            bar: list[tuple[int, int]] = []
            deployment.export_progress.connect(
                lambda *_: bar.append(
                    (deploy_view.progress.value(), deploy_view.progress.maximum())
                )
            )
            view.use_button.click()
            assert not view.use_button.isEnabled()  # one job at a time
            qtbot.waitUntil(
                lambda: deployment.state.value == "idle" and deployment.plan is not None,
                timeout=3 * TIMEOUT_MS,
            )
            export = deployment.model_dir
            assert deployment.kind is ModelKind.EXPORT and export is not None
            assert export.parent == home / "exports" and (export / "manifest.json").is_file()
            assert len(bar) > 2 and bar[-1][0] > bar[0][0] and bar[-1][1] > 1
            plan = deployment.plan
            assert {"lib-w1", "lib-w2"} & set(plan.devices)  # previewed on the fleet
            assert deploy_view.plan_table.rowCount() == len(plan.stages)

            with qtbot.waitSignal(deployment.deployed, timeout=TIMEOUT_MS):
                deploy_view.deploy_button.click()
            deployer = deployment.deployer
            assert isinstance(deployer, FleetDeployer) and deployer.session is not None
            assignment = deployer.session.deployment.assignment
            assert assignment is not None and assignment.members  # stages on the workers
            assert not view.first_run.isVisible()  # a model is deployed now
            new_chat(window, max_new_tokens=8)
            assert "".join(send_and_wait(qtbot, window, "Once upon a time")).strip()
            qtbot.waitUntil(lambda: entry_named(core, "tiny:latest").exports == (export,))
            row = row_of(window, "tiny:latest")
            assert view.table.item(row, EXPORT).text() == export.name


@pytest.mark.slow
def test_the_demo_offered_first_is_used_from_the_export_fleetgui_demo_made(
    qtbot: QtBot,
    qloop: Any,
    places: Places,
    tmp_path: Path,
    smollm2_demo_export: Path,
) -> None:
    """The demo row stands for the export ``fleetgui demo`` makes (in the shard cache): shown
    as ready, not listed a second time among the exports, and Use on the fleet previews it."""
    core = build_core(
        settings_path=tmp_path / "settings.json",
        history_dir=tmp_path / "chats",
        deployer=LocalDeployer(EXACT),
        library_roots=roots_for(places, smollm2_demo_export.parent),
    )
    window = MainWindow(core)
    qtbot.addWidget(window)
    window.show()
    names = shown(core, qtbot)
    demo = core.library.entries[0]
    assert names.count(demo.name) == 1 and demo.exports == (smollm2_demo_export,)
    assert smollm2_demo_export not in [e.path for e in core.library.entries[1:]]
    assert demo.note == "exported and ready to deploy" and demo.supported
    view = window.deploy_view.library
    assert view.selected_entry() == demo  # first run: the demo is where to start
    with qtbot.waitSignal(core.deployment.plan_ready, timeout=TIMEOUT_MS):
        view.use_button.click()
    qtbot.waitUntil(lambda: core.deployment.state.value == "idle", timeout=TIMEOUT_MS)
    assert core.deployment.model_dir == smollm2_demo_export
    assert window.deploy_view.plan_table.rowCount() >= 1
