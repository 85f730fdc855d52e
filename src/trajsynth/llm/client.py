"""One async LLM client for any OpenAI-compatible server (vLLM, hosted APIs, llama.cpp).

``OpenAILLMClient`` wraps ``openai.AsyncOpenAI``. On top of it this module adds:

* retries of infrastructure faults (429, 408/409, 5xx, timeouts, connection faults, an
  answer that is not a chat completion) through ``tenacity``, ``LLMConfig.max_retries`` of
  them, with exponential backoff and jitter that honours ``Retry-After``. They are done
  here rather than by the SDK because a retry must wait for the server to be idle: a
  server this process runs (``llm.embedded``) is restarted before a retry after a
  timeout or a lost connection, since llama.cpp goes on computing a request the client gave
  up on and the retry would queue behind it (``llm.endpoints``);
* requests in flight bounded by what the server computes at once, across every client,
  event loop and thread of the process (one for the embedded server, ``max_concurrency``
  otherwise), so a request waits in the client and its timeout measures computing, not
  queueing; the per-attempt timeout is ``LLMConfig.timeout_s`` when set, else adapted to
  the server's measured speed (``llm.endpoints``); a try that waits more than a few
  seconds is reported while it waits (``llm.waiting``); optional requests-per-minute and
  tokens-per-minute limits (leaky buckets, ``aiolimiter``);
* an on-disk response cache (``diskcache``) keyed by the sha256 of the full canonical
  request (model, messages, tools, sampling parameters, seed, logprob options), so a re-run
  returns the same turns and costs nothing. Identical requests share one answer, so callers
  that want several different samples of one prompt pass different seeds (or ``n``);
* per-call usage (role, tokens, latency, whether it came from the cache) on every result;
* logprobs requested when ``LLMConfig.logprobs`` is set; a server that rejects them with a
  400 is asked once more without them, and never again for this client.

Faults left after the retries become ``LLMError`` (an ``InfraError``): never shown to a
model, never counted against the policy. The answer is parsed from the JSON the server
sent, not from the SDK's unvalidated objects, so no model output crashes the parse: a field
of the wrong type is kept as text, unpaired surrogates become U+FFFD, and a call written as
text (``functions.<name>:`` then its arguments, the embedded server's call syntax, or
``<tool_call>{...}</tool_call>``) becomes a tool call, never assistant content (the agent
layer then records it as a call, or as a ``model`` failure when it does not parse).
Malformed tool-call JSON is not a fault here: it stays verbatim in
``FunctionCall.arguments`` and the agent layer decides.
The API key is a ``SecretStr``; it is handed to the SDK and nowhere else (not the cache key,
not a cached value, not a log line).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import logging
import math
import random
import re
import ssl
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeGuard, runtime_checkable

import diskcache
import httpx
import openai
from aiolimiter import AsyncLimiter
from pydantic import Field, SecretStr, ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from trajsynth.llm.answered import HEADER as ANSWERED_HEADER
from trajsynth.llm.endpoints import ADAPTIVE_FLOOR_S, Endpoint, endpoint
from trajsynth.llm.waiting import watch_reply
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
    stable_hash,
)

__all__ = [
    "CACHE_VERSION",
    "ChatChoice",
    "ChatResult",
    "LLMBadRequestError",
    "LLMClient",
    "OpenAILLMClient",
    "context_overflow",
    "estimate_tokens",
    "open_llm_client",
    "request_key",
    "made_up_result_at",
    "split_text_calls",
]

log = logging.getLogger(__name__)

CACHE_VERSION = 1
"""Bumped when the cached value's layout changes; part of every cache key."""

