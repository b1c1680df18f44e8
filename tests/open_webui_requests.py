# ruff: noqa: E501  (a table of tool specs reads best one tool a line)
"""The requests Open WebUI sends an OpenAI-compatible server during one chat, for replay.

Recorded from Open WebUI 0.12.4 (the PyPI release, default settings, an admin's new chat)
against a recording server: what matters for a server is the shape, which this module
rebuilds with our own texts:

- the user's message: ``{"stream": true, "model", "messages", "tools"}`` and nothing else (no
  ``tool_choice``, ``max_tokens``, ``temperature`` or ``stream_options``), carrying its 36
  built-in tools (time, knowledge bases, chats, memory, notes, skills, tasks, automations,
  calendar) as ``{"type": "function", "function": {name, description, parameters}}`` with
  argument descriptions and defaults (about 25 KB of JSON there; 13 KB here, our texts being
  shorter);
- for a new chat, the title request at the same moment (its history ends with an empty
  ``ASSISTANT:`` line), with ``"max_tokens": 1000``;
- after the reply, one after another: follow-up suggestions and tags, each one ``user``
  message holding a task template and the chat as ``USER: ...`` / ``ASSISTANT: ...`` lines,
  ``"stream": false`` and no ``max_tokens``: a model that does not stop by itself generates to
  the end of the context.
"""

from __future__ import annotations

from typing import Any

_COUNT = {"type": "integer", "default": 10, "description": "How many results to return"}
_SKIP = {"type": "integer", "default": 0, "description": "How many results to skip (paging)"}
_QUERY = {"type": "string", "description": "What to search for, in natural language"}
_ID = {"type": "string", "description": "The item's id, as a search returned it"}
_TEXT = {"type": "string", "description": "The text to write"}
_DAYS = {"type": "integer", "default": 0, "description": "Days back from now (default: 0)"}

# name, description, {argument: schema}, required arguments
_TOOLS: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("get_current_timestamp", "Get the current Unix time in seconds.", {}, []),
    (
        "calculate_timestamp",
        "Get the Unix time shifted back by days, weeks, months or years. Use it to build date "
        "filters for the search functions.",
        {"days_ago": _DAYS, "weeks_ago": _DAYS, "months_ago": _DAYS, "years_ago": _DAYS},
        [],
    ),
    (
        "ask_user",
        "Ask the user one to three clarifying questions before going on, when the next step "
        "depends on what they want.",
        {
            "questions": {
                "type": "array",
                "items": {"type": "object"},
                "description": "Questions, each with an id, a header, the question and options",
            },
            "allow_other": {"type": "boolean", "default": True},
            "timeout_ms": {"type": "integer", "default": 120000},
        },
        ["questions"],
    ),
    ("list_knowledge_bases", "List the knowledge bases the user can read.", {"count": _COUNT, "skip": _SKIP}, []),
    ("search_knowledge_bases", "Find knowledge bases by name and description.", {"query": _QUERY, "count": _COUNT, "skip": _SKIP}, ["query"]),
    ("query_knowledge_bases", "Find knowledge bases whose topic is close in meaning to a query.", {"query": _QUERY, "count": _COUNT}, ["query"]),
    (
        "grep_knowledge_files",
        "Search knowledge files for exact text or a regular expression; returns matching lines "
        "with their numbers.",
        {
            "pattern": {"type": "string", "description": "Text or regular expression"},
            "file_id": _ID,
            "case_insensitive": {"type": "boolean", "default": False},
            "count_only": {"type": "boolean", "default": False},
        },
        ["pattern"],
    ),
    ("search_knowledge_files", "Find knowledge files by name.", {"query": _QUERY, "knowledge_id": _ID, "count": _COUNT, "skip": _SKIP}, ["query"]),
    ("query_knowledge_files", "Search the contents of knowledge files by meaning.", {"query": _QUERY, "knowledge_ids": {"type": "array", "items": {"type": "string"}}, "count": _COUNT}, ["query"]),
    ("view_knowledge_file", "Read a knowledge file, a range of lines at a time.", {"file_id": _ID, "offset": _SKIP, "max_lines": _COUNT}, ["file_id"]),
    ("search_chats", "Search the user's earlier chats by title and content.", {"query": _QUERY, "count": _COUNT, "start_timestamp": {"type": "integer"}, "end_timestamp": {"type": "integer"}}, ["query"]),
    ("view_chat", "Read one of the user's earlier chats.", {"chat_id": _ID}, ["chat_id"]),
    ("search_memories", "Search what the assistant remembers about the user.", {"query": _QUERY, "count": _COUNT}, ["query"]),
    ("list_memory_paths", "List the folders of the user's memory.", {}, []),
    ("read_memory_path", "Read the memories under one path.", {"path": {"type": "string", "description": "A memory path such as /preferences"}}, ["path"]),
    ("list_memories", "List every memory with its id.", {"count": _COUNT, "skip": _SKIP}, []),
    ("update_memory", "Replace a memory's text.", {"memory_id": _ID, "content": _TEXT}, ["memory_id", "content"]),
    ("add_memory", "Remember something about the user for later chats.", {"content": _TEXT, "path": {"type": "string", "default": "/"}}, ["content"]),
    ("replace_memory_content", "Replace part of a memory's text.", {"memory_id": _ID, "old": _TEXT, "new": _TEXT}, ["memory_id", "old", "new"]),
    ("delete_memory", "Forget a memory.", {"memory_id": _ID}, ["memory_id"]),
    ("search_notes", "Search the user's notes.", {"query": _QUERY, "count": _COUNT, "skip": _SKIP}, ["query"]),
    ("view_note", "Read one note.", {"note_id": _ID}, ["note_id"]),
    ("write_note", "Create a note or overwrite one.", {"title": {"type": "string"}, "content": _TEXT, "note_id": _ID}, ["title", "content"]),
    ("replace_note_content", "Replace part of a note's text.", {"note_id": _ID, "old": _TEXT, "new": _TEXT}, ["note_id", "old", "new"]),
    ("create_skill", "Save a reusable instruction set as a skill.", {"name": {"type": "string"}, "description": {"type": "string"}, "content": _TEXT}, ["name", "content"]),
    ("create_tasks", "Create a to-do list for the work at hand.", {"tasks": {"type": "array", "items": {"type": "object", "properties": {"title": {"type": "string"}, "status": {"enum": ["pending", "in_progress", "done"]}}}}}, ["tasks"]),
    ("update_task", "Change a task's status.", {"task_id": _ID, "status": {"enum": ["pending", "in_progress", "done"]}}, ["task_id", "status"]),
    ("create_automation", "Run a prompt on a schedule.", {"name": {"type": "string"}, "prompt": _TEXT, "schedule": {"type": "string", "description": "A cron expression"}}, ["name", "prompt", "schedule"]),
    ("update_automation", "Change an automation.", {"automation_id": _ID, "prompt": _TEXT, "schedule": {"type": "string"}}, ["automation_id"]),
    ("list_automations", "List the user's automations.", {"count": _COUNT}, []),
    ("toggle_automation", "Pause or resume an automation.", {"automation_id": _ID, "enabled": {"type": "boolean"}}, ["automation_id", "enabled"]),
    ("delete_automation", "Delete an automation.", {"automation_id": _ID}, ["automation_id"]),
    ("search_calendar_events", "Find calendar events in a time range.", {"query": _QUERY, "start_timestamp": {"type": "integer"}, "end_timestamp": {"type": "integer"}}, []),
    ("create_calendar_event", "Add an event to the user's calendar.", {"title": {"type": "string"}, "start_timestamp": {"type": "integer"}, "end_timestamp": {"type": "integer"}, "location": {"type": "string"}}, ["title", "start_timestamp"]),
    ("update_calendar_event", "Change a calendar event.", {"event_id": _ID, "title": {"type": "string"}, "start_timestamp": {"type": "integer"}}, ["event_id"]),
    ("delete_calendar_event", "Delete a calendar event.", {"event_id": _ID}, ["event_id"]),
]  # fmt: skip


