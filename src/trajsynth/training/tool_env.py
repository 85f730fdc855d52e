"""A task's live environment as TRL's ``environment_factory`` wants it (docs/methods.md §13).

TRL 1.16's GRPOTrainer runs multi-turn tool use itself when given ``environment_factory``: a
callable returning an object with ``reset(**row)`` and one public method per tool. TRL draws one
instance per completion from a pool, calls ``reset`` with the dataset row before generation,
and calls the tool methods with the parsed arguments of each tool call. ``environment_class``
builds such a class for one cluster: every tool of the cluster is a method that runs the call
against a LIVE sandboxed environment (``mcp_servers.environment.open_environment``) opened by
``reset`` for that completion alone, and records it as a ``ToolCallRecord`` exactly as the
rollout loop does (``mcp_servers.tool_calls.check_tool_call`` for schema checks, ``tool`` class for
tool errors, ``infra`` for sandbox/server faults). ``rewards.VerifierReward`` then scores the
completion from these records and the environment's final state, and closes it.

The MCP client is asyncio code bound to the loop that opened it, while TRL calls tools and
``reset`` synchronously from the training thread; all environment work therefore runs on one
private daemon event loop (``BackgroundLoop``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from trajsynth.mcp_servers.readback import with_readbacks
from trajsynth.mcp_servers.tool_calls import call_record, check_tool_call
from trajsynth.schemas import (
    CodeTestsPass,
    EnvSpec,
    EnvState,
    FinalState,
    FunctionCall,
    InfraError,
    JsonValue,
    ObsClass,
    SandboxKind,
    SandboxLimits,
    ToolCall,
    ToolCallRecord,
    ToolCluster,
    canonical_json,
    stable_hash,
)

__all__ = [
    "BackgroundLoop",
    "EnvOpener",
    "LiveEnvironment",
    "TaskEnvironment",
    "environment_class",
    "sandbox_opener",
    "step_anchors",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class LiveEnvironment(Protocol):
    """What a task environment needs of ``mcp_servers.environment.Environment``."""

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> Any: ...

    async def state(self) -> EnvState: ...

    async def run_check(self, check_id: str, source: str) -> bool: ...

    async def close(self) -> None: ...


EnvOpener = Callable[[ToolCluster, EnvSpec], Coroutine[Any, Any, LiveEnvironment]]
"""Opens a fresh, started environment of a cluster for one completion (an ``async def``: the
background loop runs coroutines only)."""


def sandbox_opener(
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    limits: SandboxLimits | None = None,
    tool_timeout_s: float = 20.0,
) -> EnvOpener:
    """An ``EnvOpener`` on ``open_environment``: one new sandbox per completion, seeded by the
    task's ``EnvSpec.seed``."""

    async def opener(cluster: ToolCluster, spec: EnvSpec) -> LiveEnvironment:
        from trajsynth.mcp_servers.environment import open_environment

        env = await open_environment(
            cluster,
            sandbox_kind=sandbox_kind,
            limits=limits,
            seed=spec.seed,
            tool_timeout_s=tool_timeout_s,
        )
        if env.state_readable and env._initial_state is not None:  # noqa: SLF001
            initial = env._initial_state.state_hash  # noqa: SLF001
            if spec.initial_state_id and initial != spec.initial_state_id:
                log.warning(
                    "%s: initial state %s differs from the task's %s (seed %d)",
                    cluster.cluster_id,
                    initial[:12],
                    spec.initial_state_id[:12],
                    spec.seed,
                )
        return env

    return opener


class BackgroundLoop:
    """One daemon thread running an asyncio loop; ``run`` submits a coroutine and waits."""

    _shared: ClassVar[BackgroundLoop | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="trajsynth-env-loop", daemon=True
        )
        self._thread.start()

    @classmethod
    def shared(cls) -> BackgroundLoop:
        with cls._lock:
            if cls._shared is None or not cls._shared._thread.is_alive():
                cls._shared = cls()
            return cls._shared

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def _as_spec(value: Any) -> EnvSpec:
    if isinstance(value, EnvSpec):
        return value
    if isinstance(value, str):
        value = json.loads(value)
    return EnvSpec.model_validate(value)


def _as_constraints(value: Any) -> list[Any]:
    """Constraints from a row: a list of models or dicts, or JSON text of either."""
    if isinstance(value, str):
        value = json.loads(value)
    out = []
    for item in value or []:
        out.append(json.loads(item) if isinstance(item, str) else item)
    return out


