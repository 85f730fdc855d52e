"""ScriptedLLM: a strict scripted LLM behind the real ``openai`` client (docs/style.md §7).

The fake is an ``httpx.MockTransport``: the SDK builds the requests, parses the responses,
retries and times out for real. Each step of the script answers one HTTP request:

* a chat completion dict (build it with ``tool_call``, ``tool_calls`` or ``say``);
* an ``httpx.Response`` (``http_error(503)`` for a server fault);
* an exception instance, raised at the transport (``httpx.ReadTimeout("scripted")``);
* a callable of the parsed request body returning any of the above, or an awaitable of
  one (so one script can drive several branches, or hold a request open).

Usage and logprobs are filled in from the request: ``prompt_tokens`` counts the words of
the request's messages, ``completion_tokens`` the words of the answer (the fake's tokens
are ``\\w+`` runs and single punctuation marks), and when the request asks for logprobs
each token gets the step's ``probs`` distribution (sampled token first), cut to
``top_logprobs``. Calling past the end of the script raises ``UnexpectedLLMCall``;
``assert_consumed()`` fails when steps are left or such a call happened.

    fake = ScriptedLLM([tool_call("search_products", {"query": "red mug"}), say("Done.")])
    client = OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=fake.transport))
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import httpx

from trajsynth.llm.client import OpenAILLMClient
from trajsynth.schemas import LLMConfig

__all__ = [
    "slot_filler",
    "DEFAULT_PROBS",
    "ScriptedLLM",
    "UnexpectedLLMCall",
    "http_error",
    "say",
    "tool_call",
    "tool_calls",
    "tokens",
]

DEFAULT_PROBS: tuple[float, ...] = (0.9, 0.05, 0.03, 0.01, 0.01)
_TOKEN = re.compile(r"\w+|[^\w\s]")


class UnexpectedLLMCall(AssertionError):
    """The code under test called the LLM more often than the script allows."""


def tokens(text: str) -> list[str]:
    """The fake's tokenisation: runs of word characters and single punctuation marks."""
    return _TOKEN.findall(text)


def _completion(
    message: dict[str, Any], finish_reason: str, probs: Sequence[float] | None
) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "_probs": list(probs) if probs is not None else list(DEFAULT_PROBS),
    }


def say(
    text: str, *, finish_reason: str = "stop", probs: Sequence[float] | None = None
) -> dict[str, Any]:
    """A text answer. ``probs``: the per-token distribution its logprobs report."""
    return _completion({"role": "assistant", "content": text}, finish_reason, probs)


def tool_calls(
    calls: Iterable[tuple[str, Any]],
    *,
    raw: bool = False,
    content: str | None = None,
    probs: Sequence[float] | None = None,
) -> dict[str, Any]:
    """One turn with several tool calls, each ``(name, args)``; see ``tool_call``."""
    wire = []
    for i, (name, args) in enumerate(calls):
        if raw:
            if not isinstance(args, str):
                raise TypeError("raw=True takes the arguments as the exact string to send")
            arguments = args
        else:
            arguments = json.dumps(args)
        wire.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    message = {"role": "assistant", "content": content, "tool_calls": wire}
    return _completion(message, "tool_calls", probs)


def tool_call(
    name: str,
    args: Any = None,
    *,
    raw: bool = False,
    content: str | None = None,
    probs: Sequence[float] | None = None,
) -> dict[str, Any]:
    """A turn that calls ``name``. ``args`` is JSON-encoded, or with ``raw=True`` sent as
    the exact string given (malformed on purpose), as on the wire."""
    return tool_calls(
        [(name, {} if args is None and not raw else args)], raw=raw, content=content, probs=probs
    )


def slot_filler(values: dict[str, Any], fill_tool: str) -> Callable[[dict[str, Any]], Any]:
    """A planner LLM that answers each request offering ``fill_tool`` with ``values`` for the
    slots it asks (the tool's parameters), and says "ok" to anything else (words the checks
    refuse, so the template's words are used)."""

    def answer(body: dict[str, Any]) -> Any:
        names = [t["function"]["name"] for t in body.get("tools") or []]
        if fill_tool in names:
            [tool] = body["tools"]
            asked = tool["function"]["parameters"]["properties"]
            return tool_call(fill_tool, {k: v for k, v in values.items() if k in asked})
        return say("ok")

    return answer


