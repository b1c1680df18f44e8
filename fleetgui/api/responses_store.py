"""Responses kept so that a later request can continue one (``previous_response_id``) or fetch
it (``GET /v1/responses/{id}``): in this server's memory, the most recent ones only.

A continued conversation is sent to the model whole again, and the fleet's KV reuse finds the
part it already holds, so continuing costs what resending the history costs: only the new
tokens are computed.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from fleetgui.api.errors import ApiError

#: responses kept; the oldest is forgotten first
CAPACITY = 512


@dataclass(frozen=True)
class StoredResponse:
    body: dict[str, Any]  # the response object as the client got it
    #: the conversation through this response, as chat messages (without the instructions,
    #: which a continuation does not inherit, as in OpenAI's API)
    messages: tuple[dict[str, Any], ...]


class ResponseStore:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._kept: collections.OrderedDict[str, StoredResponse] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def put(self, stored: StoredResponse) -> None:
        self._kept[stored.body["id"]] = stored
        self._kept.move_to_end(stored.body["id"])
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    def get(self, response_id: str, param: str | None = None) -> StoredResponse:
        """The stored response, or a 404 saying why it may be missing."""
        stored = self._kept.get(response_id)
        if stored is None:
            raise ApiError(
                f"no stored response {response_id!r}: this server keeps the last "
                f"{self.capacity} responses made with 'store' true, in memory until it stops; "
                "send the whole conversation in 'input' instead",
                status=404,
                param=param,
                code="response_not_found",
            )
        self._kept.move_to_end(response_id)  # one being continued is kept longest
        return stored

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        del self._kept[response_id]