class TaskEnvironment:
    """Base of the per-cluster classes ``environment_class`` builds (one instance per
    completion at a time). Public methods other than ``reset`` would become tools, so the
    helpers here are private or properties."""

    cluster: ClassVar[ToolCluster]
    _opener: ClassVar[EnvOpener]

    def __init__(self) -> None:
        self._loop = BackgroundLoop.shared()
        self._env: LiveEnvironment | None = None
        self._spec: EnvSpec | None = None
        self._constraints: list[Any] = []
        self._row_id: str | None = None
        self._calls: list[ToolCallRecord] = []
        self._infra: str | None = None
        self._n_calls = 0

    # --- TRL's contract --------------------------------------------------------------------

    def reset(self, **row: Any) -> None:
        """Close the previous completion's environment and open a fresh one for this row.

        An open failure (sandbox or server fault) is remembered as ``infra``: the tools then
        answer with an error and the reward is ``None``.
        """
        self._close()
        self._calls, self._infra, self._n_calls = [], None, 0
        self._row_id = row.get("id")
        self._spec = _as_spec(row["env"])
        self._constraints = _as_constraints(row.get("constraints"))
        try:
            self._env = self._loop.run(type(self)._opener(self.cluster, self._spec))
        except InfraError as exc:
            log.warning("%s: could not open the environment: %s", self.cluster.cluster_id, exc)
            self._infra = f"open: {exc}"
        return None

    def _tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call for the policy; the text it sees comes back."""
        call = ToolCall(
            id=f"call_{self._n_calls}",
            function=FunctionCall(name=name, arguments=canonical_json(dict(arguments))),
        )
        self._n_calls += 1
        tools = {t.name: t for t in self.cluster.tools}
        checked = check_tool_call(call, tools, turn=0)
        if checked.failure is not None:
            self._calls.append(checked.failure)
            return checked.failure.observation
        assert checked.arguments is not None  # a checked call has a failure or its arguments
        t0 = time.perf_counter()
        try:
            if self._env is None:
                raise InfraError(self._infra or "the environment is not open")
            outcome = self._loop.run(self._env.call_tool(name, checked.arguments))
        except InfraError as exc:
            self._infra = self._infra or f"{name}: {exc}"
            outcome = exc
        record = call_record(call, checked.arguments, outcome, latency_s=time.perf_counter() - t0)
        self._calls.append(record)
        return record.observation

    # --- what the reward and the trainer read ----------------------------------------------

    @property
    def calls(self) -> list[ToolCallRecord]:
        return list(self._calls)

    @property
    def infra_error(self) -> str | None:
        return self._infra

    @property
    def constraints(self) -> list[Any]:
        return list(self._constraints)

    @property
    def row_id(self) -> str | None:
        return self._row_id

    @property
    def openai_tools(self) -> list[dict[str, JsonValue]]:
        return [t.to_openai() for t in self.cluster.tools]

    def _final_state(self) -> EnvState:
        """The state now, with the code checks of the constraints run (as the rollout loop
        does). Raises InfraError on a sandbox or server fault."""
        if self._env is None:
            raise InfraError(self._infra or "the environment is not open")
        env = self._env

        async def read() -> EnvState:
            finals = [
                FinalState.model_validate(c)
                for c in self._constraints
                if (c.get("kind") if isinstance(c, Mapping) else getattr(c, "kind", None))
                == "final_state"
            ]
            state = await with_readbacks(env, await env.state(), finals)
            checks = {}
            for c in self._constraints:
                kind = c.get("kind") if isinstance(c, Mapping) else getattr(c, "kind", None)
                if kind == "code_tests_pass":
                    check = c if isinstance(c, CodeTestsPass) else CodeTestsPass.model_validate(c)
                    checks[check.check_id] = await env.run_check(check.check_id, check.test_source)
            return state.model_copy(update={"checks": checks}) if checks else state

        return self._loop.run(read())

    def _close(self) -> None:
        env, self._env = self._env, None
        if env is None:
            return
        try:
            self._loop.run(env.close(), timeout=120)
        except (InfraError, OSError, TimeoutError) as exc:
            log.warning("%s: closing the environment failed: %s", self.cluster.cluster_id, exc)


def step_anchors(env: TaskEnvironment, turn_calls: Sequence[int]) -> list[str]:
    """Anchor key of the state each assistant turn acted from (docs/methods.md §10.1, §1.2).

    ``turn_calls[t]`` = how many tool calls turn t made (in order over ``calls``). The key
    hashes the trace of successful writes so far (the state's proxy) and the set of
    successful read observations so far, so two orders of the same reads share a key.
    """
    anchors: list[str] = []
    writes: list[list[Any]] = []
    reads: set[tuple[str, str, str]] = set()
    access = {t.name: t.access.value for t in env.cluster.tools}
    calls = iter(env.calls)
    for n in turn_calls:
        anchors.append(stable_hash([writes, sorted(reads)], length=16))
        for _ in range(n):
            call = next(calls, None)
            if call is None or call.obs_class == ObsClass.ERROR:
                continue
            args = canonical_json(call.arguments)
            if access.get(call.tool) == "write":
                writes.append([call.tool, args])
            else:
                reads.add((call.tool, args, stable_hash(call.observation, length=16)))
    return anchors


def _tool_method(name: str) -> Callable[..., str]:
    def method(self: TaskEnvironment, **arguments: Any) -> str:
        return self._tool(name, arguments)

    method.__name__ = name
    method.__qualname__ = name
    method.__doc__ = f"Call the {name!r} tool."
    return method


def environment_class(cluster: ToolCluster, opener: EnvOpener) -> type[TaskEnvironment]:
    """A ``TaskEnvironment`` subclass for ``cluster`` with one method per tool (TRL exposes
    public methods as tools); ``opener`` opens the live environment of each completion."""
    reserved = {"reset", "get_reward", "calls", "constraints", "row_id", "openai_tools"}
    namespace: dict[str, Any] = {"cluster": cluster, "_opener": staticmethod(opener)}
    for tool in cluster.tools:
        if (
            tool.name in reserved
            or tool.name.startswith("_")
            or hasattr(TaskEnvironment, tool.name)
        ):
            raise ValueError(f"cluster {cluster.cluster_id}: tool name {tool.name!r} is reserved")
        namespace[tool.name] = _tool_method(tool.name)
    name = "Env_" + "".join(ch if ch.isalnum() else "_" for ch in cluster.cluster_id)
    return type(name, (TaskEnvironment,), namespace)