_LOGPROB_KEYS = ("logprobs", "top_logprobs")
_LOGPROB_FLOOR = -1e6
"""Below this no real softmax lands (float64's smallest probability is e^-745); a server
sending it is broken, and its logprobs are dropped as if it had sent none."""
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
    the logprobs of the most likely tokens at that position (docs/methods.md §1.3); both are
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

    ``context_overflow`` is set when the server said the prompt (with ``max_tokens``) does
    not fit the model's context (``context_overflow_text``); that answer is never retried,
    whatever its status (llama-cpp-python answers 500 with llama.cpp's own words when it
    could not read the request back), and a rollout records it as
    ``Termination.CONTEXT_LIMIT``.
    """

    def __init__(self, message: str, *, status_code: int, context_overflow: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.context_overflow = context_overflow


def context_overflow(exc: BaseException) -> bool:
    """Whether ``exc`` is a server's answer that the request does not fit the context."""
    return isinstance(exc, LLMBadRequestError) and exc.context_overflow


# What servers say when a request does not fit the context, as they word it:
# llama-cpp-python ("This model's maximum context length is N tokens", code
# context_length_exceeded; llama.cpp's own "Requested tokens (N) exceed context window of M"
# when it answers 500), vLLM ("maximum context length", "longer than the maximum model
# length", "max_model_len"), OpenAI (code context_length_exceeded; "exceeds the context
# window"), llama.cpp's llama-server (type exceed_context_size_error), TGI ("`inputs` tokens
# + `max_new_tokens` must be <="), LiteLLM (ContextWindowExceededError) and Anthropic's
# compatibility layer ("prompt is too long").
_CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|context[ _]length[ _]exceeded|exceeds? (?:the )?(?:available )?"
    r"context (?:window|size|length)|context window of|exceed_context_size"
    r"|maximum model length|max_model_len|context_?window_?exceeded"
    r"|tokens \+ `?max_new_tokens`? must be <=|prompt is too long",
    re.I,
)


def context_overflow_text(*parts: object) -> bool:
    """Whether any of ``parts`` (an error's message, code, type) says the request does not
    fit the model's context.

    >>> context_overflow_text("Requested tokens (9000) exceed context window of 8192")
    True
    >>> context_overflow_text("Your input exceeds the context window of this model.")
    True
    >>> context_overflow_text("bad request", "context_length_exceeded")
    True
    >>> context_overflow_text("Invalid value for 'temperature': the context is fine", None)
    False
    """
    return any(p is not None and _CONTEXT_OVERFLOW.search(str(p)) for p in parts)


def _status_overflow(exc: openai.APIStatusError) -> bool:
    return context_overflow_text(exc.message, exc.code, exc.type)


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
    return stable_hash({"v": CACHE_VERSION, "request": body}, length=64)


@dataclass
class _LoopState:
    """What must belong to one event loop: the SDK client and the limiters."""

    client: openai.AsyncOpenAI
    rpm: AsyncLimiter | None
    tpm: AsyncLimiter | None


