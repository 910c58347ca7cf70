"""The bounded open-book dialogue, advanced for many questions at once.

Tool-call format (the one the template teaches; docs/generation.md, "Open-book"): the model
ends a turn with one line

    Action: WikiSearch[keywords]          Action: GetIntro[article title]
    Action: FindEvidence[article title | keywords]
    Action: Python[expression]

and gets the next user message `Observation: <tool output>`; it ends the dialogue with
`Final Answer:` followed by the table. Text after the first action line (a model inventing
its own observation) is dropped from the transcript. A turn with neither, or with a malformed
or unknown action, gets an `Observation: Error: ...` saying what is expected: it costs a step,
never the job.

Every model call is an ordinary cached completion: the chat so far is the prompt, keyed like
any other item (`cqabench.generation.llm.cache.item_key`). Tools are deterministic, so replaying a
dialogue against a warm cache rebuilds the same chats, finds every completion cached and
makes no model call; a dialogue cut off by a killed job resumes at the first missing step.
`run_dialogues` is step-synchronous: each round sends the next turn of every unfinished
dialogue as one batch, so one engine session serves all questions.

Limits (config, recorded in every result row): `max_steps` model calls per dialogue,
`max_tool_chars` characters per observation, `max_total_tokens` for the dialogue's length
(prompt + output tokens of its latest call); reaching one ends the dialogue without a final
answer unless it already gave one. The step before the last tells the model to answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cqabench.common.config_defaults import default
from cqabench.common.errors import ConfigError
from cqabench.generation.agent.tools import TOOLS, Observation, Toolbox, ToolCall
from cqabench.generation.llm.base import Chat, Completion, Sampling, ToolsApi

_ACTION = re.compile(r"^[ \t]*Action[ \t]*:[ \t]*(.*)$", re.MULTILINE)
_CALL = re.compile(r"^([A-Za-z_]+)[ \t]*\[(.*)\][ \t]*$", re.DOTALL)
FINAL_MARKER = "Final Answer:"
LAST_STEP_NOTE = "(Last step: write Final Answer: and the table now.)"


def _schema_default(name: str) -> Any:
    """A limit's default: generation.open_book.<name>'s in the config schema (its one home)."""
    return field(default_factory=lambda: default("generation", "open_book", name))


@dataclass(frozen=True)
class Limits:
    """A dialogue's limits (generation.open_book); a limit the config leaves out takes the schema's default."""

    max_steps: int = _schema_default("max_steps")
    max_tool_chars: int = _schema_default("max_tool_chars")
    max_total_tokens: int = _schema_default("max_total_tokens")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, where: str = "generation.open_book") -> Limits:
        cfg = dict(cfg or {})
        out = {}
        for name in ("max_steps", "max_tool_chars", "max_total_tokens"):
            if name in cfg:
                value = cfg[name]
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{where}.{name}: expected a positive integer, got {value!r}")
                out[name] = value
        return cls(**out)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Parsed:
    """What one model turn asks for: a tool call, the final answer, or nothing usable."""

    kind: str  # "tool" | "final" | "error"
    text: str  # the turn as kept in the transcript
    call: ToolCall | None = None
    error: str = ""


def parse_turn(text: str) -> Parsed:
    """The first `Action:` line or `Final Answer:`, whichever comes first."""
    action = _ACTION.search(text)
    final = text.find(FINAL_MARKER)
    if final >= 0 and (action is None or final < action.start()):
        return Parsed("final", text.strip())
    if action is None:
        return Parsed(
            "error",
            text.strip(),
            error=(
                "no action found. End your turn with one line 'Action: Tool[input]' "
                f"(tools: {', '.join(TOOLS)}) or give 'Final Answer:' and the table."
            ),
        )
    kept = text[: action.end()].strip()
    m = _CALL.match(action.group(1).strip())
    if m is None:
        return Parsed(
            "error",
            kept,
            error=(
                f"malformed action {action.group(1).strip()[:80]!r}; write e.g. Action: WikiSearch[keywords] "
                "or Action: FindEvidence[article title | keywords]"
            ),
        )
    tool = m.group(1)
    if tool not in TOOLS:
        return Parsed("error", kept, error=f"unknown tool {tool!r}; tools: {', '.join(TOOLS)}")
    return Parsed("tool", kept, ToolCall(tool, m.group(2)))


@dataclass
class AgentContext:
    """What a cell's dialogues share: tools, limits, and the sampling / cache key of their calls."""

    toolbox: Toolbox
    limits: Limits
    sampling: Sampling
    key_of: Callable[[Chat], str]
    tools: ToolsApi | None = None  # openai tools_api: the tool definitions sent with each turn, and their translation


