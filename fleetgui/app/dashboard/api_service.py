"""``ApiService``: the app's switch that serves the deployed model on the OpenAI-compatible API
(``fleetgui.api``) while the app's own chat keeps using it.

The server runs on the app's event loop (Qt's, through qasync), beside the chat's replies: both
generate through the same ``LLMPipeline`` (``InferenceService.llm``), within its stream limit.
As ``fleetgui serve``, it asks for no key on loopback (127.0.0.1: only this PC's programs reach it,
and the README's ``api_key="none"`` works); on another interface it needs one, kept in the OS
keyring (``fleetgui/api-key``, made the first time; without a usable keyring a key is made for
this session only). A new deployment restarts the server on the new
pipeline; unloading stops it until the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from fleetgui.api import DEFAULT_HOST, DEFAULT_PORT
from fleetgui.api.keys import KEYRING_USER, new_api_key
from fleetgui.app.inference import InferenceService, PipelineState
from fleetgui.app.mode import ModeSettings
from fleetgui.app.settings import SecretError, Secrets
from fleetgui.app.tasks import spawn
from fleetgui.errors import FleetguiError

if TYPE_CHECKING:
    from fleetgui.api.server import ApiServer

log = logging.getLogger(__name__)

RATE_INTERVAL_MS = 1000


@dataclass(frozen=True)
class ApiState:
    serving: bool
    url: str = ""
    key: str = ""
    model: str = ""
    note: str = ""  # why it is not serving, or what to know about it


class ApiService(QObject):
    state_changed = Signal(object)  # ApiState
    rate_changed = Signal(float)  # requests answered per second, over the last 10 s

    def __init__(
        self,
        inference: InferenceService,
        secrets: Secrets | None = None,
        parent: QObject | None = None,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
    ) -> None:
        super().__init__(parent)
        self.inference = inference
        self.secrets = secrets or Secrets()
        self.host = host
        self.port = port  # 0: any free port
        self.wanted = False  # the switch is on (the server runs whenever a model is deployed)
        self._server: ApiServer | None = None  # aiohttp is imported when first switched on
        self._key: str | None = None
        self._state = ApiState(False)
        self._changing = asyncio.Lock()
        self._timer = QTimer(self)
        self._timer.setInterval(RATE_INTERVAL_MS)
        self._timer.timeout.connect(self._emit_rate)
        inference.state_changed.connect(self._on_pipeline_state)
        inference.mode_changed.connect(self._on_mode)

    @property
    def state(self) -> ApiState:
        return self._state

    @property
    def server(self) -> ApiServer | None:
        return self._server

    async def start(self) -> ApiState:
        """Switch on: serve the deployed model now (or as soon as one is deployed)."""
        self.wanted = True
        async with self._changing:
            await self._restart()
        return self._state

    async def stop(self) -> None:
        """Switch off."""
        self.wanted = False
        async with self._changing:
            await self._shutdown()
            self._set_state(ApiState(False))

    # -- the server ---------------------------------------------------------------------------

    async def _restart(self) -> None:
        await self._shutdown()
        llm = self.inference.llm
        if llm is None:
            self._set_state(
                ApiState(False, note="deploy a model first: the API serves the deployed model")
            )
            return
        from fleetgui.api.served import ServedModel
        from fleetgui.api.server import ApiServer, ServerConfig, is_loopback

        mode = self.inference.mode
        name = Path(llm.tokenizer.folder).parent.name  # the export's folder name
        try:
            served = ServedModel(llm, name, k=mode.draft_tokens)  # the chat's: one stream limit
            # a key only where other machines can connect, as `fleetgui serve` does
            key = None if is_loopback(self.host) else self._api_key()
            config = ServerConfig(self.host, self.port, key, max_streams=mode.concurrency)
            server = ApiServer(served, config)
            url = await server.start()
        except FleetguiError as exc:
            log.warning("the API did not start: %s", exc)
            self.wanted = False
            self._set_state(ApiState(False, note=str(exc)))
            return
        self._server = server
        self._timer.start()
        note = "" if key else f"no key needed: only programs on this PC reach {self.host}"
        self._set_state(ApiState(True, url, key or "", name, note))

    async def _shutdown(self) -> None:
        server, self._server = self._server, None
        self._timer.stop()
        if server is not None:
            await server.stop()
            self.rate_changed.emit(0.0)

    def _api_key(self) -> str:
        """The key in the OS keyring (made and stored the first time), else this session's."""
        if self._key is None:
            key = self.secrets.get(KEYRING_USER)
            if not key:
                key = new_api_key()
                try:
                    self.secrets.set(KEYRING_USER, key)
                except SecretError as exc:
                    log.warning("%s: the API key holds for this session only", exc)
            self._key = key
        return self._key

    # -- following the app --------------------------------------------------------------------

    def _on_pipeline_state(self, state: PipelineState) -> None:
        if state is PipelineState.CLOSING and self._server is not None:
            spawn(self._locked(self._shutdown()), "stop the API for the unloading model")
        elif state is PipelineState.READY and self.wanted:
            spawn(self._locked(self._restart()), "serve the new model on the API")

    async def _locked(self, work: Coroutine[Any, Any, None]) -> None:
        async with self._changing:
            await work
        if self._server is None and self._state.serving:
            self._set_state(ApiState(False, note="waiting for a deployed model"))

    def _on_mode(self, mode: ModeSettings) -> None:
        """Requests started from now on decode as the mode says (the pipeline's stream limit
        follows at once; the HTTP queue's at the next start)."""
        if self._server is not None:
            self._server.served.k = mode.draft_tokens

    def _set_state(self, state: ApiState) -> None:
        self._state = state
        self.state_changed.emit(state)

    def _emit_rate(self) -> None:
        if self._server is not None:
            self.rate_changed.emit(self._server.requests_per_s())
