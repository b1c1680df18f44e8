"""Built-in chat formats for models whose files carry no chat template (base GGUF builds).

A GGUF file without ``tokenizer.chat_template`` still tells its family: its
``general.architecture`` and the special tokens in its vocabulary. :func:`detect_format` picks
the format as llama.cpp does when it has no template to go by: the tokens first
(``<|im_start|>`` ChatML, ``<|start_header_id|>``/``<|eot_id|>`` Llama 3, ``<start_of_turn>``
Gemma, ``<|user|>``/``<|end|>`` Phi-3, ``[INST]`` Mistral), then the architecture (a
SentencePiece ``llama`` vocabulary is Llama 2's). Each format names the tokens that end its
turns; the export lists them as end-of-turn ids, so a reply stops there instead of running on
to the token limit. A model of no known family keeps the plain transcript
(``chat_template.FALLBACK_TEMPLATE``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

#: Where the export records which built-in format it chose (``tokenizer_config.json``);
#: :data:`PLAIN` when it chose none for a GGUF file.
FORMAT_KEY = "fleetgui_chat_format"
PLAIN = "plain"

# ``(bos_token or '')``: a vocabulary may have no BOS (Undefined + str raises in Jinja).
_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_LLAMA3 = (
    "{{ bos_token or '' }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
# Gemma has no system role: its text opens the first user turn (as Gemma 3's template does).
_GEMMA = (
    "{{ bos_token or '' }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] | trim + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (system if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
_PHI3 = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
# Llama 2 and Mistral: the system text opens the first user turn; a reply ends with EOS.
_INST_SYSTEM = (
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set system = OPEN + messages[0]['content'] | trim + CLOSE %}"
    "{% set turns = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
)
_LLAMA2 = _INST_SYSTEM.replace("OPEN", "'<<SYS>>\n'").replace("CLOSE", "'\n<</SYS>>\n\n'") + (
    "{% for message in turns %}"
    "{% if message['role'] == 'user' %}"
    "{{ (bos_token or '') + '[INST] ' + (system if loop.first else '')"
    " + message['content'] | trim + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] | trim + ' ' + (eos_token or '') }}{% endif %}"
    "{% endfor %}"
)
_MISTRAL = (
    "{{ bos_token or '' }}"
    + _INST_SYSTEM.replace("OPEN", "''").replace("CLOSE", "'\n\n'")
    + (
        "{% for message in turns %}"
        "{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + (system if loop.first else '') + message['content'] | trim + '[/INST]' }}"
        "{% else %}{{ ' ' + message['content'] | trim + (eos_token or '') }}{% endif %}"
        "{% endfor %}"
    )
)


@dataclass(frozen=True)
class ChatFormat:
    """A family's chat template and the special tokens that end its turns."""

    name: str
    label: str  # for people: "Llama 3"
    template: str  # Jinja, rendered as a model's own template is
    end_tokens: tuple[str, ...] = ()  # besides the vocabulary's EOS


FORMATS: dict[str, ChatFormat] = {
    f.name: f
    for f in (
        ChatFormat("chatml", "ChatML (Qwen)", _CHATML, ("<|im_end|>",)),
        ChatFormat("llama3", "Llama 3", _LLAMA3, ("<|eot_id|>",)),
        ChatFormat("gemma", "Gemma", _GEMMA, ("<end_of_turn>",)),
        ChatFormat("phi3", "Phi-3", _PHI3, ("<|end|>",)),
        ChatFormat("mistral", "Mistral", _MISTRAL),
        ChatFormat("llama2", "Llama 2", _LLAMA2),
    )
}

#: Tokens that mark a family, checked in this order (as llama.cpp checks template markers).
_BY_TOKENS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<|im_start|>", "<|im_end|>"), "chatml"),
    (("<|start_header_id|>", "<|eot_id|>"), "llama3"),
    (("<start_of_turn>", "<end_of_turn>"), "gemma"),
    (("<|user|>", "<|end|>"), "phi3"),
    (("[INST]",), "mistral"),
)
#: ``general.architecture`` -> format, when no marking token is in the vocabulary.
_BY_ARCHITECTURE = {
    "qwen2": "chatml",
    "qwen3": "chatml",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "phi3": "phi3",
    "mistral": "mistral",
}


def detect_format(
    architecture: str, tokens: Collection[str], *, sentencepiece: bool = False
) -> ChatFormat | None:
    """The chat format of a model with no template: by the special tokens in ``tokens`` (its
    vocabulary), else by its GGUF ``architecture`` (``sentencepiece``: a ``llama`` tokenizer
    model, i.e. Llama 2's vocabulary); None for no known family (the plain transcript)."""
    present = set(tokens)
    for markers, marked in _BY_TOKENS:
        if all(m in present for m in markers):
            return FORMATS[marked]
    name = _BY_ARCHITECTURE.get(architecture)
    if name is None and architecture == "llama" and sentencepiece:
        name = "llama2"
    return None if name is None else FORMATS[name]