def http_error(
    status: int, message: str = "scripted fault", headers: dict[str, str] | None = None
) -> httpx.Response:
    """An HTTP error answer in the OpenAI error format (``Retry-After`` via ``headers``)."""
    body = {"error": {"message": message, "type": "scripted", "param": None, "code": None}}
    return httpx.Response(status, json=body, headers=headers)


Step = dict[str, Any] | httpx.Response | BaseException | Callable[[dict[str, Any]], Any]


class ScriptedLLM:
    """A scripted OpenAI-compatible server; ``.transport`` goes into an httpx client."""

    def __init__(self, steps: Iterable[Step], *, model: str | None = None) -> None:
        self.steps: list[Step] = list(steps)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx.Headers] = []  # of each request, in order
        self.unexpected_calls = 0
        self._next = 0
        self._ids = itertools.count()
        self.transport = httpx.MockTransport(self._handle)

    def client(self) -> OpenAILLMClient:
        """The real ``openai`` client, as a planner or judge holds it, answered by this script
        (no retries: a request the script does not expect fails at once)."""
        config = LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=False)
        return OpenAILLMClient(config, http_client=httpx.AsyncClient(transport=self.transport))

    @property
    def remaining(self) -> int:
        return len(self.steps) - self._next

    def assert_consumed(self) -> None:
        """Fail when steps are left over or the script was called past its end."""
        if self.unexpected_calls:
            raise AssertionError(
                f"the LLM was called {self.unexpected_calls} time(s) past the end of its "
                f"{len(self.steps)}-step script"
            )
        if self.remaining:
            raise AssertionError(
                f"{self.remaining} of {len(self.steps)} scripted LLM steps were never used"
            )

    def _handle(self, request: httpx.Request) -> Any:
        if not request.url.path.endswith("/chat/completions"):
            raise UnexpectedLLMCall(f"the fake serves only chat completions, not {request.url}")
        body = json.loads(request.content or b"{}")
        self.requests.append(body)
        self.headers.append(request.headers)
        if self._next >= len(self.steps):
            self.unexpected_calls += 1
            raise UnexpectedLLMCall(
                f"LLM call #{len(self.requests)} is past the end of the "
                f"{len(self.steps)}-step script"
            )
        step = self.steps[self._next]
        self._next += 1
        if callable(step) and not isinstance(step, BaseException | httpx.Response):
            step = step(body)
        if inspect.isawaitable(step):
            awaitable = step

            async def finish() -> httpx.Response:
                return self._respond(await awaitable, body)

            return finish()
        return self._respond(step, body)

    def _respond(self, step: Any, body: dict[str, Any]) -> httpx.Response:
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, httpx.Response):
            return step
        if not isinstance(step, dict):
            raise TypeError(f"a script step must be a completion, response or fault: {step!r}")
        return httpx.Response(200, json=self._fill(step, body))

    def _fill(self, step: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        data = json.loads(json.dumps({k: v for k, v in step.items() if k != "_probs"}))
        probs = step.get("_probs") or list(DEFAULT_PROBS)
        data.setdefault("id", f"chatcmpl-scripted-{next(self._ids)}")
        data.setdefault("created", 0)
        data.setdefault("model", self.model or body.get("model", "scripted"))
        n_completion = 0
        for choice in data["choices"]:
            toks = tokens(_answer_text(choice["message"]))
            n_completion += len(toks)
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": _logprobs(toks, probs, int(body.get("top_logprobs") or 0)),
                    "refusal": None,
                }
        if "usage" not in data:
            n_prompt = sum(len(tokens(_message_text(m))) for m in body.get("messages", []))
            data["usage"] = {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_completion,
                "total_tokens": n_prompt + n_completion,
            }
        elif data["usage"] is None:
            del data["usage"]  # a server that reports no usage
        return data


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    return text + _calls_text(message)


def _calls_text(message: dict[str, Any]) -> str:
    return "".join(
        " " + c["function"]["name"] + " " + c["function"]["arguments"]
        for c in message.get("tool_calls") or []
    )


def _answer_text(message: dict[str, Any]) -> str:
    return (message.get("content") or "") + _calls_text(message)


def _logprobs(toks: list[str], probs: Sequence[float], k: int) -> list[dict[str, Any]]:
    out = []
    for tok in toks:
        alternatives = [tok] + [f"<alt{j}>" for j in range(1, len(probs))]
        top = [
            {"token": t, "logprob": math.log(p), "bytes": None}
            for t, p in zip(alternatives, probs, strict=True)
        ][:k]
        out.append(
            {"token": tok, "logprob": math.log(probs[0]), "bytes": None, "top_logprobs": top}
        )
    return out