class OpenAILLMClient:
    """``LLMClient`` over ``openai.AsyncOpenAI`` for any OpenAI-compatible endpoint.

    ``config.base_url`` must be set (``open_llm_client`` starts the embedded server when
    it is not). ``api_key`` is read from the environment by the caller (settings), never
    here; ``None`` sends a placeholder, which local servers accept. ``cache_dir`` ``None``
    turns the response cache off. ``http_client`` (an ``httpx.AsyncClient``) replaces the
    SDK's own, e.g. with a mock transport in tests.

    The SDK client and the rate limiters are made per running event loop (an httpx client
    belongs to one loop), so one client object can serve several ``asyncio.run`` calls in
    turn; they share one TLS context. The slots of the server are shared by the process.
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
                "(trajsynth.llm.embedded.EmbeddedLLMServer, or open_llm_client) first"
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
        self.endpoint: Endpoint = endpoint(config.base_url, config.max_concurrency)

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
                max_retries=0,  # retried in _send, after the server is idle again
                timeout=cfg.timeout_s or ADAPTIVE_FLOOR_S,  # each try sets its own
                http_client=self._http_client
                or openai.DefaultAsyncHttpxClient(verify=_tls_context()),
            )
            state = _LoopState(
                client=client,
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
        choices = _parse_choices(completion, tools_sent=bool(tools))
        if not choices:  # asking again would compute the same unusable answer
            raise LLMError(f"{self.config.base_url} answered with no usable choice ({role})")
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
                choices.extend(_parse_choices(extra_completion, tools_sent=bool(tools))[:1])
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

    async def _send(self, body: dict[str, Any], role: AgentRole) -> tuple[dict[str, Any], float]:
        """Throttle, take a server slot, call with retries; returns (completion JSON, seconds)."""
        state = self._state()
        if self._logprobs_supported is False:
            body = {k: v for k, v in body.items() if k not in _LOGPROB_KEYS}
        if state.rpm is not None:
            await state.rpm.acquire()
        if state.tpm is not None:
            estimate = estimate_tokens(canonical_json(body["messages"])) + body["max_tokens"]
            await state.tpm.acquire(min(estimate, state.tpm.max_rate))
        ep = self.endpoint
        if ep.dead:
            raise LLMError(
                f"{self.config.base_url} ({role}): not asked: the endpoint answered none of "
                f"the requests given up on so far ({ep.given_up}); check the server"
            )
        prompt_estimate = estimate_tokens(canonical_json([body["messages"], body.get("tools")]))
        attempts = self.config.max_retries + 1
        async with ep.gate.slot():
            retrying = AsyncRetrying(
                stop=stop_after_attempt(attempts),
                wait=_backoff,
                retry=retry_if_exception(_retryable),
                reraise=True,
            )
            last: BaseException | None = None
            # one id for every try: a try the server already answered is answered from its
            # record, not computed again (llm.answered)
            request_id = uuid.uuid4().hex
            began = time.perf_counter()  # the call's cost includes the retries' waits
            timeouts: list[float] = []
            try:
                async for attempt in retrying:
                    with attempt:
                        if last is not None:
                            # the server must be idle before the retry (module doc)
                            await ep.make_idle(_idle_reason(last))
                        start = time.perf_counter()
                        number = attempt.retry_state.attempt_number
                        timeout = ep.timeout_for(
                            prompt_estimate, body["max_tokens"], self.config.timeout_s, number
                        )
                        timeouts.append(timeout)
                        try:
                            async with watch_reply(
                                role=str(role),
                                base_url=self.config.base_url or "",
                                attempt=number,
                                attempts=attempts,
                                timeout_s=timeout,
                            ):
                                completion = await _within(
                                    timeout,
                                    self._create(state.client, body, request_id, timeout),
                                    self.config.base_url or "",
                                )
                        except (openai.APIError, _MalformedResponse) as exc:
                            last = exc
                            raise
                        computed = time.perf_counter() - start
            except openai.APIError as exc:
                if _idle_reason(exc) != "error":
                    ep.give_up()
                    # given up for good: the server must not go on computing the abandoned
                    # request while the next one (of this or another unit) waits behind it
                    with contextlib.suppress(LLMError):
                        await ep.make_idle(_idle_reason(exc))
                if isinstance(exc, openai.APITimeoutError):
                    raise LLMError(_no_reply(self.config, role, timeouts)) from exc
                raise _llm_error(exc, self.config.base_url, role) from exc
            except _MalformedResponse as exc:
                raise LLMError(f"{self.config.base_url} ({role}): {exc} (after retries)") from exc
        ep.observe(
            computed,
            _usage_int(completion, "prompt_tokens") or prompt_estimate,
            _usage_int(completion, "completion_tokens") or body["max_tokens"],
        )
        return completion, time.perf_counter() - began

    async def _create(
        self, client: openai.AsyncOpenAI, body: dict[str, Any], request_id: str, timeout: float
    ) -> dict[str, Any]:
        asks_logprobs = any(k in body for k in _LOGPROB_KEYS)
        create = functools.partial(
            client.chat.completions.with_raw_response.create,
            extra_headers={ANSWERED_HEADER: request_id},
            timeout=timeout,
        )
        try:
            response = await create(**body)
        except openai.APIStatusError as exc:
            if not asks_logprobs or not self._refuses_logprobs(exc):
                raise
            stripped = {k: v for k, v in body.items() if k not in _LOGPROB_KEYS}
            response = await create(**stripped)
            log.warning(
                "%s refused logprobs (%s); asking without them from now on",
                self.config.base_url,
                exc.message,
            )
            self._logprobs_supported = False
            return _completion_json(response.http_response.content)
        if asks_logprobs:
            self._logprobs_supported = True
        return _completion_json(response.http_response.content)

    def _refuses_logprobs(self, exc: openai.APIStatusError) -> bool:
        """Whether the server refused the request for its logprobs: any 400 before they are
        known to work (a prompt too long aside: asked again it would be refused the same
        way), or an answer that names them. llama-cpp-python started with
        ``--logits_all false`` answers 500 "logprobs is not supported ..." only on the turns
        whose chat handler passes them on, so a server may have answered them before."""
        if _status_overflow(exc):
            return False
        if "logprob" in exc.message.lower():
            return exc.status_code in (400, 422) or exc.status_code >= 500
        return isinstance(exc, openai.BadRequestError) and self._logprobs_supported is None

    # -- cache -------------------------------------------------------------------------

    def _cache_get(self, key: str) -> ChatResult | None:
        if self._cache is None:
            return None
        blob = self._cache.get(key)
        if blob is None:
            return None
        if isinstance(blob, str | bytes):  # what _cache_put writes
            try:
                return ChatResult.model_validate_json(blob)
            except ValidationError:
                pass
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

    The embedded server (context ``config.embedded_ctx``) is stopped when the block exits
    (also on Ctrl-C); while it runs, a retry after it died or was given up on restarts it.
    """
    async with contextlib.AsyncExitStack() as stack:
        if not config.base_url:
            from trajsynth.llm.embedded import EmbeddedLLMServer, take_launched

            settings = (config.model, config.embedded_ctx, config.embedded_deterministic)
            server = take_launched(*settings) or EmbeddedLLMServer(
                model_alias=config.model,
                n_ctx=config.embedded_ctx,
                deterministic=config.embedded_deterministic,
                startup_timeout_s=startup_timeout_s,
            )
            stack.callback(server.stop)
            # Started on this thread, not in a worker: the child is tied to the starting
            # thread's life (PR_SET_PDEATHSIG). It blocks the loop for the server's start-up
            # (about 1-3 s), before any other work, unless the command launched it early.
            server.start()
            config = config.model_copy(update={"base_url": server.base_url})
        client = OpenAILLMClient(config, api_key=api_key, cache_dir=cache_dir)
        stack.push_async_callback(client.aclose)
        yield client