@dataclass
class Dialogue:
    """One question's dialogue: the chat so far, its steps, and why it ended."""

    qid: str
    chat: Chat
    ctx: AgentContext
    steps: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    stop_reason: str = ""
    completions: list[tuple[str, Completion]] = field(default_factory=list)  # (cache key, completion) per call

    @property
    def final_text(self) -> str:
        return self.steps[-1]["model"] if self.steps else ""

    @property
    def docids(self) -> list[str]:
        """Every document an observation showed, first-seen order (predictions' context_docids)."""
        seen: list[str] = []
        for step in self.steps:
            for d in step.get("docids", []):
                if d not in seen:
                    seen.append(d)
        return seen

    def transcript(self) -> str:
        return json.dumps({"stop_reason": self.stop_reason, "steps": self.steps}, ensure_ascii=False)


# complete(dialogues, chats) -> (completion per chat, whether each one came from the cache)
Complete = Callable[[Sequence[Dialogue], Sequence[Chat]], tuple[list[Completion], list[bool]]]


def run_dialogues(dialogues: Sequence[Dialogue], complete: Complete) -> int:
    """Advance every dialogue to its end, one batched model call per round; returns the rounds."""
    rounds = 0
    while True:
        active = [d for d in dialogues if not d.done]
        if not active:
            return rounds
        rounds += 1
        chats = [list(d.chat) for d in active]
        completions, cached = complete(active, chats)
        pending: list[tuple[Dialogue, Parsed, dict[str, Any]]] = []
        for d, chat, comp, was_cached in zip(active, chats, completions, cached):
            d.completions.append((d.ctx.key_of(chat), comp))
            parsed = parse_turn(comp.text)
            step = {
                "step": len(d.steps) + 1,
                "model": parsed.text,
                "kind": parsed.kind,
                "prompt_tokens": comp.prompt_tokens,
                "output_tokens": comp.output_tokens,
                "cached": was_cached,
            }
            d.steps.append(step)
            if getattr(comp, "error", ""):  # the backend gave up on this turn (never cached): a rerun asks again
                step["kind"], step["error"] = "failed", comp.error
                d.done, d.stop_reason = True, "generation_failed"
                continue
            if parsed.kind == "final":
                d.done, d.stop_reason = True, "final_answer"
                continue
            if parsed.call is not None:
                step["action"], step["input"] = parsed.call.tool, parsed.call.argument
            pending.append((d, parsed, step))
        observations: dict[int, Observation] = {}
        by_toolbox: dict[int, list[tuple[Dialogue, Parsed, dict[str, Any]]]] = {}
        for entry in pending:
            if entry[1].call is not None:
                by_toolbox.setdefault(id(entry[0].ctx.toolbox), []).append(entry)
        for entries in by_toolbox.values():  # one search batch per tool corpus and round
            results = entries[0][0].ctx.toolbox.run_many([p.call for _, p, _ in entries if p.call is not None])
            observations.update(zip((id(s) for _, _, s in entries), results))
        for d, parsed, step in pending:
            obs = observations.get(id(step)) or Observation(f"Error: {parsed.error}", error=True)
            step["observation"], step["docids"], step["tool_error"] = obs.text, obs.docids, obs.error
            comp, limits = d.completions[-1][1], d.ctx.limits
            if len(d.steps) >= limits.max_steps:
                d.done, d.stop_reason = True, "max_steps"
            elif comp.prompt_tokens + comp.output_tokens >= limits.max_total_tokens:
                d.done, d.stop_reason = True, "max_total_tokens"
            if d.done:
                continue
            note = f"\n{LAST_STEP_NOTE}" if len(d.steps) == limits.max_steps - 1 else ""
            d.chat.append({"role": "assistant", "content": parsed.text})
            d.chat.append({"role": "user", "content": f"Observation: {obs.text}{note}"})
