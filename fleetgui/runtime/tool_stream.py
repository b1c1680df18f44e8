"""What of an answer in progress is surely text for the user, when tools were offered (see
:mod:`~fleetgui.runtime.tool_calls`)."""

from __future__ import annotations

import json
import re

from fleetgui.runtime.tool_calls import ToolFormat, ToolSpec

# -- streaming ----------------------------------------------------------------------------------

GENERIC_RESPONSE = re.compile(r'\s*\{\s*"response"\s*:\s*"')


class ContentStream:
    """The part of an answer in progress that is surely text for the user, as it grows, so
    that an answer with tools on streams like one without: the generic format's
    ``{"response": "..."}`` string, decoded as it comes; a native format's text up to where a
    call may begin (held back until the answer shows it is none)."""

    def __init__(self, spec: ToolSpec, fmt: ToolFormat) -> None:
        self.spec, self.fmt = spec, fmt
        self.sent = ""  # the content given out so far

    def update(self, text: str) -> str:
        """The new content in ``text`` (the whole answer so far)."""
        return self.rest(self._content(text))

    def rest(self, content: str) -> str:
        """What of ``content`` (the content so far, or the answer's parsed at its end) is not
        given out yet; nothing if it does not continue what was (a call after all)."""
        if not content.startswith(self.sent):
            return ""
        new, self.sent = content[len(self.sent) :], content
        return new

    def _content(self, text: str) -> str:
        if not self.spec.active:
            return text
        if self.fmt is ToolFormat.GENERIC:
            start = GENERIC_RESPONSE.match(text)
            return _json_string_prefix(text[start.end() :]) if start else ""
        if self.fmt is ToolFormat.HERMES:
            cut = text.find("<tool_call>")
            if cut < 0:  # hold back a tail that may be the start of the tag
                cut = len(text)
                for size in range(min(len("<tool_call>"), len(text)), 0, -1):
                    if "<tool_call>".startswith(text[-size:]):
                        cut = len(text) - size
                        break
            return text[:cut]
        head = text.lstrip()[:1]  # Llama 3 and Mistral calls are the whole answer
        return "" if head in ("", "{", "[", "<") else text


def _json_string_prefix(body: str) -> str:
    """The decoded text of a JSON string's body as far as it is complete: up to its closing
    quote, an escape cut short, or a high surrogate whose low half has not come yet. (It may
    hold back a little more than it must; the answer's end gives the rest.)"""
    raw = COMPLETE_UNITS.match(body).group(0)  # type: ignore[union-attr]  # matches empty
    raw = HIGH_SURROGATE_AT_END.sub("", raw)
    try:
        return str(json.loads(f'"{raw}"'))
    except ValueError:
        return ""


#: The complete characters and escapes a JSON string body starts with.
COMPLETE_UNITS = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
HIGH_SURROGATE_AT_END = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}$")