# -- faults and retries ----------------------------------------------------------------------


class _MalformedResponse(Exception):
    """The server answered 2xx with something that is not a chat completion."""


_RETRY_STATUS = frozenset({408, 409, 429})
_BACKOFF_INITIAL_S = 0.5
_BACKOFF_MAX_S = 8.0
_RETRY_AFTER_MAX_S = 60.0
_jitter = random.Random()  # its own generator: seeded sampling elsewhere is not disturbed


def _retryable(exc: BaseException) -> bool:
    """Infrastructure faults worth another attempt (those the SDK itself would retry)."""
    if isinstance(exc, _MalformedResponse | openai.APIConnectionError):  # timeouts included
        return True
    if isinstance(exc, openai.APIStatusError):
        if _status_overflow(exc):  # the same prompt will not fit next time either
            return False
        return exc.status_code in _RETRY_STATUS or exc.status_code >= 500
    return False


async def _within(seconds: float, call: Any, base_url: str) -> Any:
    """``await call``, but never past ``seconds`` (plus a second's grace) in all: the SDK's
    timeout bounds each read, so a server that trickles bytes could hold a try longer."""
    try:
        async with asyncio.timeout(seconds + 1.0):
            return await call
    except TimeoutError:
        # the SDK types this as its own httpx's Request (httpx2 in openai 3, httpx before);
        # the error only keeps it for the reader (method and URL), which any Request has
        request: Any = httpx.Request("POST", f"{base_url.rstrip('/')}/chat/completions")
        raise openai.APITimeoutError(request=request) from None


