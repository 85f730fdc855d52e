"""A deterministic OpenAI-compatible LLM over real HTTP, for end-to-end tests and benchmarks.

Where ``fakes.llm.ScriptedLLM`` replays a script inside one process, this server answers any
request from a pure function of its body (``respond``), so a subprocess (``synth run``), a
Prefect worker or a Dask worker can all talk to it through the real ``openai`` client:

* ``POST /v1/chat/completions``: with ``tools`` and a ``tool_choice`` other than ``"none"`` it
  calls a tool (a named ``tool_choice`` picks it, otherwise a hash of the request does, among
  the tools whose required strings it can fill) with arguments valid for that tool's JSON
  schema, preferring values seen in earlier tool results under the same key, then emails and
  id-like tokens the user wrote (for ``*email*`` and ``*_id`` parameters). Under ``"auto"``
  right after a tool result it answers in words instead, quoting the result, so a dialogue
  moves on. A user-simulator request (its system message carries the stop marker
  ``###STOP###``, see ``agents/user_sim.py``) gets a short in-role reply, and from the
  simulator's ``stop_after``-th utterance on (the opening goal counts) ``"Thanks, that is
  all. ###STOP###"``, so every episode ends. Anything else gets plain text. ``n`` choices,
  ``usage`` (word-level token counts) and, when asked, ``logprobs`` with ``top_logprobs``
  alternatives whose spread is derived from the hash (so entropy varies).
* ``GET /v1/models``: the one model, named ``model`` (default ``"fake"``).
* faults on demand: the first ``fail_first`` chat requests get a 500, a body that is not
  JSON, or JSON that is not a completion (``Faults``), then it answers, so retries can be
  tested end to end through real HTTP.
* a context window on demand (``n_ctx``): a request whose prompt (its messages and tools, in
  the fake's tokens) and ``max_tokens`` do not fit gets the refusal a real server sends, in
  its own words and status (``OVERFLOW_ANSWERS``: llama-cpp-python, vLLM, OpenAI, llama.cpp's
  llama-server). ``prompts`` records every chat request's prompt size, so a test can place
  the window between two turns.
* ``max_tokens`` is ignored unless ``honour_max_tokens`` (then a longer answer, a call's
  arguments or the words, is cut there with finish reason ``length``).

The same body always gets the same answer; a different ``seed`` usually a different one.

    with FakeLLMServer(delay_s=0.01) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")

Or as a process: ``python tests/fakes/llm_server.py --port 0`` prints ``READY <port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from trajsynth.flows.ephemeral_api import listening_socket

__all__ = [
    "FAULTS",
    "OVERFLOW_ANSWERS",
    "STOP_MARKER",
    "FakeLLMServer",
    "Faults",
    "create_app",
    "prompt_tokens",
    "respond",
    "schema_value",
]

STOP_MARKER = "###STOP###"
_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORDS = ("alpha", "bravo", "cedar", "delta", "ember", "fjord", "gamma", "harbor", "iris")
_USER_REPLIES = ("Yes, please go ahead.", "Please continue.", "Sounds good, go on.")
_ANSWERS = ("Done. Here is what I found:", "All set. The result:", "Finished. I got:")


def _digest(*parts: Any) -> int:
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "big")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = content if isinstance(content, str) else ""
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        text += f" {fn.get('name', '')} {fn.get('arguments', '')}"
    return text


def _seen_values(messages: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Scalars found in earlier tool results (JSON), by key, in order of appearance."""
    found: dict[str, list[Any]] = {}

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif key is not None and isinstance(node, str | int | float) and node is not True:
            found.setdefault(key, [])
            if node not in found[key]:
                found[key].append(node)

    for m in messages:
        if m.get("role") == "tool":
            try:
                walk(json.loads(_content_text(m)), None)
            except ValueError:
                continue
    return found


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ID = re.compile(r"#?[A-Za-z_]*\d[\w-]*")


