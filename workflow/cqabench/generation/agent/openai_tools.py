"""The open-book tools through the OpenAI tools API (`tools=` / `tool_calls`), for `tools_api: true`.

The dialogue, its cache keys and its transcript stay in the one text format of
`cqabench.generation.agent.loop` (an assistant turn ending in `Action: Tool[input]`, then a user message
`Observation: ...`); only the request and the reply are translated at the API boundary:

* request: each assistant turn that ends in a valid action line becomes an assistant message
  with one `tool_calls` entry (id `call_<n>`, arguments as JSON), and the observation after it
  a `tool` message answering that id; every other message is sent as it is;
* reply: the first tool call becomes `Action: Name[input]` after the message's text (one tool
  per turn); arguments that are not the documented JSON are passed through as the input, so the
  tool answers with its own error message.
"""

from __future__ import annotations

import json
from typing import Any

from cqabench.generation.agent.loop import parse_turn
from cqabench.generation.llm.base import Chat

_ARGS: dict[str, tuple[str, ...]] = {
    "WikiSearch": ("keywords",),
    "FindEvidence": ("article", "keywords"),
    "GetIntro": ("article",),
    "Python": ("expression",),
}
_DESCRIPTIONS = {
    "WikiSearch": "The most relevant Wikipedia article for the keywords: its title and introduction.",
    "FindEvidence": "Sentences, table rows and infobox entries of the article that match the keywords.",
    "GetIntro": "The introduction of the article.",
    "Python": "The value of an arithmetic or date expression, e.g. 2002 - 1995 or "
    "years_between(date(1940, 10, 9), date(1980, 12, 8)).",
}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": _DESCRIPTIONS[name],
            "parameters": {
                "type": "object",
                "properties": {a: {"type": "string"} for a in args},
                "required": list(args),
                "additionalProperties": False,
            },
        },
    }
    for name, args in _ARGS.items()
]


def _as_input(name: str, arguments: dict[str, Any]) -> str:
    values = [" ".join(str(arguments.get(a, "")).split()) for a in _ARGS[name]]
    return " | ".join(values)


def action_text(content: str | None, name: str, arguments: str) -> str:
    """A tool call of the API as the text format's action line (after the turn's own text)."""
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        parsed = None
    if name in _ARGS and isinstance(parsed, dict) and all(a in parsed for a in _ARGS[name]):
        argument = _as_input(name, parsed)
    else:
        argument = " ".join(str(arguments).split())
    head = (content or "").strip()
    return f"{head}\n" * bool(head) + f"Action: {name}[{argument}]"


def to_api_messages(chat: Chat) -> list[dict[str, Any]]:
    """The text-format chat as API messages with tool calls and tool results."""
    out: list[dict[str, Any]] = []
    call_for_next: str | None = None
    n = 0
    for message in chat:
        role, content = message["role"], message["content"]
        if call_for_next is not None and role == "user" and content.startswith("Observation: "):
            out.append(
                {"role": "tool", "tool_call_id": call_for_next, "content": content.removeprefix("Observation: ")}
            )
            call_for_next = None
            continue
        call_for_next = None
        if role == "assistant":
            parsed = parse_turn(content)
            if parsed.kind == "tool" and parsed.call is not None and parsed.call.tool in _ARGS:
                n += 1
                call_id = f"call_{n}"
                parts = [p.strip() for p in parsed.call.argument.split("|", len(_ARGS[parsed.call.tool]) - 1)]
                args = dict(zip(_ARGS[parsed.call.tool], parts + [""] * len(_ARGS[parsed.call.tool])))
                thought = content[: content.rfind("Action:")].strip()
                out.append(
                    {
                        "role": "assistant",
                        "content": thought or None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": parsed.call.tool,
                                    "arguments": json.dumps(args, ensure_ascii=False),
                                },
                            }
                        ],
                    }
                )
                call_for_next = call_id
                continue
        out.append({"role": role, "content": content})
    return out


class AgentToolsApi:
    """The agent's half of the API boundary (cqabench.generation.llm.base.ToolsApi), handed to the backend."""

    schemas = TOOL_SCHEMAS
    to_api_messages = staticmethod(to_api_messages)
    action_text = staticmethod(action_text)


TOOLS_API = AgentToolsApi()
