"""A model's chat template, read from its tokenizer folder and rendered as transformers does.

The template comes from ``chat_template.jinja`` (which transformers prefers) or the
``chat_template`` of ``tokenizer_config.json`` (a string, or a list of ``{name, template}``
of which "default" is used). Rendering copies transformers'
``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)``
(``transformers/utils/chat_template_utils.py``): a sandboxed Jinja environment with
``trim_blocks``/``lstrip_blocks`` and loop controls, its ``tojson`` filter (no HTML escaping),
``raise_exception`` and ``strftime_now``, and the variables ``messages``, ``tools``,
``documents``, ``add_generation_prompt`` and the named special tokens (``bos_token``, ...).
transformers is not needed (the app's install has none); jinja2 is.

A GGUF file without a template is exported with its family's built-in format
(:mod:`fleetgui.export.chat_formats`; ``tokenizer_config.json`` names it). A model without a
template of any kind gets :data:`FALLBACK_TEMPLATE`, a plain ``User:``/``Assistant:``
transcript, and :attr:`ChatTemplate.is_fallback` says so (the app tells the user,
:func:`no_template_note`); its replies end at :data:`FALLBACK_STOP_STRINGS`, since such a model
has no end-of-turn token.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.export.chat_formats import FORMAT_KEY, PLAIN
from fleetgui.runtime.special_tokens import read_json, special_tokens

log = logging.getLogger(__name__)

TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
#: The transcript a model without a chat template continues (what fleetgui always used before).
FALLBACK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}: {{ message['content'] | trim }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
#: The model starting a new turn, the user's or another of its own, ends its reply (fallback
#: transcript only: a base model otherwise writes turn after turn to the token limit).
FALLBACK_STOP_STRINGS = ("\nUser:", "\nAssistant:")
NO_TEMPLATE_NOTE = (
    "This model has no chat template: the chat is sent as a plain User:/Assistant: transcript, "
    "which an instruct model may answer poorly. Export it with its tokenizer_config.json or "
    "chat_template.jinja to use its own format."
)
GGUF_NO_TEMPLATE_NOTE = (
    "This GGUF file has no chat template, and its tokens and architecture match no chat format "
    "fleetgui knows: the chat is sent as a plain User:/Assistant: transcript, which an instruct "
    "model may answer poorly. Use the model's instruct (chat) GGUF, which carries its template."
)

Messages = Sequence[Mapping[str, Any]]


class ChatTemplateError(FleetguiError):
    """A chat template that cannot be read or rendered, or refuses the conversation."""


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template and the special tokens it is rendered with."""

    source: str  # the Jinja text
    tokens: dict[str, str] = field(default_factory=dict)  # bos_token, eos_token, ...
    origin: str = "fallback"  # the file it came from, or "fallback"
    # the built-in format a GGUF export chose for a file without a template (chat_formats.PLAIN:
    # none); "" for a model's own template or a HuggingFace export
    chat_format: str = ""

    @property
    def is_fallback(self) -> bool:
        """True when the model has no template and the plain transcript is used."""
        return self.origin == "fallback"

    @property
    def bos_token(self) -> str | None:
        return self.tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self.tokens.get("eos_token")

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Stop strings a reply needs besides the end-of-turn tokens."""
        return FALLBACK_STOP_STRINGS if self.is_fallback else ()

    def render(
        self, messages: Messages, *, add_generation_prompt: bool = True, **variables: Any
    ) -> str:
        """The conversation as the model's prompt text; ``variables`` reach the template as
        ``apply_chat_template``'s keyword arguments do (e.g. ``tools``, ``date_string``)."""
        compiled = _compile(self.source, self.origin)
        context: dict[str, Any] = {
            "tools": None,
            "documents": None,
            **self.tokens,
            **variables,
            "messages": [dict(m) for m in messages],
            "add_generation_prompt": add_generation_prompt,
        }
        import jinja2

        try:
            return str(compiled.render(**context))
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(
                f"the model's chat template ({self.origin}) refuses this conversation: {exc}"
            ) from exc


def load_chat_template(folder: Path) -> ChatTemplate:
    """The chat template of the tokenizer in ``folder`` (an export's ``tokenizer/``, see
    ``fleetgui.runtime.tokenizer.tokenizer_dir_of``), or the fallback if it has none. Raises
    ``ChatTemplateError`` for a template that is not valid Jinja."""
    folder = Path(folder)
    tokens = special_tokens(folder)
    chat_format = str(read_json(folder / CONFIG_FILE).get(FORMAT_KEY) or "")
    source, origin = _find_template(folder)
    if source is None:
        log.info("%s has no chat template: using the plain transcript", folder)
        return ChatTemplate(FALLBACK_TEMPLATE, tokens, chat_format=chat_format)
    if chat_format:
        log.info("%s: the GGUF file had no chat template; using the %s format", folder, chat_format)
    _compile(source, origin)  # a broken template fails here, once, with its file named
    return ChatTemplate(source, tokens, origin, chat_format)


def no_template_note(template: ChatTemplate) -> str:
    """What to tell the user about a model chatting with the plain transcript ("" for one with
    a template): a GGUF user has no tokenizer_config.json to export with."""
    if not template.is_fallback:
        return ""
    return GGUF_NO_TEMPLATE_NOTE if template.chat_format == PLAIN else NO_TEMPLATE_NOTE


def _find_template(folder: Path) -> tuple[str | None, str]:
    jinja_file = folder / TEMPLATE_FILE
    if jinja_file.is_file():
        text = jinja_file.read_text(encoding="utf-8")
        if text.strip():
            return text, str(jinja_file)
    config_file = folder / CONFIG_FILE
    value = read_json(config_file).get("chat_template")
    if isinstance(value, str) and value.strip():
        return value, str(config_file)
    if isinstance(value, list):
        named = {
            str(t.get("name")): t.get("template")
            for t in value
            if isinstance(t, dict) and isinstance(t.get("template"), str)
        }
        if "default" in named:
            return str(named["default"]), f"{config_file} (default)"
        if named:
            raise ChatTemplateError(
                f"{config_file} has chat templates {sorted(named)} but none named 'default': "
                "name the one to chat with 'default'"
            )
    return None, "fallback"


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' own filter: Jinja's built-in tojson escapes HTML characters.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@functools.cache
def _environment() -> Any:
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:
        raise ChatTemplateError(
            "rendering a chat template needs jinja2: pip install 'fleetgui[app]' (or jinja2)"
        ) from exc

    class GenerationTag(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: transformers marks assistant text with it
        (for training masks); rendering a prompt keeps the text as it is."""

        tags = {"generation"}  # noqa: RUF012 (Jinja's extension API)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=16)
def _compile(source: str, origin: str) -> Any:
    env = _environment()  # first: says how to install jinja2 when it is missing
    import jinja2

    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(
            f"the chat template in {origin} is not valid Jinja ({exc}): fix or remove it"
        ) from exc
