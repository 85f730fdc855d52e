"""One async LLM client for any OpenAI-compatible server (vLLM, hosted APIs, llama.cpp).

``OpenAILLMClient`` wraps ``openai.AsyncOpenAI``. The SDK does the retries (429, 5xx,
timeouts and connection faults, with exponential backoff that honours ``Retry-After``) and
the per-attempt timeout, from ``LLMConfig.max_retries`` and ``LLMConfig.timeout_s``. On top
of it this module adds:

* a bounded number of requests in flight (``max_concurrency``) and optional
  requests-per-minute and tokens-per-minute limits (leaky buckets, ``aiolimiter``);
* an on-disk response cache (``diskcache``) keyed by the sha256 of the full canonical
  request (model, messages, tools, sampling parameters, seed, logprob options), so a re-run
  returns the same turns and costs nothing. Identical requests share one answer, so callers
  that want several different samples of one prompt pass different seeds (or ``n``);
* per-call usage (role, tokens, latency, whether it came from the cache) on every result;
* logprobs requested when ``LLMConfig.logprobs`` is set; a server that rejects them with a
  400 is asked once more without them, and never again for this client.

Faults left after the SDK's retries become ``LLMError`` (an ``InfraError``): never shown to
a model, never counted against the policy. Malformed tool-call JSON from the model is not a
fault here: it stays verbatim in ``FunctionCall.arguments`` and the agent layer decides.
The API key is a ``SecretStr``; it is handed to the SDK and nowhere else (not the cache key,
not a cached value, not a log line).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import diskcache
import openai
from aiolimiter import AsyncLimiter
from pydantic import Field, SecretStr, ValidationError

from trajsynth.schemas import (
    AgentRole,
    FunctionCall,
    InputError,
    JsonValue,
    LLMConfig,
    LLMError,
    LLMUsage,
    Message,
    MessageRole,
    Record,
    ToolCall,
    canonical_json,
)

__all__ = [
    "CACHE_VERSION",
    "ChatChoice",
    "ChatResult",
    "LLMBadRequestError",
    "LLMClient",
    "OpenAILLMClient",
    "estimate_tokens",
    "open_llm_client",
    "request_key",
]

log = logging.getLogger(__name__)

CACHE_VERSION = 1
"""Bumped when the cached value's layout changes; part of every cache key."""

_LOGPROB_KEYS = ("logprobs", "top_logprobs")
_PLACEHOLDER_KEY = "not-needed"  # local servers take any key; the SDK insists on one


class ChatChoice(Record):
    """One sampled answer: the assistant message and the logprobs of its tokens."""

    message: Message
    finish_reason: str
    token_logprobs: list[float] | None = None
    top_logprobs: list[list[float]] | None = None


class ChatResult(Record):
    """One chat call. The top-level fields are the first choice; ``choices`` holds all ``n``.

    ``token_logprobs[i]`` is the logprob of the i-th generated token, ``top_logprobs[i]``
    the logprobs of the most likely tokens at that position (METHODS.md §1.3); both are
    ``None`` when the backend returned none. ``raw`` is the response as the server sent it,
    less the per-token logprobs already parsed into the fields above.
    """

    message: Message
    usage: LLMUsage
    finish_reason: str
    token_logprobs: list[float] | None = None
    top_logprobs: list[list[float]] | None = None
    raw: dict[str, JsonValue] = Field(default_factory=dict)
    choices: list[ChatChoice] = Field(default_factory=list)
    request_hash: str = Field(default="", description="the cache key of the request")


@runtime_checkable
class LLMClient(Protocol):
    """What the agents need from an LLM: one chat turn, with tools, as a given role.

    ``tool_choice`` is the OpenAI field (``"auto"``, ``"required"``, ``"none"`` or a named
    function); ``None`` means ``"auto"`` when tools are given.
    """

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        role: AgentRole,
        tools: list[dict] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        n: int = 1,
        tool_choice: str | dict | None = None,
    ) -> ChatResult: ...