def builtin_tools() -> list[dict[str, Any]]:
    """The 36 built-in tools, as the chat request carries them."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {"properties": args, "type": "object"}
                | ({"required": required} if required else {}),
            },
        }
        for name, description, args, required in _TOOLS
    ]


def chat_request(
    model: str, question: str, history: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The user's streamed message, with the built-in tools."""
    messages = [*(history or []), {"role": "user", "content": question}]
    return {"stream": True, "model": model, "messages": messages, "tools": builtin_tools()}


_TITLE = """### Task:
Write a short title for the chat below.
### Guidelines:
- Two to four words that name its main subject.
- No emojis, quotation marks or formatting.
- Answer with the JSON object only, no text before or after it and no code fences.
### Output:
JSON format: { "title": "the title" }
### Examples:
- { "title": "Bread Baking" },
- { "title": "Train Timetables" }
### Chat History:
<chat_history>
{history}
</chat_history>"""

_FOLLOW_UPS = """### Task:
Suggest 3-5 messages the user might send next to move their goal forward.
### Guidelines:
- Write as the user, to the assistant, in the user's language and tone.
- Propose concrete next steps, comparisons or questions; do not repeat what is answered.
- Strongest suggestion first; each under 400 characters.
- Answer with a JSON object whose "follow_ups" key holds an array of strings, nothing else.
### Output:
JSON format: { "follow_ups": ["next message 1", "next message 2", "next message 3"] }
### Chat History:
<chat_history>
{history}
</chat_history>"""

_TAGS = """### Task:
Give 1-3 broad tags for the themes of the chat below, and 1-3 narrower subtopic tags.

### Guidelines:
- Start with broad domains (Science, Technology, Arts, Business, Health, Sports, Education)
- If the chat is very short or mixed, use only ["General"]
- Use the chat's language

### Output:
JSON format: { "tags": ["tag1", "tag2", "tag3"] }

### Chat History:
<chat_history>
{history}
</chat_history>"""


def _history(messages: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{m['role'].upper()}: {m.get('content') or ''}"
        for m in messages
        if m["role"] in ("user", "assistant")
    )


def _task(model: str, template: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    content = template.replace("{history}", _history(messages))
    return {"model": model, "messages": [{"role": "user", "content": content}], "stream": False}


def title_request(model: str, question: str) -> dict[str, Any]:
    """A new chat's title request, sent with the message (its answer not yet there)."""
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]
    return {**_task(model, _TITLE, messages), "max_tokens": 1000}


def background_requests(model: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """After a reply: follow-ups, then tags (sent one after the other), no ``max_tokens``."""
    return [_task(model, _FOLLOW_UPS, messages), _task(model, _TAGS, messages)]


def long_background_request(model: str) -> dict[str, Any]:
    """A request of the background shape (not streamed, no max_tokens) that surely runs long,
    where a tiny model may stop its tasks at once: its answer must be 400 numbers (about
    1,000 tokens)."""
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 400, "maxItems": 400}
    return {
        "model": model,
        "messages": [{"role": "user", "content": "List 400 numbers as a JSON array."}],
        "stream": False,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
