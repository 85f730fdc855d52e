"""Digests and rule labels: what a trajectory's reasoning mode is judged by (docs/methods.md §5.2).

A *digest* is the assistant's natural-language content, cut to 512 tokens, followed by its
action skeleton (``R:search_flights R:get_fare_rules W:book_flight ANS``). A *rule label*
is the first of the seven §5.2 rules that matches the action sequence; the rule labels name
the modes of the embedding codebook (``curation.modes``) and stand in for it when there are
too few digests to fit one. Text from models and tools is untrusted: :func:`sanitize_text`
makes any of it safe for a tokenizer.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from trajsynth.curation.canon import call_key, is_identifier, parse_json_maybe
from trajsynth.schemas import (
    MessageRole,
    ObsClass,
    ReasoningMode,
    ToolAccess,
    ToolCallRecord,
    Trajectory,
)

__all__ = [
    "CODE_TOOL_WORDS",
    "DIGEST_TOKENS",
    "EMBED_MAX_CHARS",
    "action_skeleton",
    "digest",
    "digest_for_embedding",
    "is_code_tool",
    "rule_mode",
    "sanitize_text",
    "text_key",
    "tool_access",
]

DIGEST_TOKENS = 512
"""Tokens (whitespace-separated words) of assistant text a digest keeps (§5.2)."""
EMBED_MAX_CHARS = 1000
"""Characters of a digest sent to the embedder (MiniLM reads 256 word pieces, ~1,000 chars)."""
CODE_TOOL_WORDS = ("python", "run_code", "execute_code", "exec_code", "code_interpreter")
"""Substrings that mark the sandboxed code tool (the planner's ``has_code_tool`` uses the same)."""

_READ_VERBS = frozenset(
    {
        "get", "list", "search", "find", "read", "fetch", "lookup", "query", "show", "describe",
        "view", "check", "count", "browse", "inspect", "retrieve", "calculate", "compute",
        "estimate", "quote", "preview", "validate", "verify", "compare", "stat", "status",
    }
)  # fmt: skip
_WRITE_VERBS = frozenset(
    {
        "create", "book", "cancel", "delete", "update", "add", "send", "remove", "set", "write",
        "put", "post", "patch", "edit", "modify", "insert", "submit", "checkout", "pay",
        "purchase", "order", "buy", "move", "rename", "reschedule", "schedule", "transfer",
        "refund", "return", "reserve", "register", "run", "execute", "exec", "save", "exchange",
    }
)  # fmt: skip
_NAME_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WORD = re.compile(r"\S+")
_MAX_TOKEN_CHARS = 48
_MAX_OBS_CHARS = 200_000


# --- text hygiene ----------------------------------------------------------------------------


def sanitize_text(text: str | bytes | None) -> str:
    """Text any tokenizer takes: bytes decoded, broken UTF-8 replaced, control chars blanked.

    >>> sanitize_text(b"caf\\xe9\\x00 ok"), sanitize_text("x\\udcff y"), sanitize_text(None)
    ('caf\\ufffd  ok', 'x? y', '')
    """
    if text is None:
        return ""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates -> "?"
    return _CONTROL.sub(" ", text)


def text_key(text: str) -> str:
    """Cache key of one text to embed (sha256 of its UTF-8 bytes, 32 hex).

    >>> len(text_key("hello")), text_key("a") == text_key("a")
    (32, True)
    """
    return hashlib.sha256(sanitize_text(text).encode("utf-8")).hexdigest()[:32]


# --- tools -----------------------------------------------------------------------------------


def is_code_tool(name: str, code_tools: Collection[str] | None = None) -> bool:
    """Whether ``name`` is the sandboxed code tool (listed, or named like one).

    >>> is_code_tool("run_python"), is_code_tool("search_flights")
    (True, False)
    """
    if code_tools is not None and name in code_tools:
        return True
    low = name.lower()
    return any(word in low for word in CODE_TOOL_WORDS)


def tool_access(name: str, access: Mapping[str, ToolAccess] | None = None) -> ToolAccess:
    """Read or write: from the cluster's tags when given, else from the tool's verb.

    The first name token decides when it is a known verb, then any write verb, then any read
    verb; a name that says nothing is a write (the conservative default of ``ToolSpec``).

    >>> tool_access("search_flights").value, tool_access("book_flight").value
    ('read', 'write')
    >>> tool_access("x", {"x": ToolAccess.READ}).value
    'read'
    """
    if access is not None and name in access:
        return ToolAccess(access[name])
    tokens = [t.lower() for t in _NAME_SPLIT.split(name) if t]
    if tokens and tokens[0] in _READ_VERBS:
        return ToolAccess.READ
    if tokens and tokens[0] in _WRITE_VERBS:
        return ToolAccess.WRITE
    if any(t in _WRITE_VERBS for t in tokens):
        return ToolAccess.WRITE
    if any(t in _READ_VERBS for t in tokens):
        return ToolAccess.READ
    return ToolAccess.WRITE


# --- digests (§5.2) --------------------------------------------------------------------------


def _assistant_messages(trajectory: Trajectory) -> list[Any]:
    return [m for m in trajectory.messages if m.role is MessageRole.ASSISTANT]


def _asks_question(text: str | None) -> bool:
    return bool(text) and "?" in text


def action_skeleton(trajectory: Trajectory, access: Mapping[str, ToolAccess] | None = None) -> str:
    """The action skeleton of a digest (docs/methods.md §5.2).

    ``R:tool`` / ``W:tool`` per call in order (``!`` appended when its observation was an
    error), ``ASK`` first when the first assistant turn is a question with no tool call, and
    ``ANS`` last when the trajectory ends with an answer. The ``!`` and ``ASK`` marks are a
    trajsynth choice: they keep recovery and clarification visible to the embedding.
    """
    parts: list[str] = []
    first = next(iter(_assistant_messages(trajectory)), None)
    if first is not None and not first.tool_calls and _asks_question(first.content):
        parts.append("ASK")
    for call in trajectory.calls:
        tag = "R" if tool_access(call.tool, access) is ToolAccess.READ else "W"
        mark = "!" if call.obs_class is ObsClass.ERROR else ""
        parts.append(f"{tag}:{sanitize_text(call.tool)[:64]}{mark}")
    if trajectory.final_answer:
        parts.append("ANS")
    return " ".join(parts)


def digest(
    trajectory: Trajectory,
    access: Mapping[str, ToolAccess] | None = None,
    *,
    max_tokens: int = DIGEST_TOKENS,
) -> str:
    """The text a trajectory's mode is judged by (docs/methods.md §5.2).

    The assistant's natural-language content per turn (messages have no separate reasoning
    field, so their content), joined with `` | `` and cut to ``max_tokens``
    whitespace-separated tokens (each token at most 48 characters), then a newline and the
    action skeleton. A trajectory with no assistant text is just its skeleton; one with neither
    gives ``""``.
    """
    tokens: list[str] = []
    for message in _assistant_messages(trajectory):
        if len(tokens) >= max_tokens:
            break
        text = sanitize_text(message.content)[: max_tokens * 64]
        words = [w[:_MAX_TOKEN_CHARS] for w in _WORD.findall(text)]
        if not words:
            continue
        if tokens:
            tokens.append("|")
        tokens.extend(words)
    words_part = " ".join(tokens[:max_tokens])
    skeleton = action_skeleton(trajectory, access)
    return "\n".join(part for part in (words_part, skeleton) if part)


def digest_for_embedding(text: str, max_chars: int = EMBED_MAX_CHARS) -> str:
    """A digest cut to ``max_chars`` so that its skeleton (the last line) survives.

    The embedder reads only its first ~256 word pieces; cutting the words part first keeps the
    actions in view.

    >>> digest_for_embedding("a " * 50 + "\\nR:x W:y", max_chars=20)
    'a a a a a a\\nR:x W:y'
    """
    text = sanitize_text(text)
    if len(text) <= max_chars:
        return text
    head, sep, skeleton = text.rpartition("\n")
    if not sep:
        return text[:max_chars]
    skeleton = skeleton[: max_chars // 2]
    room = max(0, max_chars - len(skeleton) - 1)
    return f"{head[:room].rstrip()}\n{skeleton}" if room else skeleton


# --- rule labels (§5.2) ----------------------------------------------------------------------


def _ident_values(value: Any, name: str | None = None, out: set[str] | None = None) -> set[str]:
    """String forms of every identifier-named value inside ``value`` (at any depth)."""
    out = set() if out is None else out
    if isinstance(value, Mapping):
        for key, item in value.items():
            _ident_values(item, str(key), out)
    elif isinstance(value, list | tuple):
        for item in value:
            _ident_values(item, name, out)
    elif name is not None and is_identifier(name):
        if isinstance(value, str) and value.strip():
            out.add(value.strip())
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out.add(str(value))
    return out


def _observation_entities(call: ToolCallRecord) -> set[str]:
    text = call.observation[:_MAX_OBS_CHARS] if call.observation else ""
    parsed = parse_json_maybe(text) if text else None
    return _ident_values(parsed) if isinstance(parsed, Mapping | list) else set()


def rule_mode(
    trajectory: Trajectory,
    access: Mapping[str, ToolAccess] | None = None,
    *,
    code_tools: Collection[str] | None = None,
) -> ReasoningMode:
    """The rule label of docs/methods.md §5.2 (first match wins).

    1. ``clarify_first``: the first assistant turn asks a question (has ``?``), no tool call.
    2. ``recover_after_error``: an error observation is followed by a different call
       (canonical call, §1.2) that does not fail.
    3. ``code_compute``: the sandboxed code tool is used.
    4. ``verify_after_write``: a read call names an entity id (an identifier-named argument
       value) that an earlier successful write named in its arguments or returned.
    5. ``explore_then_commit``: >= 3 read calls before the first write (all reads when the
       trajectory never writes).
    6. ``parallel_fanout``: >= 2 tool calls in one assistant turn.
    7. ``direct_execute``: none of the above.

    ``access`` maps tool names to read/write (the cluster's tags); unknown tools are tagged
    from their names (:func:`tool_access`).
    """
    assistant = _assistant_messages(trajectory)
    if assistant and not assistant[0].tool_calls and _asks_question(assistant[0].content):
        return ReasoningMode.CLARIFY_FIRST

    calls = trajectory.calls
    keys = [call_key(c) for c in calls]
    for i, call in enumerate(calls):
        if call.obs_class is ObsClass.ERROR and any(
            later.obs_class is not ObsClass.ERROR and keys[j] != keys[i]
            for j, later in enumerate(calls[i + 1 :], start=i + 1)
        ):
            return ReasoningMode.RECOVER_AFTER_ERROR

    if any(is_code_tool(c.tool, code_tools) for c in calls):
        return ReasoningMode.CODE_COMPUTE

    tags = [tool_access(c.tool, access) for c in calls]
    written: set[str] = set()
    for call, tag in zip(calls, tags, strict=True):
        if tag is ToolAccess.READ:
            if written and _ident_values(call.arguments or {}) & written:
                return ReasoningMode.VERIFY_AFTER_WRITE
        elif call.obs_class is not ObsClass.ERROR:
            written |= _ident_values(call.arguments or {}) | _observation_entities(call)

    first_write = next((i for i, t in enumerate(tags) if t is ToolAccess.WRITE), len(tags))
    if sum(t is ToolAccess.READ for t in tags[:first_write]) >= 3:
        return ReasoningMode.EXPLORE_THEN_COMMIT

    if any(m.tool_calls and len(m.tool_calls) >= 2 for m in assistant):
        return ReasoningMode.PARALLEL_FANOUT
    if not any(m.tool_calls for m in assistant):
        per_turn = Counter(c.turn for c in calls)  # calls recorded without their messages
        if any(n >= 2 for n in per_turn.values()) and len(per_turn) > 1:
            return ReasoningMode.PARALLEL_FANOUT
    return ReasoningMode.DIRECT_EXECUTE