class LLMBadRequestError(LLMError):
    """The server refused the request itself (HTTP 4xx other than 429), after no retry.

    ``context_overflow`` is set when the message says the prompt is too long for the
    model's context, which a rollout records as ``Termination.CONTEXT_LIMIT``.
    """

    def __init__(self, message: str, *, status_code: int, context_overflow: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.context_overflow = context_overflow


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for servers that report no usage.

    >>> estimate_tokens(""), estimate_tokens("abcd"), estimate_tokens("abcde")
    (0, 1, 2)
    """
    return math.ceil(len(text) / 4)


def request_key(body: dict[str, Any]) -> str:
    """The cache key of a request body: sha256 of its canonical JSON and the cache version.

    Key order does not matter; every value does.

    >>> request_key({"model": "m", "seed": 1}) == request_key({"seed": 1, "model": "m"})
    True
    >>> request_key({"model": "m", "seed": 1}) == request_key({"model": "m", "seed": 2})
    False
    """
    blob = canonical_json({"v": CACHE_VERSION, "request": body})
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class _LoopState:
    """What must belong to one event loop: the SDK client, the semaphore, the limiters."""

    client: openai.AsyncOpenAI
    semaphore: asyncio.Semaphore
    rpm: AsyncLimiter | None
    tpm: AsyncLimiter | None


class OpenAILLMClient:
    """``LLMClient`` over ``openai.AsyncOpenAI`` for any OpenAI-compatible endpoint.

    ``config.base_url`` must be set (``open_llm_client`` starts the embedded server when
    it is not). ``api_key`` is read from the environment by the caller (settings), never
    here; ``None`` sends a placeholder, which local servers accept. ``cache_dir`` ``None``
    turns the response cache off. ``http_client`` (an ``httpx.AsyncClient``) replaces the
    SDK's own, e.g. with a mock transport in tests.

    The SDK client, the concurrency semaphore and the rate limiters are made per running
    event loop, so one client object can serve several ``asyncio.run`` calls in turn.
    """

    def __init__(
        self,
        config: LLMConfig,
        api_key: SecretStr | None = None,
        cache_dir: Path | None = None,
        http_client: Any = None,
    ) -> None:
        if not config.base_url:
            raise InputError(
                "LLMConfig.base_url is not set: start the embedded server "
                "(trajsynth.agents.embedded.EmbeddedLLMServer, or open_llm_client) first"
            )
        self.config = config
        self._api_key = api_key
        self._http_client = http_client
        self._cache: diskcache.Cache | None = (
            diskcache.Cache(str(cache_dir)) if cache_dir is not None else None
        )
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        # None: not known yet; False: the server refused them once, so never ask again.
        self._logprobs_supported: bool | None = None if config.logprobs else False
        # Whether the server answers `n > 1` with n choices (llama.cpp ignores `n`).
        self._n_supported: bool | None = None

    def __repr__(self) -> str:
        return f"OpenAILLMClient(base_url={self.config.base_url!r}, model={self.config.model!r})"

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> OpenAILLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the SDK client of the running loop and the cache."""
        with contextlib.suppress(RuntimeError):
            state = self._states.pop(asyncio.get_running_loop(), None)
            if state is not None:
                await state.client.close()
        self.close_cache()

    def close_cache(self) -> None:
        if self._cache is not None:
            self._cache.close()

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            cfg = self.config
            key = self._api_key.get_secret_value() if self._api_key else _PLACEHOLDER_KEY
            client = openai.AsyncOpenAI(
                base_url=cfg.base_url,
                api_key=key,
                max_retries=cfg.max_retries,
                timeout=cfg.timeout_s,
                http_client=self._http_client,
            )
            state = _LoopState(
                client=client,
                semaphore=asyncio.Semaphore(cfg.max_concurrency),
                rpm=AsyncLimiter(cfg.requests_per_minute, 60) if cfg.requests_per_minute else None,
                tpm=AsyncLimiter(cfg.tokens_per_minute, 60) if cfg.tokens_per_minute else None,
            )
            self._states[loop] = state
        return state

    # -- the call ----------------------------------------------------------------------

    def request_body(
        self,
        messages: Sequence[Message],
        *,
        tools: list[dict] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        n: int = 1,
        tool_choice: str | dict | None = None,
    ) -> dict[str, Any]:
        """The request as sent on the wire (before a logprob fallback); its hash is the key."""
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": [_wire_message(m) for m in messages],
            "temperature": cfg.temperature if temperature is None else temperature,
            "top_p": cfg.top_p,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
        }
        if tools:
            body["tools"] = list(tools)
            # llama.cpp's chatml-function-calling ignores the tools unless this is sent;
            # for OpenAI and vLLM "auto" is the default anyway.
            body["tool_choice"] = tool_choice or "auto"
        if seed is not None:
            body["seed"] = seed
        if n != 1:
            body["n"] = n
        if cfg.logprobs:
            body["logprobs"] = True
            if cfg.top_logprobs:
                body["top_logprobs"] = cfg.top_logprobs
        return body

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        role: AgentRole,
        tools: list[dict] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        n: int = 1,
        tool_choice: str | dict | None = None,
    ) -> ChatResult:
        """One chat turn as ``role``; from the cache when this exact request was made before.

        ``n > 1`` asks for ``n`` samples; a server that returns fewer (llama.cpp) is asked
        again for the rest, with seeds ``seed + i`` when a seed was given. Raises
        ``LLMError`` for faults left after retries, ``LLMBadRequestError`` for a refused
        request.
        """
        if n < 1:
            raise InputError(f"n must be at least 1, got {n}")
        body = self.request_body(
            messages,
            tools=tools,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            n=n,
            tool_choice=tool_choice,
        )
        key = request_key(body)
        hit = self._cache_get(key)
        if hit is not None:
            usage = hit.usage.model_copy(update={"role": role, "latency_s": 0.0, "cached": True})
            log.debug("llm %s: cache hit %s", role, key[:12])
            return hit.model_copy(update={"usage": usage})

        completion, latency = await self._send(body, role)
        completions = [completion]
        choices = [_parse_choice(c) for c in completion.choices]
        if len(choices) < n:
            if self._n_supported is None:
                log.info("server sent %d of n=%d choices; asking one at a time", len(choices), n)
            self._n_supported = False
            extra_bodies = []
            for i in range(len(choices), n):
                extra = {k: v for k, v in body.items() if k != "n"}
                if seed is not None:
                    extra["seed"] = seed + i
                extra_bodies.append(extra)
            extras = await asyncio.gather(*(self._send(b, role) for b in extra_bodies))
            for extra_completion, extra_latency in extras:
                completions.append(extra_completion)
                choices.extend(_parse_choice(c) for c in extra_completion.choices[:1])
                latency += extra_latency
        if not choices:
            raise LLMError(f"{self.config.base_url} answered with no choices ({role})")
        choices = choices[:n]

        prompt_tokens, completion_tokens = _count_usage(body, completions, choices)
        usage = LLMUsage(
            role=role,
            model=self.config.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=latency,
        )
        first = choices[0]
        result = ChatResult(
            message=first.message,
            usage=usage,
            finish_reason=first.finish_reason,
            token_logprobs=first.token_logprobs,
            top_logprobs=first.top_logprobs,
            raw=_raw(completion),
            choices=choices,
            request_hash=key,
        )
        log.debug(
            "llm %s %s: %d+%d tokens in %.2fs",
            role,
            self.config.model,
            prompt_tokens,
            completion_tokens,
            latency,
        )
        self._cache_put(key, result)
        return result

    async def _send(self, body: dict[str, Any], role: AgentRole) -> tuple[Any, float]:
        """Throttle, take a concurrency slot, call the SDK; returns (completion, seconds)."""
        state = self._state()
        if self._logprobs_supported is False:
            body = {k: v for k, v in body.items() if k not in _LOGPROB_KEYS}
        if state.rpm is not None:
            await state.rpm.acquire()
        if state.tpm is not None:
            estimate = estimate_tokens(canonical_json(body["messages"])) + body["max_tokens"]
            await state.tpm.acquire(min(estimate, state.tpm.max_rate))
        async with state.semaphore:
            start = time.perf_counter()
            try:
                completion = await self._create(state.client, body)
            except openai.APIError as exc:
                raise _llm_error(exc, self.config.base_url, role) from exc
            return completion, time.perf_counter() - start

    async def _create(self, client: openai.AsyncOpenAI, body: dict[str, Any]) -> Any:
        asks_logprobs = any(k in body for k in _LOGPROB_KEYS)
        try:
            completion = await client.chat.completions.create(**body)
        except openai.BadRequestError as exc:
            if not asks_logprobs or self._logprobs_supported is not None:
                raise
            stripped = {k: v for k, v in body.items() if k not in _LOGPROB_KEYS}
            completion = await client.chat.completions.create(**stripped)
            log.warning(
                "%s refused logprobs (%s); asking without them from now on",
                self.config.base_url,
                exc.message,
            )
            self._logprobs_supported = False
            return completion
        if asks_logprobs:
            self._logprobs_supported = True
        return completion

    # -- cache -------------------------------------------------------------------------

    def _cache_get(self, key: str) -> ChatResult | None:
        if self._cache is None:
            return None
        blob = self._cache.get(key)
        if blob is None:
            return None
        try:
            return ChatResult.model_validate_json(blob)
        except ValidationError:
            log.warning("dropping unreadable cache entry %s", key[:12])
            self._cache.delete(key)
            return None

    def _cache_put(self, key: str, result: ChatResult) -> None:
        if self._cache is not None:
            self._cache.set(key, result.model_dump_json())