def _user_values(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Emails and id-like tokens (with a digit) the user wrote, for grounding arguments."""
    text = " ".join(_content_text(m) for m in messages if m.get("role") == "user")
    emails = list(dict.fromkeys(_EMAIL.findall(text)))
    rest = _EMAIL.sub(" ", text)
    ids = list(dict.fromkeys(t.rstrip(".,;:!?") for t in _ID.findall(rest)))
    return {"email": emails, "id": ids}


def _grounded_string(name: str, user: dict[str, list[str]]) -> list[str]:
    key = name.lower()
    if "email" in key:
        return user["email"]
    if key == "id" or key.endswith(("_id", "id")):
        return user["id"]
    return []


def _matches(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if "enum" in schema:
        return value in schema["enum"]
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def schema_value(
    schema: dict[str, Any], h: int, name: str = "", seen: dict[str, list[Any]] | None = None
) -> Any:
    """A value valid for the JSON schema ``schema``, chosen by the hash ``h``.

    >>> schema_value({"type": "integer", "minimum": 3, "maximum": 3}, 12345)
    3
    >>> schema_value({"type": "object", "properties": {"q": {"enum": ["a"]}}, "required": ["q"]}, 7)
    {'q': 'a'}
    """
    seen = seen or {}
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return schema_value(options[h % len(options)], h // 7, name, seen)
    if "allOf" in schema and schema["allOf"]:
        return schema_value(schema["allOf"][0], h, name, seen)
    prior = [v for v in seen.get(name, []) if _matches(v, schema)]
    if prior:
        return prior[h % len(prior)]
    said = [v for v in seen.get(f"user:{name}", []) if _matches(v, schema)]
    if said:
        return said[h % len(said)]
    if "enum" in schema:
        return schema["enum"][h % len(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"] or kind
        return schema_value({**schema, "type": kinds[h % len(kinds)]}, h // 5, name, seen)
    if kind == "object" or "properties" in schema:
        props: dict[str, Any] = schema.get("properties") or {}
        required = list(schema.get("required") or [])
        optional = [k for k in props if k not in required]
        chosen = required + [k for i, k in enumerate(optional) if (h >> i) & 1]
        return {k: schema_value(props[k], _digest(h, k), k, seen) for k in props if k in chosen}
    if kind == "array":
        lo = int(schema.get("minItems", 1))
        hi = int(schema.get("maxItems", max(lo, 2)))
        count = lo + h % (hi - lo + 1) if hi >= lo else lo
        items = schema.get("items") or {"type": "string"}
        return [schema_value(items, _digest(h, i), name, seen) for i in range(count)]
    if kind == "integer":
        lo = int(schema.get("minimum", 1))
        hi = int(schema.get("maximum", lo + 9))
        return lo + h % (hi - lo + 1)
    if kind == "number":
        lo = float(schema.get("minimum", 1.0))
        hi = float(schema.get("maximum", lo + 9.0))
        return round(lo + (h % 1000) / 999 * (hi - lo), 2)
    if kind == "boolean":
        return bool(h & 1)
    if kind == "null":
        return None
    lo = int(schema.get("minLength", 1))
    word = _WORDS[h % len(_WORDS)]
    return (word * (1 + lo // len(word)))[: max(lo, len(word))][: schema.get("maxLength", 64)]


def _grounded(fn: dict[str, Any], seen: dict[str, list[Any]]) -> bool:
    """Every required string parameter has a value from a tool result or the user."""
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    for name in params.get("required") or []:
        schema = props.get(name) or {}
        string = schema.get("type") == "string" and "enum" not in schema
        if string and not (seen.get(name) or seen.get(f"user:{name}")):
            return False
    return True


def _pick_tool(
    tools: list[dict[str, Any]], tool_choice: Any, h: int, seen: dict[str, list[Any]]
) -> dict[str, Any]:
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        for t in tools:
            if t["function"]["name"] == wanted:
                return t["function"]
    fns = [t["function"] for t in tools]
    grounded = [fn for fn in fns if _grounded(fn, seen)] or fns
    return grounded[h % len(grounded)]


def _known_values(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
    """Values by parameter name: from tool results, and (``user:<name>``) from the user."""
    seen: dict[str, list[Any]] = dict(_seen_values(messages))
    user = _user_values(messages)
    for t in tools:
        props = (t["function"].get("parameters") or {}).get("properties") or {}
        for name in props:
            said = _grounded_string(name, user)
            if said:
                seen[f"user:{name}"] = said
    return seen


def _is_user_sim(messages: list[dict[str, Any]]) -> bool:
    return (
        bool(messages)
        and messages[0].get("role") == "system"
        and (STOP_MARKER in _content_text(messages[0]))
    )


def _message(body: dict[str, Any], h: int, stop_after: int) -> tuple[dict[str, Any], str]:
    messages: list[dict[str, Any]] = body.get("messages") or []
    tools: list[dict[str, Any]] = body.get("tools") or []
    choice = body.get("tool_choice")
    last = messages[-1] if messages else {}
    if tools and choice != "none":
        after_tool = last.get("role") == "tool"
        if choice in ("required",) or isinstance(choice, dict) or not after_tool:
            seen = _known_values(messages, tools)
            fn = _pick_tool(tools, choice, h, seen)
            args = schema_value(fn.get("parameters") or {}, h, "", seen)
            call = {
                "id": f"call_{h % 10**10:010d}",
                "type": "function",
                "function": {"name": fn["name"], "arguments": json.dumps(args)},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    if _is_user_sim(messages):
        spoken = sum(1 for m in messages if m.get("role") == "assistant")  # the sim's own turns
        if spoken >= stop_after:
            return {"role": "assistant", "content": f"Thanks, that is all. {STOP_MARKER}"}, "stop"
        return {"role": "assistant", "content": _USER_REPLIES[h % len(_USER_REPLIES)]}, "stop"
    if last.get("role") == "tool":
        quoted = " ".join(_content_text(last).split())[:160]
        text = f"{_ANSWERS[h % len(_ANSWERS)]} {quoted}"
        return {"role": "assistant", "content": text}, "stop"
    return {"role": "assistant", "content": f"Noted: {_WORDS[h % len(_WORDS)]}."}, "stop"


def _logprobs(toks: list[str], h: int, k: int) -> dict[str, Any]:
    out = []
    for i, tok in enumerate(toks):
        g = _digest(h, i)
        top = 0.4 + (g % 550) / 1000  # 0.40 .. 0.95: the sampled token's probability
        rest = [(1 - top) * w for w in (0.5, 0.25, 0.15, 0.1)]
        probs = [top, *rest]
        alts = [tok] + [f"<alt{j}>" for j in range(1, len(probs))]
        out.append(
            {
                "token": tok,
                "logprob": math.log(top),
                "bytes": None,
                "top_logprobs": [
                    {"token": t, "logprob": math.log(p), "bytes": None}
                    for t, p in zip(alts, probs, strict=True)
                ][:k],
            }
        )
    return {"content": out, "refusal": None}


def _cut_text(text: str, limit: int) -> str | None:
    """``text`` cut after its ``limit``-th token, or None when it has no more than that."""
    ends = [m.end() for m in _TOKEN.finditer(text)]
    return text[: ends[limit - 1]] if len(ends) > limit else None


def _cut(message: dict[str, Any], limit: int) -> bool:
    """Cut ``message`` (in place) to ``limit`` generated tokens, as a server that honours
    ``max_tokens`` does: a call's arguments, or the words; whether it was cut."""
    calls = message.get("tool_calls") or []
    if calls:
        fn = calls[0]["function"]  # its name is generated too
        cut = _cut_text(fn["arguments"], max(1, limit - len(_tokens(fn["name"]))))
        if cut is not None:
            fn["arguments"] = cut
        return cut is not None
    cut = _cut_text(message.get("content") or "", max(1, limit))
    if cut is not None:
        message["content"] = cut
    return cut is not None


def respond(
    body: dict[str, Any],
    *,
    stop_after: int = 2,
    model: str = "fake",
    honour_max_tokens: bool = False,
) -> dict[str, Any]:
    """The chat completion for a request body: a pure, deterministic function of it. With
    ``honour_max_tokens`` an answer longer than ``max_tokens`` is cut there (finish reason
    ``length``); without, ``max_tokens`` is ignored."""
    base = _digest({k: v for k, v in body.items() if k not in ("stream", "user")})
    n = max(1, int(body.get("n") or 1))
    choices = []
    completion = 0
    for index in range(n):
        h = _digest(base, index) if index else base
        message, finish = _message(body, h, stop_after)
        if honour_max_tokens and body.get("max_tokens") and _cut(message, body["max_tokens"]):
            finish = "length"
        toks = _tokens(_content_text(message))
        completion += len(toks)
        item: dict[str, Any] = {"index": index, "message": message, "finish_reason": finish}
        if body.get("logprobs"):
            item["logprobs"] = _logprobs(toks, h, int(body.get("top_logprobs") or 0))
        choices.append(item)
    prompt = sum(len(_tokens(_content_text(m))) for m in body.get("messages") or [])
    return {
        "id": f"chatcmpl-fake-{base % 10**12:012d}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model") or model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt of a request in the fake's tokens: its messages' text and its tools' JSON."""
    text = sum(len(_tokens(_content_text(m))) for m in body.get("messages") or [])
    return text + len(_tokens(json.dumps(body.get("tools") or [])))


def _overflow_llama_cpp_python(n_ctx: int, prompt: int, completion: int) -> tuple[int, Any]:
    # llama_cpp/server/errors.py: ErrorResponseFormatters.context_length_exceeded
    message = (
        f"This model's maximum context length is {n_ctx} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion."
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    return 400, {"error": error}


def _overflow_llama_cpp_python_raw(n_ctx: int, prompt: int, completion: int) -> tuple[int, Any]:
    # the same server when it cannot read the request back into its own model: llama.cpp's
    # ValueError as it stands, as an internal error
    message = f"Requested tokens ({prompt}) exceed context window of {n_ctx}"
    error = {"message": message, "type": "internal_server_error", "param": None, "code": None}
    return 500, {"error": error}


def _overflow_vllm(n_ctx: int, prompt: int, completion: int) -> tuple[int, Any]:
    # vllm/entrypoints/openai/serving_engine.py (ErrorResponse, top-level, code the status)
    message = (
        f"This model's maximum context length is {n_ctx} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion."
    )
    return 400, {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


def _overflow_openai(n_ctx: int, prompt: int, completion: int) -> tuple[int, Any]:
    error = {
        "message": "Your input exceeds the context window of this model. Please adjust your "
        "input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
    return 400, {"error": error}


def _overflow_llama_server(n_ctx: int, prompt: int, completion: int) -> tuple[int, Any]:
    # llama.cpp's tools/server (ERROR_TYPE_EXCEED_CONTEXT_SIZE)
    error = {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": prompt,
        "n_ctx": n_ctx,
    }
    return 400, {"error": error}


OVERFLOW_ANSWERS = {
    "llama-cpp-python": _overflow_llama_cpp_python,
    "llama-cpp-python-raw": _overflow_llama_cpp_python_raw,
    "vllm": _overflow_vllm,
    "openai": _overflow_openai,
    "llama-server": _overflow_llama_server,
}
"""How each server refuses a request that does not fit its context: (status, JSON body)."""

FAULTS = ("500", "garbage", "not-a-completion")


class Faults:
    """Faults for the first chat requests, and what the server saw (shared with the app).

    ``fail_first`` requests get ``fault``: ``"500"`` (an OpenAI-format server error),
    ``"garbage"`` (200 with a body that is not JSON) or ``"not-a-completion"`` (200 with
    JSON that is not a chat completion); later requests are answered. ``in_flight_peak`` is
    the most chat requests the server held at once. With ``n_ctx`` a request that does not
    fit gets ``OVERFLOW_ANSWERS[overflow]`` (``refused`` counts them); ``prompts`` holds every
    request's prompt size (``prompt_tokens``).
    """

    def __init__(
        self,
        fail_first: int = 0,
        fault: str = "500",
        n_ctx: int | None = None,
        overflow: str = "llama-cpp-python",
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        if overflow not in OVERFLOW_ANSWERS:
            raise ValueError(f"overflow must be one of {list(OVERFLOW_ANSWERS)}, got {overflow!r}")
        self.fail_first = fail_first
        self.fault = fault
        self.n_ctx = n_ctx
        self.overflow = overflow
        self.prompts: list[int] = []
        self.refused = 0
        self.failed = 0
        self.computed = 0
        self.in_flight = 0
        self.in_flight_peak = 0
        self._lock = threading.Lock()

    def take(self) -> Response | None:
        with self._lock:
            if self.failed >= self.fail_first:
                return None
            self.failed += 1
        if self.fault == "500":
            return _error(500, "scripted server fault")
        if self.fault == "garbage":
            return Response(b"<html>502 Bad Gateway</html>{", media_type="application/json")
        return JSONResponse({"object": "error", "detail": ["not", "a", "completion"]})

    def window(self, body: dict[str, Any]) -> Response | None:
        """The server's refusal when ``body`` does not fit ``n_ctx``; records its size."""
        prompt = prompt_tokens(body)
        completion = int(body.get("max_tokens") or 0)
        with self._lock:
            self.prompts.append(prompt)
            if self.n_ctx is None or prompt + completion <= self.n_ctx:
                return None
            self.refused += 1
        status, answer = OVERFLOW_ANSWERS[self.overflow](self.n_ctx, prompt, completion)
        return JSONResponse(answer, status_code=status)


def create_app(
    *,
    delay_s: float = 0.0,
    stop_after: int = 2,
    model: str = "fake",
    counter: list[int] | None = None,
    faults: Faults | None = None,
    slots: int | None = None,
    honour_max_tokens: bool = False,
) -> FastAPI:
    """The ASGI app. ``counter`` (a one-item list) counts chat requests, if given; with
    ``slots`` at most that many are computed at once, the rest queue (as in llama.cpp);
    ``honour_max_tokens``: see ``respond``."""
    app = FastAPI(title="fake-llm")
    faults = faults or Faults()
    slot = asyncio.Semaphore(slots) if slots else contextlib.nullcontext()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model, "object": "model", "created": 0, "owned_by": "trajsynth"}],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' must be a list")
        if body.get("stream"):
            return _error(400, "the fake LLM does not stream")
        if counter is not None:
            counter[0] += 1
        fault = faults.take() or faults.window(body)
        if fault is not None:
            return fault
        faults.in_flight += 1
        faults.in_flight_peak = max(faults.in_flight_peak, faults.in_flight)
        try:
            async with slot:
                if delay_s:
                    await asyncio.sleep(delay_s)
                # counted whether or not the client still waits (it is not cancelled when
                # the client goes away, like llama.cpp's server)
                faults.computed += 1
            return JSONResponse(
                respond(
                    body,
                    stop_after=stop_after,
                    model=model,
                    honour_max_tokens=honour_max_tokens,
                )
            )
        finally:
            faults.in_flight -= 1

    return app


def _error(status: int, message: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    return JSONResponse(body, status_code=status)


class FakeLLMServer:
    """The app under uvicorn in a daemon thread, on a loopback port (0: a free one)."""

    def __init__(
        self,
        *,
        delay_s: float = 0.0,
        stop_after: int = 2,
        model: str = "fake",
        host: str = "127.0.0.1",
        port: int = 0,
        fail_first: int = 0,
        fault: str = "500",
        slots: int | None = None,
        n_ctx: int | None = None,
        overflow: str = "llama-cpp-python",
        honour_max_tokens: bool = False,
    ) -> None:
        self._counter = [0]
        self.faults = Faults(fail_first, fault, n_ctx, overflow)
        app = create_app(
            delay_s=delay_s,
            stop_after=stop_after,
            model=model,
            counter=self._counter,
            faults=self.faults,
            slots=slots,
            honour_max_tokens=honour_max_tokens,
        )
        self._sock = listening_socket(host, port)  # TCP_NODELAY: no 40 ms per kept-alive reply
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> int:
        """Chat requests answered (or in flight) so far."""
        return self._counter[0]

    def start(self, timeout_s: float = 10.0) -> FakeLLMServer:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake LLM server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def running(**kwargs: Any) -> Iterator[FakeLLMServer]:
    """A pytest-fixture body: ``yield from running(delay_s=0.01)``."""
    with FakeLLMServer(**kwargs) as server:
        yield server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per chat request")
    parser.add_argument("--stop-after", type=int, default=2)
    args = parser.parse_args(argv)
    server = FakeLLMServer(
        delay_s=args.delay, stop_after=args.stop_after, host=args.host, port=args.port
    ).start()
    sys.stdout.write(f"READY {server.port}\n")
    sys.stdout.flush()
    try:
        while server._thread is not None and server._thread.is_alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