def _no_reply(config: LLMConfig, role: AgentRole, timeouts: Sequence[float]) -> str:
    """The one line for a request whose every try timed out: tries, seconds, the setting."""
    waits = ", ".join(f"{t:.0f}" if t >= 10 else f"{t:g}" for t in timeouts)
    setting = (
        f"[run.llm] timeout_s = {config.timeout_s:g}"
        if config.timeout_s is not None
        else "[run.llm] timeout_s unset: adapted to the measured speed"
    )
    return (
        f"{config.base_url} ({role}): timed out after retries: no reply in "
        f"{len(timeouts)} tries of {waits} s "
        f"({setting}, max_retries = {config.max_retries}); the endpoint accepted the "
        "request and answered nothing"
    )


def _idle_reason(exc: BaseException) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    return "error"


def _backoff(state: RetryCallState) -> float:
    """Seconds before the next attempt: what the server asked for (``_retry_after_s``), else
    exponential (0.5 s doubling to 8 s) with up to 25% jitter."""
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, openai.APIStatusError):
        asked = _retry_after_s(exc.response.headers)
        if asked is not None:
            return asked
    base = min(_BACKOFF_MAX_S, _BACKOFF_INITIAL_S * 2 ** (state.attempt_number - 1))
    return base * (1.0 + 0.25 * _jitter.random())


def _retry_after_s(headers: Any) -> float | None:
    """The wait a response asks for, read as the openai SDK reads it: ``retry-after-ms``
    (OpenAI's), else ``Retry-After`` in seconds or as an HTTP date; None when absent, bad or
    over a minute."""
    candidates: list[float] = []
    with contextlib.suppress(TypeError, ValueError):
        candidates.append(float(headers.get("retry-after-ms")) / 1000)
    header = headers.get("retry-after")
    try:
        candidates.append(float(header))
    except (TypeError, ValueError):
        with contextlib.suppress(TypeError, ValueError, IndexError):
            when = email.utils.parsedate_to_datetime(header)
            candidates.append((when - datetime.now(when.tzinfo)).total_seconds())
    return next((c for c in candidates if 0 <= c <= _RETRY_AFTER_MAX_S), None)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context (certifi's roots) for every SDK client of the process: building one
    reads the CA bundle, which a new client per event loop would do each time."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


# -- wire format helpers -------------------------------------------------------------------


def _wire_message(message: Message) -> dict[str, Any]:
    """``message`` as the OpenAI chat schema defines it, in the form strict servers read.

    Only the fields the spec gives each role go out: a tool message is ``role``, ``content``
    and ``tool_call_id`` (its stored ``name`` is not part of the schema, and servers that
    validate the request refuse unknown fields). An assistant message always carries
    ``content``: the spec lets a tool-call message leave it out, but llama-cpp-python's
    templates read ``message.content`` and answer 500 without it, and llama.cpp refuses
    ``null`` beside tool calls, so a tool-call message with no words sends ``""``.
    """
    role = message.role
    if role is MessageRole.TOOL:
        return {
            "role": role.value,
            "content": message.content or "",
            "tool_call_id": message.tool_call_id or "",
        }
    wire: dict[str, Any] = {"role": role.value, "content": message.content or ""}
    if role is MessageRole.ASSISTANT and message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls
        ]
    return wire