@contextlib.asynccontextmanager
async def open_llm_client(
    config: LLMConfig,
    *,
    api_key: SecretStr | None = None,
    cache_dir: Path | None = None,
    startup_timeout_s: float = 180.0,
) -> AsyncIterator[OpenAILLMClient]:
    """A client for ``config``, starting the embedded llama.cpp server when it has no URL.

    The embedded server is stopped when the block exits (also on Ctrl-C).
    """
    async with contextlib.AsyncExitStack() as stack:
        if not config.base_url:
            from trajsynth.agents.embedded import EmbeddedLLMServer

            server = EmbeddedLLMServer(
                model_alias=config.model,
                startup_timeout_s=startup_timeout_s,
                n_ctx=config.embedded_ctx,
            )
            stack.callback(server.stop)
            # Started on this thread, not in a worker: the child is tied to the starting
            # thread's life (PR_SET_PDEATHSIG). It blocks the loop for the server's start-up
            # (about 1-3 s), before any other work.
            server.start()
            config = config.model_copy(update={"base_url": server.base_url})
        client = OpenAILLMClient(config, api_key=api_key, cache_dir=cache_dir)
        stack.push_async_callback(client.aclose)
        yield client


# -- wire format helpers -------------------------------------------------------------------


def _wire_message(message: Message) -> dict[str, Any]:
    # No null fields: llama.cpp's server refuses `"content": null` beside tool calls.
    return message.to_openai()


