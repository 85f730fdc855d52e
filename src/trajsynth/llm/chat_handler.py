"""The llama.cpp chat handler the embedded server uses for tool calling, and its launcher.

Run as ``python -m trajsynth.llm.chat_handler <llama_cpp.server options>``: it registers
the handler under ``CHAT_FORMAT`` and starts ``llama_cpp.server`` with the same options.

Why not llama-cpp-python's own ``chatml-function-calling`` (read in 0.3.36):

* its template has no case for ``tool`` messages, so the model never sees a tool result;
* with ``tool_choice="auto"`` a plain-text answer is decoded under the grammar meant for
  "another call or end", so every text answer comes back empty;
* ``"required"`` fails an assertion (HTTP 500), tools are ignored when ``tool_choice`` is
  absent, ``seed`` is dropped, and tool-call turns carry no logprobs.

This handler keeps the prompt idea (ChatML, the tools listed in the system message, a call
written as ``functions.<name>:`` and a JSON object) and changes the rest:

* tool results are rendered (``functions.<name> returned:``);
* under ``"auto"`` the model's own first-token distribution decides: the turn is a call
  with probability ``P(first token begins "functions.")`` (at the request's temperature,
  before top-k/top-p/min-p truncation, optionally shifted by ``--call_bias``), drawn from
  the request's seed; otherwise a text answer is sampled freely. Constraining the first
  token to ``message:`` or ``functions.<name>:``, as the stock handler does, lets
  tokenisation decide instead ("functions" is one token, "message" four), so it nearly
  always calls.

  Measured with SmolLM2-135M-Instruct (system prompt "You are a helpful assistant.", two
  tools): P(call) is 0.000 for "What is the weather in Paris?", 0.003 for "Find me a red
  mug in the shop.", 0.000 for "Hi! How are you today?", 0.004 for "Thanks, that's all!"
  and 0.058 right after a get_weather result. The model does not tell when a call helps,
  so with ``"auto"`` it almost always answers in words. What works: ``"required"`` (or a
  named tool) when the turn must act, then ``"auto"`` after the tool result, where it
  answers from the result ("The weather in Paris is sunny."); or ``--call_bias``;
* the tool's name is then chosen under a grammar of the tool names, the arguments under a
  grammar from its JSON schema, so they parse unless ``max_tokens`` cuts them off (then
  they are returned as they are, and the client keeps them raw);
* ``"required"``, ``"none"`` and a named tool work; the seed is honoured;
* every turn returns the logprobs of the tokens it generated (``LogprobRecorder``).

A model trained here is served in the layout its rows were rendered in: a GGUF whose metadata
names ``llm.tool_template.TOOL_CALL_JSON`` under ``TOOL_FORMAT_KEY`` (what
``training.serve.export_gguf`` writes) gets ``TOOL_CHAT_TEMPLATE``'s prompt, writes a call as
``<tool_call>\\n{"name": "<name>", "arguments": {...}}\\n</tool_call>`` and reads results in
``<tool_response>``; the decision, the name grammar and the argument grammar work the same way
(``ToolFormat``).

Only the standard library and llama_cpp are imported at module level, and llama_cpp only
inside functions, so importing this module is cheap.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CHAT_FORMAT",
    "FUNCTIONS_FORMAT",
    "TOOL_CALL_JSON_FORMAT",
    "ToolFormat",
    "COMPUTED_MARK",
    "MAX_PARALLEL_CALLS",
    "CompactRAMCache",
    "MaskCallStart",
    "ResultStop",
    "args_gbnf",
    "chatml_tools_handler",
    "cut_made_up_result",
    "main",
    "own_options",
    "render_prompt",
    "tool_format",
]

CHAT_FORMAT = "trajsynth-chatml-tools"
MAX_PARALLEL_CALLS = 4
"""The most tool calls one turn may hold (``--max_parallel_calls`` lowers it)."""
_limits: dict[str, Any] = {
    "max_parallel_calls": MAX_PARALLEL_CALLS,
    "call_bias": 0.0,
    "deterministic": False,
}
_END = "<|im_end|>"
COMPUTED_MARK = "trajsynth-chat-computed"
"""Starts the server's log line for each chat request it computed."""
_MIN_LOGPROB = -9999.0  # JSON has no -inf