_MAX_INT_DIGITS = 4000  # below Python's int <-> str limit (4300)
_RAW_DEPTH = 32


def _int_or_text(digits: str) -> int | str:
    return int(digits) if len(digits) <= _MAX_INT_DIGITS else digits


def _completion_json(content: bytes) -> dict[str, Any]:
    """The response body as JSON, or ``_MalformedResponse``: never an exception of the
    JSON parser (an integer too long for Python is kept as its digits)."""
    try:
        data = json.loads(content, parse_int=_int_or_text)
    except (ValueError, RecursionError) as exc:
        excerpt = content[:120].decode("utf-8", "replace")
        raise _MalformedResponse(f"answered with a body that is not JSON: {excerpt!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        excerpt = _clean(canonical_json(data))[:120]
        raise _MalformedResponse(
            f"answered with something that is not a chat completion: {excerpt}"
        )
    return data


def _clean(text: str) -> str:
    r"""``text`` with unpaired surrogates replaced by U+FFFD (valid text is unchanged).

    >>> _clean("ok"), _clean("a\ud800b")
    ('ok', 'a\ufffdb')
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _as_text(value: Any) -> str:
    """Any JSON value as text: strings as they are (cleaned), anything else as JSON."""
    return _clean(value if isinstance(value, str) else canonical_json(value))


def _content_text(content: Any) -> str | None:
    if content is None:
        return None
    if isinstance(content, list):  # content parts
        parts = [t for p in content if isinstance(p, dict) and isinstance(t := p.get("text"), str)]
        if len(parts) == len(content):  # every part a text part
            return _clean("".join(parts))
    return _as_text(content)


_TEXT_CALL = re.compile(r"(?m)^[ \t]*functions\.([^\s:]*)[ \t]*:[ \t]*\n?")
_MADE_UP_RESULT = re.compile(
    r"(?m)^[ \t]*(?:functions\.[^\s:]*[ \t]+returned\b|<tool_response>)"
    r"|<\|im_start\|>[ \t]*tool\b"
)
"""Where a model starts writing a tool result itself: the prompt's result syntax
(``functions.<name> returned``, ``<tool_response>``) or a tool turn of its own."""
_TAGGED_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)


def made_up_result_at(text: str) -> int | None:
    r"""Where ``text`` starts a tool result the model wrote itself, or None.

    >>> made_up_result_at('Done.\nfunctions.delete_file returned:\n{"ok": true}')
    6
    >>> made_up_result_at("The tool returned: 42") is None
    True
    """
    found = _MADE_UP_RESULT.search(text)
    return found.start() if found else None


def split_text_calls(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    r"""Calls a model wrote as text, cut out of it: ``(the words left, [(name, arguments)])``.

    Two forms: the embedded server's own call syntax, a line ``functions.<name>:`` followed
    by the arguments (up to the next such line), and Hermes-style
    ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``. Arguments are kept as the
    text the model wrote, so a broken one is judged (and recorded) like any other call.

    A tool result the model wrote itself (``functions.<name> returned:``, the prompt's
    result syntax, or ``<tool_response>``) is never a call: it and everything after it are
    cut, since no tool produced them and what follows continues a conversation that did not
    happen. A call written before it stays a call.

    >>> split_text_calls('Sure.\nfunctions.create_event:\n{"date": "2024-05-01"}')
    ('Sure.', [('create_event', '{"date": "2024-05-01"}')])
    >>> split_text_calls('functions.create_event returned:\n{"id": 1}')
    (None, [])
    >>> split_text_calls('functions.f:\n{"a": 1}\nfunctions.f returned:\n{"ok": 1}\nDone!')
    (None, [('f', '{"a": 1}')])
    >>> split_text_calls("The functions.x: syntax is not at a line start.")
    ('The functions.x: syntax is not at a line start.', [])
    >>> split_text_calls('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    (None, [('f', '{"a":1}')])
    """
    cut = made_up_result_at(text)
    if cut is not None:
        text = text[:cut]
    calls: list[tuple[str, str]] = []
    words = text
    marks = list(_TEXT_CALL.finditer(text))
    if marks:
        words = text[: marks[0].start()]
        for i, mark in enumerate(marks):
            stop = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            calls.append((mark.group(1), text[mark.end() : stop].strip()))
    tagged = list(_TAGGED_CALL.finditer(words))
    if tagged:
        for match in tagged:
            calls.append(_tagged_call(match.group(1)))
        words = _TAGGED_CALL.sub("", words)
    words = words.strip()
    return (words or None), calls


def _tagged_call(body: str) -> tuple[str, str]:
    try:
        data = json.loads(body, parse_int=_int_or_text)
    except (ValueError, RecursionError):
        return "", body
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return "", body
    arguments = data.get("arguments", data.get("parameters", {}))
    return data["name"], _as_text(arguments)


def _parse_choices(completion: dict[str, Any], *, tools_sent: bool) -> list[ChatChoice]:
    """Every usable choice of a completion (a choice that is not an object is skipped)."""
    choices = []
    for choice in completion["choices"]:
        if isinstance(choice, dict):
            # ids made up here (a server that sent none, calls written as text) carry a digest
            # of the completion, so the calls of different turns never share an id
            salt = stable_hash([_as_text(completion.get("id") or ""), choice], length=10)
            choices.append(_parse_choice(choice, tools_sent=tools_sent, salt=salt))
        else:
            log.warning("skipping a choice that is not an object: %.80s", _as_text(choice))
    return choices


def _parse_choice(choice: dict[str, Any], *, tools_sent: bool, salt: str = "") -> ChatChoice:
    """One choice of the server's JSON as a ``ChatChoice``; any shape gives one. ``salt``
    goes into the ids of calls that came without one."""
    prefix = f"call_{salt}_" if salt else "call_"
    msg = choice.get("message")
    if not isinstance(msg, dict):
        msg = {"content": msg}
    content = _content_text(msg.get("content"))
    raw_calls = msg.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    tool_calls: list[ToolCall] = []
    for i, call in enumerate(raw_calls or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            # not a function call: kept as one with no name, which the agent records as
            # a `model` failure (unknown tool) with this text as its raw arguments
            tool_calls.append(
                ToolCall(
                    id=f"{prefix}{i}", function=FunctionCall(name="", arguments=_as_text(call))
                )
            )
            continue
        call_id = call.get("id")
        name = function.get("name")
        tool_calls.append(
            ToolCall(
                id=_as_text(call_id) if call_id else f"{prefix}{i}",
                function=FunctionCall(
                    name=_as_text(name) if name is not None else "",
                    arguments=_as_text(function.get("arguments", "{}")),
                ),
            )
        )
    if tools_sent and content:
        words, text_calls = split_text_calls(content)
        if made_up_result_at(content) is not None:
            # what the model wrote as a tool result is no part of the turn (``raw`` keeps
            # the server's text); an answer left empty is an empty answer, never a call
            log.info("cut a tool result the model wrote itself out of its answer")
            content = words
        if text_calls:
            log.info("%d call(s) written as text were parsed as calls", len(text_calls))
            content = words
            offset = len(tool_calls)
            tool_calls += [
                ToolCall(
                    id=f"{prefix}text_{offset + j}",
                    function=FunctionCall(name=_clean(n), arguments=a),
                )
                for j, (n, a) in enumerate(text_calls)
            ]
    message = Message(role=MessageRole.ASSISTANT, content=content, tool_calls=tool_calls or None)
    token_logprobs, top_logprobs = _logprobs(choice.get("logprobs"))
    finish = choice.get("finish_reason")
    if tool_calls and finish == "stop":
        finish = "tool_calls"
    return ChatChoice(
        message=message,
        finish_reason=_as_text(finish) if finish else "unknown",
        token_logprobs=token_logprobs,
        top_logprobs=top_logprobs,
    )


def _is_logprob(value: Any) -> TypeGuard[float]:
    """Whether ``value`` can be a logprob: a number in ``[_LOGPROB_FLOOR, 0]``."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and _LOGPROB_FLOOR <= value <= 0.0
    )


def _logprobs(data: Any) -> tuple[list[float] | None, list[list[float]] | None]:
    """Per-token logprobs and top alternatives; None for anything not shaped as OpenAI's."""
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, list) or not content:
        return None, None
    tokens = [t for t in content if isinstance(t, dict) and t.get("logprob") is not None]
    if not all(_is_logprob(t["logprob"]) for t in tokens):
        return None, None
    tops: list[list[float]] = []
    for t in tokens:
        alternatives = t.get("top_logprobs") or []
        if not isinstance(alternatives, list):
            return [float(t["logprob"]) for t in tokens] or None, None
        values = [x.get("logprob") for x in alternatives if isinstance(x, dict)]
        tops.append([float(v) for v in values if _is_logprob(v)])
    token_logprobs = [float(t["logprob"]) for t in tokens]
    return token_logprobs or None, (tops if any(tops) else None)


