"""`synth doctor --base-url URL --model M`: what one OpenAI-compatible endpoint can do for a run.

Each check sends what a run sends (the same client, ``llm.client``, so the same request
body) and reads the answer as a run reads it. A check names what the run does about a gap,
not only that there is one. The checks, in order:

* reachable: ``GET /models`` answers, and whether it lists the model;
* chat: a plain chat request is answered (a refusal here is the server's own error, shown);
* tool calls: with ``tools`` and ``tool_choice="required"``, a call comes back in the
  message's ``tool_calls`` (not written as text in ``content``, which the run parses
  instead, less reliably);
* tool_choice: a named function is the one called, and ``"none"`` gives words;
* logprobs: per-token logprobs come back when asked (the tree branches on them);
* n: ``n=2`` returns two choices (otherwise the client asks once per sample);
* max_tokens: a call under ``tool_choice="auto"`` stops at a small ``max_tokens``
  (llama-cpp-python's ``chatml-function-calling`` decodes a call's arguments with no limit,
  so one turn can run to the end of the server's context).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from trajsynth.llm.client import ChatResult, OpenAILLMClient
from trajsynth.schemas import AgentRole, LLMConfig, LLMError, Message, MessageRole

__all__ = ["EndpointCheck", "check_endpoint"]

_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
]
_ASK = [
    Message(role=MessageRole.SYSTEM, content="You are a shop assistant. Use the tools."),
    Message(role=MessageRole.USER, content="Where is my order W1234?"),
]


@dataclass(frozen=True)
class EndpointCheck:
    """One capability: whether the endpoint has it, what was seen, and what a run does."""

    check: str
    ok: bool
    detail: str
    run_does: str
    required: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _structured_calls(result: ChatResult) -> list[str]:
    """Names of the calls the server returned in ``tool_calls`` (not parsed from text)."""
    choices = result.raw.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    message = first.get("message") if isinstance(first, dict) else None
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    names = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            names.append(str(function.get("name")))
    return names


def _reachable(
    base_url: str, model: str, api_key: SecretStr | None, timeout_s: float = 30.0
) -> EndpointCheck:
    headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key else {}
    try:
        resp = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=timeout_s)
    except (httpx.ReadTimeout, httpx.WriteTimeout):
        # connected, no answer yet: a server that computes one request at a time (llama.cpp)
        # does not answer while it is busy
        return EndpointCheck(
            "reachable",
            True,
            f"connected, but GET /models got no answer in {timeout_s:.0f} s (busy computing?)",
            "uses it; every request waits its turn (timeouts are retried as infra faults)",
            True,
        )
    except httpx.HTTPError as exc:
        return EndpointCheck(
            "reachable",
            False,
            f"nothing answers at {base_url} ({type(exc).__name__})",
            "refuses to start: start the server or fix --base-url",
            True,
        )
    if resp.status_code in (401, 403):
        return EndpointCheck(
            "reachable",
            False,
            f"HTTP {resp.status_code}: the server refused the API key",
            "refuses every request: set SYNTH_LLM__API_KEY (or OPENAI_API_KEY)",
            True,
        )
    served: list[str] = []
    try:
        data = resp.json().get("data", [])
        served = [str(m.get("id")) for m in data if isinstance(m, dict)]
    except (ValueError, AttributeError):
        pass
    if served and model not in served:
        return EndpointCheck(
            "reachable",
            True,
            f"HTTP {resp.status_code}; serves {', '.join(served[:5])}, not {model!r}",
            f"sends model={model!r}; a server that routes by name refuses it (pass --model)",
            True,
        )
    listed = f"; serves {model!r}" if served else " (no model list)"
    return EndpointCheck("reachable", True, f"HTTP {resp.status_code}{listed}", "uses it", True)


async def _probe(client: OpenAILLMClient) -> list[EndpointCheck]:
    checks: list[EndpointCheck] = []

    async def ask(max_tokens: int = 48, **kwargs: Any) -> ChatResult | str:
        try:
            return await client.chat(
                _ASK, role=AgentRole.ASSISTANT, max_tokens=max_tokens, **kwargs
            )
        except LLMError as exc:
            return str(exc)

    plain = await ask(seed=1)
    if isinstance(plain, str):
        checks.append(
            EndpointCheck("chat", False, plain[:200], "fails every unit (recorded as infra)", True)
        )
        return checks
    checks.append(
        EndpointCheck(
            "chat",
            True,
            f"answered ({plain.usage.completion_tokens} tokens in {plain.usage.latency_s:.1f} s)",
            "uses it",
            True,
        )
    )

    required = await ask(tools=_TOOLS, tool_choice="required", seed=2)
    # a run against an endpoint sends "auto" unless [run] assistant_tool_choice says otherwise;
    # some servers refuse "required" (llama-cpp-python's chatml-function-calling answers 500)
    answer = required if not isinstance(required, str) else await ask(tools=_TOOLS, seed=2)
    asked = "required" if not isinstance(required, str) else "auto"
    checks.append(_tool_calls_check(answer, asked))

    named = await ask(
        tools=_TOOLS, tool_choice={"type": "function", "function": {"name": "cancel_order"}}, seed=3
    )
    none = await ask(tools=_TOOLS, tool_choice="none", seed=4)
    honoured = not isinstance(named, str) and [
        c.function.name for c in named.message.tool_calls or []
    ][:1] == ["cancel_order"]
    words = not isinstance(none, str) and not none.message.tool_calls
    seen = (
        ("'required' refused; " if isinstance(required, str) else "")
        + f"named function {'called' if honoured else 'not called'}"
        f"{'' if not isinstance(named, str) else ' (refused: ' + named[:80] + ')'}; "
        f"'none' {'gave words' if words else 'still called a tool'}"
        f"{'' if not isinstance(none, str) else ' (refused: ' + none[:80] + ')'}"
    )
    full = honoured and words and not isinstance(required, str)
    checks.append(
        EndpointCheck(
            "tool_choice",
            full,
            seen,
            "uses it"
            if full
            else "leave [run] assistant_tool_choice unset ('auto' with --base-url): 'required' "
            "fails every turn here"
            if honoured and words
            else "turns that must act (or must answer) may not: such rollouts end early and "
            "count as model failures, never as infra",
            False,
        )
    )

    lp = await ask(seed=5) if client.config.logprobs else "logprobs are off in [run.llm]"
    has_lp = not isinstance(lp, str) and lp.token_logprobs is not None
    checks.append(
        EndpointCheck(
            "logprobs",
            has_lp,
            (
                lp
                if isinstance(lp, str)
                else f"{len(lp.token_logprobs or [])} token logprobs, "
                f"top {max((len(t) for t in lp.top_logprobs or []), default=0)} alternatives"
                if has_lp
                else "none returned (or refused)"
            ),
            "branches the tree on step entropy"
            if has_lp
            else "branches the tree by disagreement between sampled siblings (docs/methods.md "
            "§1.3); token-entropy signals stay empty",
            False,
        )
    )

    many = await ask(n=2, seed=6)
    sent = (
        len(_raw_choices(many)) if not isinstance(many, str) else 0
    )  # what the server itself returned, before the client asked again
    checks.append(
        EndpointCheck(
            "n",
            sent >= 2,
            f"n=2 returned {sent} choice(s)" if not isinstance(many, str) else many[:120],
            "samples siblings in one request" if sent >= 2 else "asks once per sample",
            False,
        )
    )
    checks.append(_max_tokens_check(await ask(max_tokens=_SMALL, tools=_TOOLS, seed=7)))
    return checks


_SMALL = 4  # fewer tokens than any call's arguments take


def _max_tokens_check(answer: ChatResult | str) -> EndpointCheck:
    """Whether a turn under ``tool_choice="auto"`` (what the assistant sends) stops at
    ``max_tokens``: ``answer`` was asked for ``_SMALL`` tokens."""
    if isinstance(answer, str):
        return EndpointCheck(
            "max_tokens", False, f"refused: {answer[:120]}", "cannot tell; see the checks above",
            False,
        )  # fmt: skip
    spent = answer.usage.completion_tokens
    if spent <= _SMALL:
        return EndpointCheck(
            "max_tokens",
            True,
            f"max_tokens={_SMALL}: {spent} tokens, finish {answer.finish_reason}",
            "bounds every turn by [run.llm] max_tokens",
            False,
        )
    return EndpointCheck(
        "max_tokens",
        False,
        f"max_tokens={_SMALL} under tool_choice='auto': {spent} tokens came back",
        "a turn may run to the end of the server's context (minutes on a CPU): serve no more "
        "context than the run needs (llama-cpp-python --n_ctx 4096) and set [run] "
        "assistant_tool_choice_after_tool = 'none' (docs/endpoints.md)",
        False,
    )


def _tool_calls_check(answer: ChatResult | str, asked: str) -> EndpointCheck:
    """Whether calls come back in ``tool_calls`` (``answer`` to a request with tools)."""
    if isinstance(answer, str):
        return EndpointCheck(
            "tool calls",
            False,
            f"a request with tools was refused: {answer[:160]}",
            "cannot act: every rollout fails; use a server with tool calling (vLLM "
            "--enable-auto-tool-choice, llama.cpp --jinja, llama-cpp-python --chat_format "
            "chatml-function-calling)",
            True,
        )
    structured = _structured_calls(answer)
    parsed = [c.function.name for c in answer.message.tool_calls or []]
    if structured:
        return EndpointCheck(
            "tool calls",
            True,
            f"returned through tools (tool_choice={asked}): {', '.join(structured)}",
            "uses them",
            True,
        )
    if parsed:
        return EndpointCheck(
            "tool calls",
            True,
            f"written as text in content, not in tool_calls: {', '.join(parsed)}",
            "parses calls out of the text (functions.<name>: or <tool_call>); a call that "
            "does not parse is the model's failure",
            True,
        )
    words = json.dumps((answer.message.content or "")[:80])
    return EndpointCheck(
        "tool calls",
        False,
        f"no tool call under tool_choice={asked}: {words}",
        "rollouts whose model never calls end without calls (model failures); if the "
        "server has tool calling, the model chose words",
        asked == "required",  # under "auto" the model may choose words: not proof of a gap
    )


def _raw_choices(result: ChatResult) -> list[Any]:
    choices = result.raw.get("choices")
    return choices if isinstance(choices, list) else []


def check_endpoint(
    base_url: str,
    model: str,
    *,
    api_key: SecretStr | None = None,
    logprobs: bool = True,
    timeout_s: float = 120.0,
) -> list[EndpointCheck]:
    """Every check of the module doc against ``base_url`` serving ``model``."""
    first = _reachable(base_url, model, api_key)
    if not first.ok:
        return [first]
    config = LLMConfig(
        base_url=base_url, model=model, max_retries=1, timeout_s=timeout_s, logprobs=logprobs
    )

    async def probe() -> list[EndpointCheck]:
        async with OpenAILLMClient(config, api_key=api_key) as client:
            return await _probe(client)

    return [first, *asyncio.run(probe())]