def _text(content: Any) -> str:
    """Message content as text (OpenAI content parts are joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _tools_text(tools: Sequence[dict[str, Any]]) -> str:
    lines = ["", "", "You have access to the following functions:"]
    for tool in tools:
        fn = tool["function"]
        desc = fn.get("description") or ""
        lines.append("")
        lines.append(f"functions.{fn['name']}:" + (f" {desc}" if desc else ""))
        lines.append(json.dumps(fn.get("parameters") or {"type": "object"}))
    lines += [
        "",
        "To answer in words, just write your answer.",
        "To call a function instead, write its name after 'functions.' and a colon on one "
        "line, then its arguments as a JSON object on the next, for example:",
        "functions.<function_name>:",
        '{"arg1": "value1", "arg2": "value2"}',
    ]
    return "\n".join(lines)


def render_prompt(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
    """The ChatML prompt, with the tool list in the system message and tool results shown.

    >>> p = render_prompt([{"role": "user", "content": "hi"},
    ...                    {"role": "assistant", "content": None, "tool_calls": [
    ...                        {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
    ...                    {"role": "tool", "tool_call_id": "c1", "content": "42"}], [])
    >>> print(p)
    <|im_start|>user
    hi<|im_end|>
    <|im_start|>assistant
    functions.f:
    {}<|im_end|>
    <|im_start|>tool
    functions.f returned:
    42<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    """
    tool_text = _tools_text(tools) if tools else ""
    call_names: dict[str, str] = {}
    parts: list[str] = []
    if tool_text and not (messages and messages[0].get("role") == "system"):
        parts.append(f"<|im_start|>system\n{tool_text.lstrip()}{_END}\n")
    for i, msg in enumerate(messages):
        role = msg.get("role", "user")
        content = _text(msg.get("content"))
        if role == "system":
            body = content + (tool_text if i == 0 else "")
        elif role == "assistant":
            chunks = []
            if content:
                chunks.append(content)
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                call_names[call.get("id", "")] = fn.get("name", "")
                chunks.append(f"functions.{fn.get('name', '')}:\n{fn.get('arguments', '')}")
            body = "\n".join(chunks)
        elif role == "tool":
            name = msg.get("name") or call_names.get(msg.get("tool_call_id") or "", "")
            body = (f"functions.{name} returned:\n" if name else "") + content
        else:
            body = content
        parts.append(f"<|im_start|>{role}\n{body}{_END}\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _choice_grammar(names: Sequence[str], *, end: bool, fmt: ToolFormat | None = None) -> Any:
    """The text that chooses one of the tools (``functions.<name>:``; ``fmt.choice``), after
    ``fmt.next_choice`` when ``end``; with ``end``, or nothing.

    "Or nothing" makes the grammar accept at once, which lets the model end its turn with
    its own end-of-turn token (spelling ``<|im_end|>`` out in characters, as the stock
    handler asks, is so unlikely that its follow-up almost always invents another call).
    """
    from llama_cpp import llama_grammar

    fmt = fmt or FUNCTIONS_FORMAT
    lead = fmt.next_choice if end else ""
    rule = " | ".join(_literal(lead + fmt.choice(n)) for n in names)
    root = f"root ::= ({rule})?\n" if end else f"root ::= {rule}\n"
    return llama_grammar.LlamaGrammar.from_string(root, verbose=False)


def _starts_call(text: str) -> bool:
    """Whether a first generated token begins ``functions.``.

    >>> [_starts_call(t) for t in ("functions", " func", "fun", "Functions", "The")]
    [True, True, False, False, False]
    """
    word = text.strip()
    return len(word) >= 4 and ("functions.".startswith(word) or word.startswith("functions"))


_TOOL_CALL_OPEN = "<tool_call>"


def _starts_tool_call(text: str) -> bool:
    """Whether a first generated token begins ``<tool_call>``.

    >>> [_starts_tool_call(t) for t in ("<", "<tool", " <tool_call>", "tool", "The", "")]
    [True, True, True, False, False, False]
    """
    word = text.strip()
    return bool(word) and (_TOOL_CALL_OPEN.startswith(word) or word.startswith(_TOOL_CALL_OPEN))


def _json_call_open(name: str) -> str:
    return f'{_TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": '


_JSON_CALL_NAME = re.compile(r'"name": "([^"]*)"')


@dataclass(frozen=True)
class ToolFormat:
    """How a model reads tools and writes a call: the prompt, the text that opens a call to
    a named tool (what the name grammar lets it write), what closes one, and which first
    tokens begin a call (the ``"auto"`` decision)."""

    name: str
    render: Callable[[Sequence[dict[str, Any]], Sequence[dict[str, Any]]], str]
    choice: Callable[[str], str]  # the text a model writes to choose a tool
    after_choice: Callable[[str], str]  # what the prompt holds after that choice
    after_arguments: str  # what follows a call's arguments
    next_choice: str  # what comes before a second choice in the same turn
    choice_stop: tuple[str, ...]
    name_of: Callable[[str], str]
    starts_call: Callable[[str], bool]


def _render_json(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
    from trajsynth.llm.tool_template import render_tool_template

    return render_tool_template(messages, tools)


def _json_name(text: str) -> str:
    found = _JSON_CALL_NAME.search(text)
    return found.group(1) if found else ""


FUNCTIONS_FORMAT = ToolFormat(
    name="functions",
    render=render_prompt,
    choice=lambda name: f"functions.{name}:",
    after_choice=lambda name: f"functions.{name}:\n",
    after_arguments="\n",
    next_choice="",
    choice_stop=(":",),
    name_of=lambda text: text.strip().removeprefix("functions."),
    starts_call=_starts_call,
)
"""The embedded base model's layout (see the module doc)."""

TOOL_CALL_JSON_FORMAT = ToolFormat(
    name="tool-call-json",
    render=_render_json,
    choice=_json_call_open,
    after_choice=_json_call_open,
    after_arguments="}\n</tool_call>",
    next_choice="\n",
    choice_stop=(),
    name_of=_json_name,
    starts_call=_starts_tool_call,
)
"""``llm.tool_template.TOOL_CHAT_TEMPLATE``'s layout: a model trained here."""


def tool_format(llama: Any) -> ToolFormat:
    """The layout the loaded model was trained in, from its GGUF metadata."""
    from trajsynth.llm.tool_template import TOOL_CALL_JSON, TOOL_FORMAT_KEY

    metadata = getattr(llama, "metadata", None) or {}
    named = metadata.get(TOOL_FORMAT_KEY)
    return TOOL_CALL_JSON_FORMAT if named == TOOL_CALL_JSON else FUNCTIONS_FORMAT


_call_tokens: dict[tuple[int, str], Any] = {}


def _call_token_ids(llama: Any, fmt: ToolFormat = FUNCTIONS_FORMAT) -> Any:
    """Ids of the vocabulary's tokens that begin a call in ``fmt`` (scanned once per model)."""
    import numpy as np

    key = (id(llama), fmt.name)
    if key not in _call_tokens:
        ids = [
            t
            for t in range(llama.n_vocab())
            if fmt.starts_call(llama.detokenize([t]).decode("utf-8", errors="replace"))
        ]
        _call_tokens[key] = np.array(ids, dtype=np.int64)
    return _call_tokens[key]


class _LastLogits:
    """A logits processor that keeps the raw logits of the (last) step it saw."""

    row: Any = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np

        self.row = np.array(scores, dtype=np.float64)
        return scores


def call_probability(logits: Any, call_ids: Any, temperature: float, call_bias: float) -> float:
    """P(the first token begins a call) from raw logits, at ``temperature``, shifted.

    ``call_bias`` is added to the log-odds; ``temperature`` 0 gives 0 or 1 (greedy).

    >>> import numpy as np
    >>> logits = np.log(np.array([0.25, 0.75]))
    >>> round(call_probability(logits, np.array([0]), 1.0, 0.0), 4)
    0.25
    >>> round(call_probability(logits, np.array([0]), 1.0, float(np.log(3))), 4)  # odds x3
    0.5
    >>> call_probability(logits, np.array([0]), 0.0, 0.0)
    0.0
    """
    import numpy as np

    if len(call_ids) == 0:
        return 0.0
    scaled = logits / max(temperature, 1e-6)
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    p = float(probs[call_ids].sum())
    if temperature <= 0.0:
        p = 1.0 if p > 0.5 else 0.0
    if p <= 0.0 or p >= 1.0 or call_bias == 0.0:
        return p
    odds = math.log(p) - math.log1p(-p) + call_bias
    return 1.0 / (1.0 + math.exp(-odds))


class LogprobRecorder:
    """A llama_cpp logits processor that records each step's logprobs, cheaply.

    llama-cpp-python computes logprobs after the fact by sorting the whole vocabulary in
    Python for every generated token (about three times the cost of generating without
    them, measured). This sees the raw logits at each sampling step instead (before the
    grammar, like the stock logprobs), keeps the top ``k`` by ``argpartition``, and reads
    which token was sampled from the next step's input. The last sampled token of a
    completion is never fed back, so it gets no entry: when the completion ended on the
    model's end-of-turn token that token is the unrecorded one, otherwise (a stop string,
    ``max_tokens``) the last text token is.
    """

    def __init__(self, llama: Any, k: int) -> None:
        self.llama = llama
        self.k = max(1, k)
        self.entries: list[dict[str, Any]] = []
        self._pending: tuple[Any, Any] | None = None

    def _piece(self, token: int) -> str:
        return self.llama.detokenize([token]).decode("utf-8", errors="replace")

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np

        if self._pending is not None and len(input_ids):
            logprobs, top = self._pending
            token = int(input_ids[-1])
            self.entries.append(
                {
                    "token": self._piece(token),
                    "logprob": max(float(logprobs[token]), _MIN_LOGPROB),
                    "bytes": None,
                    "top_logprobs": [
                        {
                            "token": self._piece(int(t)),
                            "logprob": max(float(logprobs[t]), _MIN_LOGPROB),
                            "bytes": None,
                        }
                        for t in top
                    ],
                }
            )
        logits = np.array(scores, dtype=np.float64)
        peak = logits.max()
        logprobs = logits - (peak + np.log(np.exp(logits - peak).sum()))
        k = min(self.k, logprobs.shape[0] - 1)
        top = np.argpartition(-logprobs, k)[:k]
        top = top[np.argsort(-logprobs[top])]
        self._pending = (logprobs, top)
        return scores


_RESULT_START = re.compile(r"(?m)^[ \t]*(?:functions\.[^\s:]*[ \t]+returned\b|<tool_response>)")
"""A line where a text answer starts writing a tool result itself (``FUNCTIONS_FORMAT``'s
``functions.<name> returned`` or ``TOOL_CALL_JSON_FORMAT``'s ``<tool_response>``)."""


def cut_made_up_result(text: str) -> tuple[str, bool]:
    """``text`` up to where it starts writing a tool result, and whether it did.

    >>> cut_made_up_result('All done.\\nfunctions.delete_file returned:\\n{}')
    ('All done.', True)
    >>> cut_made_up_result("The call returned: 42.")
    ('The call returned: 42.', False)
    """
    found = _RESULT_START.search(text)
    if found is None:
        return text, False
    return text[: found.start()].rstrip(), True


class ResultStop:
    """A llama_cpp stopping criterion: ends a text answer as soon as the model starts
    writing a tool result (``_RESULT_START``), which it imitates from the prompt's tool
    turns. Without it the model answers with ``functions.<name> returned:`` and a made-up
    result, which a parser would take for a call."""

    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self.prompt_len: int | None = None
        self.fired = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if self.prompt_len is None:  # first call: the prompt and one generated token
            self.prompt_len = len(input_ids) - 1
        generated = [int(t) for t in input_ids[self.prompt_len :]]
        text = self.llama.detokenize(generated).decode("utf-8", errors="replace")
        self.fired = _RESULT_START.search(text) is not None
        return self.fired


_ANY_STRING_CHAR = '[^"\\\\]'
_NO_CONTROL_CHAR = '[^"\\\\\\x7F\\x00-\\x1F]'
_PATTERN_DOT = "dot ::= [^\\x0A\\x0D]"


def args_gbnf(schema_json: str) -> str:
    r"""The GBNF of a call's arguments under its JSON schema, in which a string holds no raw
    control character (JSON forbids them; a newline must be written ``\n``).

    llama-cpp-python's schema converter lets a string character be anything but ``"`` and
    ``\``, so a model could write a raw newline inside a string and the arguments failed as
    invalid JSON; its plain ``JSON_GBNF`` already excludes them.

    >>> "x00-" in args_gbnf('{"type": "object", "properties": {"a": {"type": "string"}}}')
    True
    """
    from llama_cpp import llama_grammar

    gbnf = llama_grammar.json_schema_to_gbnf(schema_json)
    # ``dot`` (a regex pattern's ``.``) excludes only CR and LF, and lets ``"`` end the string
    gbnf = gbnf.replace(_ANY_STRING_CHAR, _NO_CONTROL_CHAR)
    return gbnf.replace(_PATTERN_DOT, "dot ::= " + _NO_CONTROL_CHAR)


class MaskCallStart:
    """A llama_cpp logits processor for a text answer: the tokens that begin a call (or a
    result: ``functions``) are masked where a line starts, so the answer begins with words
    instead of imitating the prompt's tool turns (``ResultStop`` still ends one that gets
    there later in a line)."""

    def __init__(self, llama: Any, call_ids: Any) -> None:
        self.llama = llama
        self.call_ids = call_ids
        self.prompt_len: int | None = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.prompt_len is None:  # first call: nothing generated yet
            self.prompt_len = len(input_ids)
        generated = input_ids[self.prompt_len :]
        if len(generated):
            last = self.llama.detokenize([int(generated[-1])]).decode("utf-8", errors="replace")
            if not last.endswith("\n"):
                return scores
        if len(self.call_ids):
            scores[self.call_ids] = -float("inf")
        return scores


@functools.lru_cache(maxsize=256)
def _args_grammar(schema_json: str) -> Any:
    from llama_cpp import llama_grammar

    try:
        return llama_grammar.LlamaGrammar.from_string(args_gbnf(schema_json), verbose=False)
    except Exception:  # noqa: BLE001 - any schema the converter cannot take: plain JSON
        return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)


def chatml_tools_handler(
    llama: Any,
    messages: list[dict[str, Any]],
    functions: list[dict[str, Any]] | None = None,
    function_call: Any = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    temperature: float = 0.2,
    top_p: float = 0.95,
    top_k: int = 40,
    min_p: float = 0.05,
    typical_p: float = 1.0,
    stream: bool = False,
    stop: str | list[str] | None = None,
    seed: int | None = None,
    max_tokens: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.0,
    model: str | None = None,
    logits_processor: Any = None,
    logprobs: bool | None = None,
    top_logprobs: int | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """A ``llama_cpp`` chat completion handler: ChatML with tool calls (see module doc)."""
    started = time.perf_counter()
    if stream:
        raise ValueError(f"{CHAT_FORMAT} does not stream")
    if functions and not tools:
        tools = [{"type": "function", "function": f} for f in functions]
    if function_call is not None and tool_choice is None:
        tool_choice = (
            function_call
            if isinstance(function_call, str)
            else {
                "type": "function",
                "function": function_call,
            }
        )
    tools = list(tools or [])
    if tools and tool_choice is None:
        tool_choice = "auto"  # the OpenAI default when tools are given
    if tool_choice == "none":
        tools = []
    by_name = {t["function"]["name"]: t for t in tools}

    stops = [stop] if isinstance(stop, str) else list(stop or [])
    stops.append(_END)
    want_logprobs = bool(logprobs)
    if seed is None:  # one seed for all the completions of this turn (see the probe below)
        seed = random.randrange(2**31)
    common = {
        "top_p": top_p,
        "top_k": top_k,
        "min_p": min_p,
        "typical_p": typical_p,
        "presence_penalty": presence_penalty,
        "frequency_penalty": frequency_penalty,
        "repeat_penalty": repeat_penalty,
        "model": model,
        "seed": seed,
    }
    fmt = tool_format(llama)
    prompt = fmt.render(messages, tools)
    # llama.cpp names a completion with a random uuid; the call ids the conversation (and so
    # every node id) carries come from the request instead, so one answer has one id
    request_digest = hashlib.sha256(f"{seed}\0{tool_choice}\0{prompt}".encode()).hexdigest()[:24]
    completions: list[dict[str, Any]] = []
    if _limits["deterministic"]:
        # Reusing the evaluated prefix of the previous request changes how the prompt is
        # split into batches, and so the logits' last bits: the same seeded request then
        # samples another answer depending on what ran before it (measured). Evaluating
        # every request from position 0 makes its answer a function of the request alone.
        llama.reset()

    recorded: list[dict[str, Any]] = []
    from llama_cpp import LogitsProcessorList

    def complete(text: str, *, extra: Sequence[Any] = (), **kw: Any) -> dict[str, Any]:
        processors = [*(logits_processor or []), *extra]
        recorder = None
        if want_logprobs:
            recorder = LogprobRecorder(llama, top_logprobs or 1)
            processors.insert(0, recorder)
        result = llama.create_completion(
            prompt=text,
            stream=False,
            logits_processor=LogitsProcessorList(processors) if processors else None,
            **{**common, **kw},
        )
        completions.append(result)
        if recorder is not None:
            for entry in recorder.entries:
                if not top_logprobs:
                    entry["top_logprobs"] = []
                recorded.append(entry)
        return result

    content: str | None = None
    calls: list[tuple[str, str]] = []
    finish_reason = "stop"
    from llama_cpp import StoppingCriteriaList

    def answer() -> tuple[str, str]:
        """A text answer, ended where the model starts writing a tool result itself (the
        prompt's tool turns show it how), with that start cut off."""
        tool_turns = bool(tools) or any(m.get("role") == "tool" for m in messages)
        out = complete(
            prompt,
            temperature=temperature,
            stop=stops,
            max_tokens=max_tokens,
            stopping_criteria=StoppingCriteriaList([ResultStop(llama)]),
            extra=[MaskCallStart(llama, _call_token_ids(llama, fmt))] if tool_turns else (),
        )
        text = out["choices"][0]["text"].removeprefix("message:").lstrip("\n")
        text, cut = cut_made_up_result(text)
        return text, "stop" if cut else out["choices"][0]["finish_reason"]

    if not tools:
        content, finish_reason = answer()
    else:
        calling = tool_choice != "auto"
        if isinstance(tool_choice, dict):
            name = tool_choice.get("function", {}).get("name")
            if name not in by_name:
                raise ValueError(f"tool_choice names {name!r}, which is not in tools")
        elif tool_choice == "auto":
            # The model's own first-token distribution decides (module doc).
            probe = _LastLogits()
            llama.create_completion(
                prompt=prompt, max_tokens=1, logits_processor=LogitsProcessorList([probe]), **common
            )
            p_call = call_probability(
                probe.row, _call_token_ids(llama, fmt), temperature, _limits["call_bias"]
            )
            calling = random.Random(seed).random() < p_call
        if not calling:
            content, finish_reason = answer()
        elif not isinstance(tool_choice, dict):
            out = complete(
                prompt,
                temperature=temperature,
                stop=list(fmt.choice_stop),
                max_tokens=64,
                grammar=_choice_grammar(list(by_name), end=False, fmt=fmt),
            )
            name = fmt.name_of(out["choices"][0]["text"])
        if calling:
            while name in by_name and len(calls) < _limits["max_parallel_calls"]:
                prompt += fmt.after_choice(name)
                params = by_name[name]["function"].get("parameters") or {"type": "object"}
                out = complete(
                    prompt,
                    temperature=temperature,
                    stop=stops,
                    max_tokens=max_tokens,
                    grammar=_args_grammar(json.dumps(params, sort_keys=True)),
                )
                arguments = out["choices"][0]["text"]
                calls.append((name, arguments))
                if (
                    out["choices"][0]["finish_reason"] == "length"
                    or isinstance(tool_choice, dict)
                    or len(calls) >= _limits["max_parallel_calls"]
                ):
                    break
                prompt += arguments + fmt.after_arguments
                follow = complete(
                    prompt,
                    temperature=temperature,
                    stop=[*fmt.choice_stop, _END],
                    max_tokens=64,
                    grammar=_choice_grammar(list(by_name), end=True, fmt=fmt),
                )
                name = fmt.name_of(follow["choices"][0]["text"])
            finish_reason = "tool_calls" if calls else "stop"
            if calls and completions[-1]["choices"][0]["finish_reason"] == "length":
                finish_reason = "length"

    first = completions[0]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}_{request_digest}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for i, (name, arguments) in enumerate(calls)
        ]
    usage = {
        "prompt_tokens": first["usage"]["prompt_tokens"],
        "completion_tokens": sum(c["usage"]["completion_tokens"] for c in completions),
    }
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    # one line per computed request in the server's log: what the server did, whether or
    # not a client was still waiting (bench/llm_footprint.py counts duplicated work by it)
    print(
        f"{COMPUTED_MARK} prompt={usage['prompt_tokens']} "
        f"completion={usage['completion_tokens']} seconds={time.perf_counter() - started:.2f}",
        file=sys.stderr,
        flush=True,
    )
    return {
        "id": f"chatcmpl-{request_digest}",
        "object": "chat.completion",
        "created": first.get("created", int(time.time())),
        "model": first["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": {"content": recorded, "refusal": None} if want_logprobs else None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


class CompactRAMCache:
    """llama-cpp-python's RAM prompt cache, with its size counted and its entries compacted.

    The stock ``LlamaRAMCache`` counts only each state's KV bytes against its capacity, but
    every ``LlamaState`` also holds a copy of the model's logits buffer (``n_batch x
    n_vocab`` floats: 512 x 49,152 x 4 B, about 100 MB for SmolLM2), so a "2 GiB" cache held
    10 GB and the server was OOM-killed. A restored state is always decoded again before
    sampling (``Llama.generate`` replays at least one token: ``_requires_eval``), so the
    logits are never read back: an entry keeps one row of zeros instead (``load_state``
    broadcasts it), and the capacity counts every byte an entry holds. An entry whose
    tokens extend an older one replaces it, so each conversation holds one entry rather
    than one per turn (and per completion of a tool-call turn).

    Built lazily (``make``) so that importing this module does not import llama_cpp.
    """

    @staticmethod
    def make(capacity_bytes: int) -> Any:
        import numpy as np
        from llama_cpp.llama_cache import LlamaRAMCache

        class _Compact(LlamaRAMCache):  # type: ignore[misc]
            @property
            def cache_size(self) -> int:
                return sum(_entry_bytes(state) for state in self.cache_state.values())

            def __setitem__(self, key: Sequence[int], value: Any) -> None:
                scores = getattr(value, "scores", None)
                if scores is not None and getattr(scores, "ndim", 0) == 2 and len(scores) > 1:
                    value.scores = np.zeros((1, scores.shape[1]), dtype=scores.dtype)
                # a state whose tokens begin with an older entry's serves that entry's
                # prompts too (lookup is by longest prefix): one entry per conversation
                new = tuple(key)
                for old in [k for k in self.cache_state if new[: len(k)] == k and k != new]:
                    del self.cache_state[old]
                super().__setitem__(key, value)

        return _Compact(capacity_bytes=capacity_bytes)


def _entry_bytes(state: Any) -> int:
    return int(state.llama_state_size) + int(state.scores.nbytes) + int(state.input_ids.nbytes)


def _use_compact_cache() -> None:
    """Have ``llama_cpp.server`` build ``CompactRAMCache`` where it builds its RAM cache
    (``server/model.py`` looks ``llama_cpp.LlamaRAMCache`` up when it loads the model)."""
    import llama_cpp

    llama_cpp.LlamaRAMCache = CompactRAMCache.make  # type: ignore[assignment]


def register() -> None:
    """Register the handler with llama_cpp under ``CHAT_FORMAT`` (idempotent)."""
    from llama_cpp import llama_chat_format

    llama_chat_format.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        CHAT_FORMAT, chatml_tools_handler, overwrite=True
    )


def _scrub_server_env() -> None:
    """Drop environment variables llama_cpp.server's settings would read over the argv."""
    from llama_cpp.server.settings import Settings

    names = {n.lower() for n in Settings.model_fields} | {"config_file", "host", "port"}
    for key in list(os.environ):
        if key.lower() in names:
            del os.environ[key]


def own_options(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """This module's own options out of the server's argv, and the rest for llama_cpp.server
    (which refuses options it does not know). ``allow_abbrev=False``: a prefix of ours
    (``--max_parallel``) stays llama_cpp's to accept or refuse.

    >>> ours, rest = own_options(["--model", "m.gguf", "--call_bias=-0.5", "--port", "8"])
    >>> ours.call_bias, ours.max_parallel_calls, rest
    (-0.5, None, ['--model', 'm.gguf', '--port', '8'])
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--max_parallel_calls", type=int)
    parser.add_argument("--call_bias", type=float)
    parser.add_argument("--deterministic")
    parser.add_argument("--record_dir")
    return parser.parse_known_args(list(argv))


def main(argv: Sequence[str] | None = None) -> None:
    """Start ``llama_cpp.server`` with this handler registered.

    Takes llama_cpp.server's options, plus ``--max_parallel_calls N`` (default
    ``MAX_PARALLEL_CALLS``) and ``--call_bias B`` (nats added to the log-odds of calling
    under ``tool_choice="auto"``; default 0, the model's own probability) and
    ``--deterministic true`` (every request evaluated from an empty context, so a seeded
    request gets the same answer whatever ran before it; pair it with ``--cache false``) and
    ``--record_dir DIR`` (answers kept by request id across restarts: ``llm.answered``).
    """
    ours, args = own_options(sys.argv[1:] if argv is None else argv)
    if ours.max_parallel_calls is not None:
        _limits["max_parallel_calls"] = max(1, ours.max_parallel_calls)
    if ours.call_bias is not None:
        _limits["call_bias"] = ours.call_bias
    if ours.deterministic is not None:
        _limits["deterministic"] = ours.deterministic.lower() == "true"
    sys.argv = [sys.argv[0], *args]
    _scrub_server_env()
    register()
    _use_compact_cache()
    import llama_cpp.server.__main__ as server

    if ours.record_dir:
        _record_answers(server, Path(ours.record_dir))
    server.main()


def _record_answers(server: Any, folder: Path) -> None:
    """Wrap the app ``llama_cpp.server`` builds in ``llm.answered.AnsweredRequests``."""
    from trajsynth.llm.answered import AnsweredRequests

    create_app = server.create_app

    def create(*args: Any, **kwargs: Any) -> Any:
        return AnsweredRequests(create_app(*args, **kwargs), folder)

    server.create_app = create


if __name__ == "__main__":
    main()