def _parse_choice(choice: Any) -> ChatChoice:
    msg = choice.message
    tool_calls: list[ToolCall] = []
    for i, call in enumerate(msg.tool_calls or []):
        function = getattr(call, "function", None)
        if function is None:
            log.warning("ignoring a tool call of type %r", getattr(call, "type", None))
            continue
        arguments = function.arguments
        if not isinstance(arguments, str):  # some servers send an object; keep it as text
            arguments = canonical_json(arguments)
        tool_calls.append(
            ToolCall(
                id=call.id or f"call_{i}",
                function=FunctionCall(name=function.name or "", arguments=arguments),
            )
        )
    message = Message(
        role=MessageRole.ASSISTANT, content=msg.content, tool_calls=tool_calls or None
    )
    token_logprobs: list[float] | None = None
    top_logprobs: list[list[float]] | None = None
    content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
    if content:
        tokens = [t for t in content if t.logprob is not None]
        token_logprobs = [float(t.logprob) for t in tokens]
        tops = [[float(x.logprob) for x in (t.top_logprobs or [])] for t in tokens]
        top_logprobs = tops if any(tops) else None
    return ChatChoice(
        message=message,
        finish_reason=choice.finish_reason or "unknown",
        token_logprobs=token_logprobs or None,
        top_logprobs=top_logprobs,
    )


def _count_usage(
    body: dict[str, Any], completions: list[Any], choices: list[ChatChoice]
) -> tuple[int, int]:
    """Tokens from the responses' usage; an estimate where a server sent none."""
    prompt = completion = 0
    for c in completions:
        if c.usage is not None:
            prompt += c.usage.prompt_tokens or 0
            completion += c.usage.completion_tokens or 0
    if any(c.usage is None for c in completions):
        log.debug("server sent no usage; estimating token counts")
        prompt = prompt or estimate_tokens(canonical_json(body["messages"])) * len(completions)
        completion = completion or sum(_completion_tokens(c) for c in choices)
    return prompt, completion


def _completion_tokens(choice: ChatChoice) -> int:
    if choice.token_logprobs:
        return len(choice.token_logprobs)
    text = choice.message.content or ""
    for call in choice.message.tool_calls or []:
        text += call.function.name + call.function.arguments
    return estimate_tokens(text)


def _raw(completion: Any) -> dict[str, JsonValue]:
    data = completion.model_dump(mode="json", exclude_none=True)
    for choice in data.get("choices", []):
        choice.pop("logprobs", None)
    return data


def _llm_error(exc: openai.APIError, base_url: str | None, role: AgentRole) -> LLMError:
    """The SDK's fault, after its retries, as an ``LLMError`` naming server and role."""
    where = f"{base_url} ({role})"
    if isinstance(exc, openai.APITimeoutError):
        return LLMError(f"{where}: timed out after retries")
    if isinstance(exc, openai.APIConnectionError):
        return LLMError(f"{where}: cannot connect after retries: {exc.message}")
    if isinstance(exc, openai.RateLimitError):
        return LLMError(f"{where}: rate limited (429) after retries")
    if isinstance(exc, openai.InternalServerError):
        return LLMError(f"{where}: server error {exc.status_code} after retries: {exc.message}")
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return LLMBadRequestError(
            f"{where}: the server refused the API key ({exc.status_code})",
            status_code=exc.status_code,
        )
    if isinstance(exc, openai.APIStatusError):
        text = exc.message.lower()
        overflow = "context" in text and any(
            w in text for w in ("length", "exceed", "too long", "maximum", "window")
        )
        return LLMBadRequestError(
            f"{where}: request refused ({exc.status_code}): {exc.message}",
            status_code=exc.status_code,
            context_overflow=overflow,
        )
    return LLMError(f"{where}: {type(exc).__name__}: {exc}")