def _usage_int(completion: dict[str, Any], key: str) -> int:
    usage = completion.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _has_usage(completion: dict[str, Any]) -> bool:
    usage = completion.get("usage")
    return isinstance(usage, dict) and all(
        isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool)
        for k in ("prompt_tokens", "completion_tokens")
    )


def _count_usage(
    body: dict[str, Any], completions: list[dict[str, Any]], choices: list[ChatChoice]
) -> tuple[int, int]:
    """Tokens from the responses' usage; an estimate where a server sent none."""
    prompt = sum(_usage_int(c, "prompt_tokens") for c in completions)
    completion = sum(_usage_int(c, "completion_tokens") for c in completions)
    if not all(_has_usage(c) for c in completions):
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


def _raw(completion: dict[str, Any]) -> dict[str, JsonValue]:
    """The response as sent, less per-token logprobs; text cleaned, and anything nested
    deeper than 32 levels kept as its JSON text (so the record always validates)."""
    data = {k: v for k, v in completion.items() if k != "choices"}
    data["choices"] = [
        {k: v for k, v in c.items() if k != "logprobs"} if isinstance(c, dict) else c
        for c in completion["choices"]
    ]
    return _jsonable(data, 0)


def _jsonable(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict | list) and depth >= _RAW_DEPTH:
        return _as_text(value)
    if isinstance(value, dict):
        return {_clean(str(k)): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _llm_error(exc: openai.APIError, base_url: str | None, role: AgentRole) -> LLMError:
    """The SDK's fault, after the retries, as an ``LLMError`` naming server and role."""
    where = f"{base_url} ({role})"
    if isinstance(exc, openai.APITimeoutError):
        return LLMError(f"{where}: timed out after retries")
    if isinstance(exc, openai.APIConnectionError):
        return LLMError(f"{where}: cannot connect after retries: {exc.message}")
    if isinstance(exc, openai.APIStatusError) and _status_overflow(exc):
        return LLMBadRequestError(
            f"{where}: the request does not fit the model's context ({exc.status_code}): "
            f"{_error_text(exc)}",
            status_code=exc.status_code,
            context_overflow=True,
        )
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
        return LLMBadRequestError(
            f"{where}: request refused ({exc.status_code}): {exc.message}",
            status_code=exc.status_code,
        )
    return LLMError(f"{where}: {type(exc).__name__}: {exc}")


def _error_text(exc: openai.APIStatusError) -> str:
    """The server's own words: the error object's ``message`` where it sent one (OpenAI's
    ``{"error": {...}}`` or vLLM's top-level form), else the SDK's summary."""
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return _clean(message)
    return exc.message
