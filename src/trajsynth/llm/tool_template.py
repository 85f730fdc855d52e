"""The tool-aware chat template a policy is trained in and served in (one layout for both).

SmolLM2-135M-Instruct's own template is ChatML without tools: it ignores ``tools=``,
``tool_calls`` and ``tool`` messages. ``TOOL_CHAT_TEMPLATE`` keeps SmolLM2's ChatML tokens and
default system prompt and takes the tool layout of TRL's ``qwen2_5_training.jinja`` (read in
TRL 1.16): the JSON schemas inside ``<tools></tools>`` in the system turn, each call as
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, so TRL's ``qwen3_template``
response parser reads the policy's calls back. It differs from TRL's template in three ways:

* a ``tool`` message is its own ``<|im_start|>tool`` turn, not merged into a user turn,
  so appending messages never changes how earlier ones render (prefix-preserving, what
  TRL's multi-turn GRPO loop needs);
* ``arguments`` may be a JSON string (the OpenAI layout the export keeps) or a mapping;
  a string is written verbatim, a mapping through ``tojson`` (the export canonicalises
  strings to ``json.dumps`` so both render the same);
* ``{% generation %}`` covers the assistant's text, calls and ``<|im_end|>``, not the
  ``<|im_start|>assistant\\n`` header (that is the generation prompt), so
  ``return_assistant_tokens_mask=True`` marks exactly what the policy emits. A tool
  without a function name or a message with an unknown role fails the render.

It lives here, below ``training``, because the embedded server renders it too: a GGUF that
``training.serve.export_gguf`` writes carries it as its chat template and names its tool
format under ``TOOL_FORMAT_KEY``, and ``llm.chat_handler`` then serves that model in the
very layout it was trained in (``render_tool_template``; the base model keeps the
``functions.<name>:`` layout). A tuned model served in another layout than its rows met the
held-out tasks out of distribution: it made the right first call, under the grammar, then
called again and again instead of answering from the result (bench/efficacy.py, stop 23).

Only the standard library and jinja2 are imported, and jinja2 only when rendering.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "TOOL_CALL_JSON",
    "TOOL_CHAT_TEMPLATE",
    "TOOL_FORMAT_KEY",
    "render_tool_template",
]

TOOL_CHAT_TEMPLATE = (
    "{%- set default_system = 'You are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face' %}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system_text = messages[0]['content'] or '' %}"
    "{%- set turns = messages[1:] %}"
    "{%- else %}"
    "{%- set system_text = default_system %}"
    "{%- set turns = messages %}"
    "{%- endif %}"
    "{{- '<|im_start|>system\\n' + system_text }}"
    "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}"
    "{%- if tool is not mapping %}"
    "{{- raise_exception('tool ' ~ loop.index0 ~ ' is not a JSON object') }}"
    "{%- endif %}"
    "{%- set fn = tool['function'] if tool['function'] is defined else tool %}"
    "{%- if fn is not mapping or fn['name'] is not defined or fn['name'] is not string"
    " or not fn['name'] %}"
    "{{- raise_exception('tool ' ~ loop.index0 ~ ' has no function name') }}"
    "{%- endif %}"
    "{{- '\\n' + tool | tojson }}"
    "{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>\' }}'
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in turns %}"
    "{%- if message['role'] == 'user' or message['role'] == 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}"
    "{{- message['content'] or '' }}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] %}"
    "{%- for tool_call in message['tool_calls'] %}"
    "{%- set call = tool_call['function'] if tool_call['function'] is defined else tool_call %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' }}"
    "{%- if call['arguments'] is string %}{{- call['arguments'] }}"
    "{%- else %}{{- call['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>' }}"
    "{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>tool\\n<tool_response>\\n' + (message['content'] or '')"
    " + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- raise_exception('unknown message role ' ~ message['role']) }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
"""ChatML with tools, assistant output wrapped in ``{% generation %}`` for the loss mask."""

TOOL_FORMAT_KEY = "trajsynth.tool_format"
"""The GGUF metadata key naming the tool layout a model was trained in."""
TOOL_CALL_JSON = "tool-call-json"
"""``TOOL_CHAT_TEMPLATE``'s layout: ``<tool_call>`` blocks of JSON, ``<tool_response>``."""


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' filter (chat_template_utils), not jinja2's HTML-escaping one
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> None:
    raise ValueError(message)


@functools.cache
def _compiled() -> Any:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    # the loss mask's markers render nothing: the server needs the text alone
    text = TOOL_CHAT_TEMPLATE.replace("{%- generation %}", "").replace("{%- endgeneration %}", "")
    return env.from_string(text)


def render_tool_template(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """``TOOL_CHAT_TEMPLATE`` rendered as transformers' ``apply_chat_template(tokenize=False)``
    renders it (same environment options and filters; tests/llm/test_chat_template.py
    holds the two equal)."""
    return _compiled().render(
        messages=[dict(m) for m in messages],
        tools=[dict(t) for t in tools] if tools else None,
        add_generation_prompt=add_generation_prompt,
    )
