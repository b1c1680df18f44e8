"""The app's API switch: it serves the deployed model on the OpenAI-compatible API while the
chat window keeps generating (a real tiny export on this PC, the real server on qasync's loop,
the official ``openai`` client in a thread), shows the URL and the requests per second, asks
for no key on 127.0.0.1 (as ``fleetgui serve``: the README's ``api_key="none"`` works) and for
one on another interface (kept in the OS keyring, copied by its button), and stops the server
when switched off."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")
openai = pytest.importorskip("openai")
keyring = pytest.importorskip("keyring")

from app_support import TIMEOUT_MS, QtBot, deploy, make_window  # noqa: E402
from keyring_support import InMemoryKeyring  # noqa: E402
from PySide6.QtGui import QGuiApplication  # noqa: E402
from runtime_support import export  # noqa: E402

from fleetgui.generation_config import GenerationConfig  # noqa: E402
from fleetgui.modes import Mode  # noqa: E402

pytestmark = pytest.mark.slow  # an export and a deployment: about 15 s


def test_the_switch_serves_the_model_while_the_chat_generates(
    qtbot: QtBot,
    qloop: asyncio.AbstractEventLoop,
    tiny_models: Callable[..., Path],
    tmp_path: Path,
    os_keyring: InMemoryKeyring,
) -> None:
    export_dir = export(tiny_models("llama"), tmp_path / "tiny-2s", stages=2)
    core, window = make_window(tmp_path / "home")
    qtbot.addWidget(window)
    core.api.port = 0  # any free port
    window.mode_panel.buttons[Mode.PP_MB].setChecked(True)
    window.mode_panel.streams.setValue(2)
    deploy(qtbot, core, window, export_dir)
    panel = window.dashboard.api
    assert not panel.switch.isChecked() and not panel.copy_key.isEnabled()

    panel.switch.setChecked(True)  # on
    qtbot.waitUntil(lambda: core.api.state.serving, timeout=TIMEOUT_MS)
    state = core.api.state
    assert state.url.startswith("http://127.0.0.1:") and state.url in panel.url.text()
    # on loopback no key, as `fleetgui serve` (issue 39: the app demanded one)
    assert state.model == "tiny-2s" and state.key == "" and not panel.copy_key.isEnabled()
    assert "no key needed" in panel.url.text()
    assert ("fleetgui", "api-key") not in os_keyring.store

    client = openai.OpenAI(base_url=state.url, api_key="none", max_retries=0)  # the README's
    spans: dict[str, list[float]] = {"api": [], "chat": []}
    api_text: list[str] = []

    def api_client() -> None:
        stream = client.chat.completions.create(
            model="tiny-2s",
            messages=[{"role": "user", "content": "Tell me a story."}],
            temperature=0,
            max_tokens=300,
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                spans["api"].append(time.perf_counter())
                api_text.append(chunk.choices[0].delta.content)

    session = core.chats
    conversation = session.new_conversation(GenerationConfig(max_new_tokens=40))
    thread = threading.Thread(target=api_client)
    thread.start()
    qtbot.waitUntil(lambda: len(spans["api"]) >= 3, timeout=TIMEOUT_MS)  # the API generates
    core.inference.delta.connect(lambda *_: spans["chat"].append(time.perf_counter()))
    with qtbot.waitSignal(session.reply_finished, timeout=TIMEOUT_MS):
        session.send(conversation, "Once upon a time")
    chat_spans = list(spans["chat"])
    qtbot.waitUntil(lambda: not thread.is_alive(), timeout=TIMEOUT_MS)
    thread.join()
    assert len(chat_spans) > 5 and len(spans["api"]) > 100
    # the chat's reply streamed while the API's answer was streaming: at the same time
    assert spans["api"][0] < chat_spans[0] and chat_spans[-1] < spans["api"][-1]
    assert sum(chat_spans[0] < t < chat_spans[-1] for t in spans["api"]) >= 3
    reply = session.get(conversation).messages[-1]
    assert reply.role == "assistant" and reply.text
    qtbot.waitUntil(lambda: "requests/s" in panel.rate.text(), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: panel.rate.text() != "0.0 requests/s", timeout=5000)

    panel.switch.setChecked(False)  # off: the server is gone
    qtbot.waitUntil(lambda: not core.api.state.serving and core.api.server is None)
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
    assert not panel.copy_key.isEnabled() or panel.key.text() == ""

    # on every interface, other machines could connect: a key, kept in the OS keyring
    core.api.host = "0.0.0.0"
    panel.switch.setChecked(True)
    qtbot.waitUntil(lambda: core.api.state.serving, timeout=TIMEOUT_MS)
    state = core.api.state
    assert state.key.startswith("sk-") and panel.copy_key.isEnabled()
    assert os_keyring.store[("fleetgui", "api-key")] == state.key
    panel.copy_key.click()
    assert QGuiApplication.clipboard().text() == state.key
    url = f"http://127.0.0.1:{core.api.server.port}/v1"  # type: ignore[union-attr]
    listed: list[object] = []

    def models(key: str) -> None:
        try:
            listed.append(openai.OpenAI(base_url=url, api_key=key, max_retries=0).models.list())
        except openai.AuthenticationError as exc:
            listed.append(exc)

    for key in ("none", state.key):  # the client blocks: in a thread, while Qt's loop serves
        asker = threading.Thread(target=models, args=(key,))
        asker.start()
        qtbot.waitUntil(lambda a=asker: not a.is_alive(), timeout=TIMEOUT_MS)  # type: ignore[misc]
    assert isinstance(listed[0], openai.AuthenticationError)
    assert [m.id for m in listed[1].data] == ["tiny-2s"]  # type: ignore[attr-defined]
    panel.switch.setChecked(False)
    qtbot.waitUntil(lambda: core.api.server is None)
