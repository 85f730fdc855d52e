"""The cluster registry: entry points, decorated factories, outside servers.

Where a cluster comes from (docs/design.md §1, docs/methods.md §2):

- **entry points**: group ``trajsynth.clusters`` is the one list of installed clusters. An
  entry point loads a ``BundledCluster`` (a folder ``mcp_servers/servers/<name>/``: its
  ``cluster.py`` declares it, its ``server`` module's tools are read in-process with
  ``await server.list_tools()``), a ``ToolCluster``, a factory returning one, or a module
  whose import registers clusters with ``@cluster``. The four bundled clusters are
  trajsynth's own entry points (pyproject.toml); adding one is a folder and one line there.
- **decorated**: ``@cluster("name")`` on a factory returning a ``ToolCluster`` (style.md §1: the
  name and the arguments it was registered with are kept, see ``registry_params``).
- **outside**: MCP servers added with ``add_outside_cluster`` (``synth clusters add``), saved
  as ``<clusters_dir>/<name>.json``.

Every cluster carries its dependency edges (``graph.infer_edges``) and read/write tags.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import logging
import os
import re
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from trajsynth.mcp_servers.client import (
    ServerConnection,
    http_transport,
    stdio_transport,
    with_timeout,
)
from trajsynth.mcp_servers.discovery import Discovery, Proposer, discover
from trajsynth.mcp_servers.graph import Embedder, infer_edges, split_cluster
from trajsynth.mcp_servers.hidden import visible_tools
from trajsynth.mcp_servers.launch import (
    copied_file,
    host_folder_copies,
    server_mounts,
    state_outside_warnings,
)
from trajsynth.mcp_servers.tags import tag_tool
from trajsynth.schemas import (
    BundledCluster,
    Domain,
    InputError,
    MCPServerError,
    ProbeCall,
    ResetMode,
    SandboxKind,
    ServerKind,
    ServerSpec,
    ToolCluster,
    ToolSpec,
)

__all__ = [
    "DEFAULT_CLUSTERS_DIR",
    "ENTRY_POINT_GROUP",
    "ClusterFactory",
    "RegisteredCluster",
    "add_outside_cluster",
    "bundled_cluster",
    "cluster",
    "cluster_names",
    "get_cluster",
    "list_clusters",
    "read_server_tools",
    "register_cluster",
    "registry_params",
    "remove_outside_cluster",
    "tool_spec",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "trajsynth.clusters"
_OWN_DIST = "trajsynth"  # entry points this distribution declares are its bundled clusters
DEFAULT_CLUSTERS_DIR = Path("data/clusters")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

T = TypeVar("T")
ClusterFactory = Callable[..., ToolCluster]
F = TypeVar("F", bound=ClusterFactory)


@dataclass(frozen=True)
class RegisteredCluster:
    """A registered factory, how it got here, and the arguments it is called with."""

    name: str
    factory: ClusterFactory
    source: Literal["bundled", "decorator", "entry_point"]
    params: Mapping[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, RegisteredCluster] = {}
_BUILT: dict[str, ToolCluster] = {}
_DISCOVERED = False


def register_cluster(
    name: str,
    factory: ClusterFactory,
    *,
    source: Literal["bundled", "decorator", "entry_point"] = "decorator",
    params: Mapping[str, Any] | None = None,
) -> None:
    """Register ``factory(**params)`` under ``name`` (a later registration replaces it)."""
    if not _NAME.match(name):
        raise InputError(f"cluster name {name!r}: use lower-case letters, digits, '_' or '-'")
    if name in _REGISTRY and _REGISTRY[name].factory is not factory:
        log.debug("cluster %s re-registered (%s)", name, source)
    _REGISTRY[name] = RegisteredCluster(name, factory, source, dict(params or {}))
    _BUILT.pop(name, None)


def cluster(name: str, **params: Any) -> Callable[[F], F]:
    """Register a cluster factory: ``@cluster("bank", seed=3)`` on ``def bank(seed)``.

    The factory is called with ``params`` when the cluster is first needed; the name and the
    params are kept (``registry_params``) so a run manifest can record them.
    """

    def decorate(factory: F) -> F:
        register_cluster(name, factory, source="decorator", params=params)
        return factory

    return decorate


def registry_params(name: str) -> dict[str, Any]:
    """The arguments a registered cluster's factory is called with (for run manifests)."""
    _discover()
    if name not in _REGISTRY:
        raise InputError(f"unknown registered cluster {name!r}")
    entry = _REGISTRY[name]
    return {"name": name, "source": entry.source, **dict(entry.params)}


# --------------------------------------------------------------------------- MCP -> ToolSpec


def tool_spec(tool: Any) -> ToolSpec:
    """An MCP ``Tool`` (SDK object or its JSON dict) as a ``ToolSpec`` with its read/write tag."""
    if isinstance(tool, Mapping):
        name = str(tool["name"])
        description = tool.get("description")
        input_schema = tool.get("inputSchema", tool.get("input_schema"))
        output_schema = tool.get("outputSchema", tool.get("output_schema"))
        annotations = tool.get("annotations")
    else:
        name = tool.name
        description = tool.description
        input_schema = tool.input_schema
        output_schema = tool.output_schema
        annotations = tool.annotations
    access, source = tag_tool(name, annotations)
    idempotent = _idempotent(annotations)
    return ToolSpec(
        name=name,
        description=description or "",
        input_schema=dict(input_schema or {"type": "object"}),
        output_schema=dict(output_schema) if output_schema else None,
        access=access,
        access_source=source,
        access_evidence=_annotation_text(annotations) if source == "annotation" else None,
        idempotent=idempotent,
    )


def _hints(annotations: Any) -> dict[str, Any]:
    if annotations is None:
        return {}
    if isinstance(annotations, Mapping):
        return dict(annotations)
    return annotations.model_dump(by_alias=True, exclude_none=True)


def _idempotent(annotations: Any) -> bool | None:
    hints = _hints(annotations)
    value = hints.get("idempotentHint", hints.get("idempotent_hint"))
    return value if isinstance(value, bool) else None


def _annotation_text(annotations: Any) -> str:
    hints = _hints(annotations)
    keys = (
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "read_only_hint",
        "destructive_hint",
        "idempotent_hint",
    )
    shown = {k: hints[k] for k in keys if k in hints}
    return "MCP annotations " + ", ".join(f"{k}={v}" for k, v in shown.items())


def _run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, also when an event loop is running."""

    async def main() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajsynth-registry") as pool:
        return pool.submit(asyncio.run, main()).result()


# --------------------------------------------------------------------------- bundled


def bundled_cluster(spec: BundledCluster, *, embed: Embedder | None = None) -> ToolCluster:
    """The cluster a folder declares: ``spec`` plus the tools its ``MCPServer`` lists."""
    try:
        module = importlib.import_module(spec.server_module)
    except ModuleNotFoundError as exc:
        raise InputError(f"bundled cluster {spec.cluster_id!r}: no module {exc.name}") from exc
    server = getattr(module, "server", None)
    if server is None:
        raise InputError(f"{spec.server_module}: a bundled cluster's server module needs `server`")
    tools = [tool_spec(t) for t in _run_sync(server.list_tools)]
    declared = [e.model_dump() for e in spec.declared_edges]
    return ToolCluster(
        cluster_id=spec.cluster_id,
        domain=spec.domain,
        description=spec.description,
        server=ServerSpec(kind=ServerKind.BUNDLED, module=spec.module),
        tools=tools,
        edges=infer_edges(tools, declared, embed=embed),
        state_readable=True,
        source="bundled",
        facts=spec.facts,
        preconditions=list(spec.preconditions),
    )


def _entry_point_factory(ep: importlib.metadata.EntryPoint) -> ClusterFactory:
    def build() -> ToolCluster:
        obj = ep.load()
        if isinstance(obj, BundledCluster):
            if obj.cluster_id != ep.name:
                raise InputError(
                    f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}): it "
                    f"declares cluster {obj.cluster_id!r}; name the entry point the same"
                )
            return bundled_cluster(obj)
        built = obj() if callable(obj) and not isinstance(obj, ToolCluster) else obj
        if not isinstance(built, ToolCluster):
            raise InputError(
                f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}): expected a "
                f"BundledCluster, a ToolCluster or a factory returning one, got "
                f"{type(built).__name__}"
            )
        if not built.edges:
            built = built.model_copy(update={"edges": infer_edges(built.tools)})
        return built.model_copy(update={"source": "entry_point"})

    return build


def _source(ep: importlib.metadata.EntryPoint) -> Literal["bundled", "entry_point"]:
    dist = getattr(ep, "dist", None)
    return "bundled" if dist is not None and dist.name == _OWN_DIST else "entry_point"


def _discover() -> None:
    """Register every entry point of the group (once per process); none is loaded yet."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ":" not in ep.value:  # a module: importing it registers its @cluster factories
            try:
                importlib.import_module(ep.value)
            except ImportError as exc:
                log.warning("entry point %s (%s) failed to import: %s", ep.name, ep.value, exc)
            continue
        if ep.name in _REGISTRY:
            log.warning(
                "entry point %s (%s) replaces the %s cluster of that name",
                ep.name,
                ep.value,
                _REGISTRY[ep.name].source,
            )
        register_cluster(ep.name, _entry_point_factory(ep), source=_source(ep))


def _build(name: str) -> ToolCluster:
    if name not in _BUILT:
        entry = _REGISTRY[name]
        built = entry.factory(**entry.params)
        if not isinstance(built, ToolCluster):
            raise InputError(f"cluster factory {name!r} returned {type(built).__name__}")
        _BUILT[name] = built
    return _BUILT[name]


# --------------------------------------------------------------------------- outside


def _outside_path(clusters_dir: Path, name: str) -> Path:
    return clusters_dir / f"{name}.json"


def _load_outside(clusters_dir: Path) -> dict[str, ToolCluster]:
    found: dict[str, ToolCluster] = {}
    if not clusters_dir.is_dir():
        return found
    for path in sorted(clusters_dir.glob("*.json")):
        try:
            loaded = ToolCluster.model_validate_json(path.read_text(encoding="utf-8"))
        except (ValidationError, ValueError, OSError) as exc:
            raise InputError(f"{path}: not a valid saved cluster: {exc}") from exc
        found[loaded.cluster_id] = loaded
    return found


def cluster_names(*, clusters_dir: Path | None = None) -> list[str]:
    """Names of every known cluster (registered first, then outside), without building any."""
    _discover()
    outside = _load_outside(clusters_dir or DEFAULT_CLUSTERS_DIR)
    return sorted(set(_REGISTRY) | set(outside))


def get_cluster(name: str, *, clusters_dir: Path | None = None) -> ToolCluster:
    """The cluster ``name``; InputError naming the known clusters when there is none."""
    _discover()
    if name in _REGISTRY:
        return _build(name)
    outside = _load_outside(clusters_dir or DEFAULT_CLUSTERS_DIR)
    if name in outside:
        return outside[name]
    known = ", ".join(sorted(set(_REGISTRY) | set(outside))) or "none"
    hint = ""
    if not any(e.source == "bundled" for e in _REGISTRY.values()):
        # the bundled clusters exist only as entry points: an install older than them has none
        hint = (
            f" (no bundled cluster is installed: `pip install -e .` registers the "
            f"{ENTRY_POINT_GROUP} entry points)"
        )
    raise InputError(f"unknown cluster {name!r}; known clusters: {known}{hint}")


def list_clusters(*, clusters_dir: Path | None = None) -> list[ToolCluster]:
    """Every cluster, sorted by id: entry points (bundled ones too), decorated, then outside."""
    _discover()
    clusters = {name: _build(name) for name in sorted(_REGISTRY)}
    for name, found in _load_outside(clusters_dir or DEFAULT_CLUSTERS_DIR).items():
        if name in clusters:
            log.warning("saved outside cluster %s is shadowed by a registered one", name)
            continue
        clusters[name] = found
    return [clusters[k] for k in sorted(clusters)]


async def read_server_tools(
    *,
    command: Sequence[str] | None = None,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    label: str = "server",
) -> tuple[list[Any], str]:
    """Start (or reach) an MCP server, read ``tools/list``; return the tools and a description.

    MCPServerError names the command and the server's stderr when it does not come up.
    """
    transport = stdio_transport(command, env) if command else http_transport(str(url))
    conn = ServerConnection(transport, label=label, start_timeout_s=timeout_s)
    await conn.open()
    try:
        tools = await with_timeout(timeout_s, f"{label}: tools/list", conn.list_tools())
        info = conn.server_info
        description = (conn.instructions or "").strip()
        if not description and info is not None:
            description = f"MCP server {info.name} {info.version}".strip()
    finally:
        await conn.close()
    return tools, description


def add_outside_cluster(
    name: str,
    command: Sequence[str] | None = None,
    url: str | None = None,
    *,
    clusters_dir: Path = DEFAULT_CLUSTERS_DIR,
    domain: Domain = Domain.OTHER,
    description: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    embed: Embedder | None = None,
    mounts: Sequence[str] = (),
    on_host: bool = False,
    reset: ResetMode = ResetMode.FRESH,
    copies: Sequence[str] = (),
    args: Mapping[str, Any] | None = None,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    probe: bool = True,
    propose: Proposer | None = None,
    hide: Sequence[str] = (),
    hide_params: Sequence[str] = (),
    copy_folders: bool = True,
) -> list[ToolCluster]:
    """Import an outside MCP server as a cluster and save it under ``clusters_dir``.

    The server is started exactly as a run starts it (``open_environment``: the same command,
    sandbox, mounts, ``--copy`` files and environment), so a server that would fail in a run
    fails here with the same message. Its ``tools/list`` gives the tools; discovery probes them
    in that throw-away environment (``mcp_servers.discovery``: tags with their source and
    evidence, value-flow edges, end-state probes, accepted argument values).
    ``env`` values are used for this start only: the cluster keeps the names, and a run reads
    the values from its own environment. Returns the saved cluster, or its parts
    (``<name>.1``, ...) when a connected component has more than 40 tools (§2 step 5).
    ``propose``: edges read from the descriptions (``planning.edge_proposals``, given by the
    CLI layer), called inside discovery's event loop; each is kept only when a probe confirms
    it, and the rejected ones are logged with the reason.
    """
    if (command is None) == (url is None):
        raise InputError("give exactly one of a stdio command (after --) or --url")
    if not _NAME.match(name):
        raise InputError(f"cluster name {name!r}: use lower-case letters, digits, '_' or '-'")
    _discover()
    if name in _REGISTRY:
        raise InputError(
            f"cluster name {name!r} is taken by a {_REGISTRY[name].source} cluster; choose another"
        )
    if command is not None and not list(command):
        raise InputError("empty server command after --")
    if url is not None and not re.match(r"^https?://", url):
        raise InputError(f"--url {url!r}: expected an http:// or https:// URL")
    bad = [k for k in (env or {}) if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
    if bad:
        raise InputError(f"--env {bad[0]!r}: not an environment variable name")
    if command is not None and copy_folders and not on_host:
        command, found_copies, repo_args = host_folder_copies(list(command), mounts)
        copies = [*copies, *found_copies]
        args = {**repo_args, **dict(args or {})}
        for item in found_copies:
            log.warning(
                "cluster %s: host folder %s is copied into the sandbox work dir (the server "
                "sees %s; your files are never touched; --no-copy-folders to turn it off)",
                name, *item.split(":", 1),
            )  # fmt: skip
    if copies and reset is ResetMode.FRESH:
        reset = ResetMode.SNAPSHOT  # copied files are the state: restore them between branches

    what = " ".join(command) if command else str(url)
    server = ServerSpec(
        kind=ServerKind.STDIO if command is not None else ServerKind.HTTP,
        command=list(command) if command is not None else None,
        url=url,
        env_keys=sorted(env or {}),
        mounts=[str(Path(m).expanduser().absolute()) for m in mounts],
        on_host=on_host,
        reset=reset,
        copies=[copied_file(*_copy_parts(c)) for c in copies],
        args=dict(args or {}),
        hidden_tools=sorted(hide),
        hidden_params=sorted(hide_params),
    )
    found_mounts = server_mounts(server.command or [], server.mounts) if command else []
    warnings = state_outside_warnings(server, found_mounts)
    for warning in warnings:
        log.warning("cluster %s: %s", name, warning)
    provisional = ToolCluster(
        cluster_id=name,
        domain=domain,
        server=server,
        tools=[],
        state_readable=False,
        source="outside",
    )
    environ = {**os.environ, **dict(env or {})}
    try:
        raw_tools, server_description, found = _run_sync(
            lambda: _start_and_discover(
                provisional, sandbox_kind, timeout_s, environ, probe, f"`{what}`", propose
            )
        )
    except MCPServerError as exc:
        raise InputError(f"cluster {name!r}: {exc}") from exc
    if not raw_tools:
        raise InputError(f"cluster {name!r}: `{what}` lists no tools")
    shown, hidden = _shown(server, [tool_spec(t) for t in raw_tools])
    tools = found.tools if found is not None else shown
    unusable = unusable_tools(raw_tools, found)
    for tool, why in unusable.items():
        log.warning("cluster %s: tool %s is never planned or shown: %s", name, tool, why)
    if unusable:
        hidden = [*hidden, *unusable]
        tools = [t for t in tools if t.name not in unusable]
        if found is not None:
            found.edges = [
                e for e in found.edges if e.source not in unusable and e.target not in unusable
            ]
            found.probes = [p for p in found.probes if p.tool not in unusable]
    if hidden:
        server = server.model_copy(update={"hidden_tools": sorted(set(hidden))})
        log.info("cluster %s: hidden from the model and the planner: %s", name, ", ".join(hidden))
    flow = found.edges if found is not None else []
    # An edge guessed from names and schemas is kept only when nothing could be probed: after
    # probing, the value-flow edges are the confirmed ones, and a guess no probe confirmed
    # (server-memory: read_graph's `entities[]` fed to create_entities) sent every gold run
    # that followed it into an empty list.
    inferred = [] if found is not None else infer_edges(tools, embed=embed)
    if found is not None:
        warnings = [*warnings, *probe_warnings(found, tools)]
        for warning in warnings[len(state_outside_warnings(server, found_mounts)) :]:
            log.warning("cluster %s: %s", name, warning)
    whole = ToolCluster(
        cluster_id=name,
        domain=domain,
        description=description if description is not None else server_description,
        server=server,
        tools=tools,
        edges=[*flow, *inferred],
        state_readable=bool(found and found.probes),
        source="outside",
        probes=found.probes if found is not None else [],
        arg_values=found.arg_values if found is not None else {},
        warnings=warnings,
    )
    parts = split_cluster(whole)
    clusters_dir.mkdir(parents=True, exist_ok=True)
    remove_outside_cluster(name, clusters_dir=clusters_dir, missing_ok=True)
    for part in parts:
        _write_atomic(_outside_path(clusters_dir, part.cluster_id), part.model_dump_json(indent=2))
    log.info(
        "added cluster %s: %d tools, %d edges (%d by value flow), %d probes, saved in %s",
        name,
        len(tools),
        len(whole.edges),
        len(flow),
        len(whole.probes),
        clusters_dir,
    )
    return parts


def probe_warnings(found: Discovery, tools: Sequence[ToolSpec]) -> list[str]:
    """What to do when discovery could probe nothing: without an end-state probe or an edge
    no task can be checked by its end state. Says why (the server's own stderr) and which
    flags fix the usual causes (required ids, a host folder the server cannot write)."""
    if found.probes or found.edges:
        return []
    needed = sorted(
        {
            r
            for t in tools
            for r in t.required_parameters()
            if re.search(r"(^|_)(id|ids|key|path|repo\w*)$|Id$", r)
        }
    )
    out = [
        f"discovery could probe nothing: {len(tools)} tools, 0 edges, 0 end-state probes; "
        "every probe call failed (the tags' evidence in `synth clusters show` quotes them)"
    ]
    stderr = [
        n.removeprefix("server stderr: ") for n in found.notes if n.startswith("server stderr: ")
    ]
    if stderr and stderr[-1].strip():
        out.append("the server said: " + " ".join(stderr[-1].split())[-400:])
    if needed:
        out.append(
            "the tools require " + ", ".join(needed[:6]) + ": give values from the server's "
            "own data with " + " ".join(f"--arg {n}=VALUE" for n in needed[:3])
        )
    return out


def unusable_tools(raw_tools: Sequence[Any], found: Discovery | None) -> dict[str, str]:
    """name -> why, for the tools no call of a run can make succeed: one the server runs only
    as an MCP task (``execution.taskSupport: required``; this client calls tools plainly),
    and one that reaches outside the sandbox (``openWorldHint``) whose every probe failed
    (the sandbox has no network: server-everything's ``gzip-file-as-resource`` fetches a
    URL). Such a tool is hidden as a harness control is: drawn into no path, shown to no
    model."""
    out: dict[str, str] = {}
    failed = found.failed if found is not None else {}
    for raw in raw_tools:
        if isinstance(raw, Mapping):
            name, execution = str(raw["name"]), raw.get("execution")
        else:
            name, execution = raw.name, getattr(raw, "execution", None)
        if isinstance(execution, Mapping):
            task = execution.get("taskSupport", execution.get("task_support"))
        else:
            task = getattr(execution, "task_support", None) or getattr(
                execution, "taskSupport", None
            )
        hints = _hints(raw.get("annotations") if isinstance(raw, Mapping) else raw.annotations)
        open_world = hints.get("openWorldHint", hints.get("open_world_hint"))
        if task == "required":
            out[name] = "the server runs it only as an MCP task (taskSupport: required)"
        elif open_world is True and name in failed:
            out[name] = (
                "it reaches outside the sandbox (openWorldHint) and every probe failed "
                f"({failed[name] or 'no answer'}); the sandbox has no network"
            )
    return out


def _shown(server: ServerSpec, specs: list[ToolSpec]) -> tuple[list[ToolSpec], list[str]]:
    return visible_tools(
        specs, hide=server.hidden_tools, hide_params=server.hidden_params, fixed=server.args
    )


def _copy_parts(spec: str) -> tuple[str, str | None]:
    """``SRC`` or ``SRC:DEST`` (DEST relative to the sandbox work dir)."""
    src, sep, dest = spec.partition(":")
    if sep and (not dest or dest.startswith("/") or ".." in Path(dest).parts):
        raise InputError(f"--copy {spec!r}: DEST must be a relative path in the work dir")
    return src, dest or None


async def _start_and_discover(
    cluster: ToolCluster,
    sandbox_kind: SandboxKind,
    timeout_s: float,
    environ: Mapping[str, str],
    probe: bool,
    label: str,
    propose: Proposer | None = None,
) -> tuple[list[Any], str, Discovery | None]:
    from trajsynth.mcp_servers.environment import open_environment

    async with open_environment(
        cluster,
        sandbox_kind=sandbox_kind,
        start_timeout_s=timeout_s,
        tool_timeout_s=timeout_s,
        environ=environ,
    ) as env:
        tools = await with_timeout(timeout_s, f"{label}: tools/list", env.list_tools())
        info, instructions = env.server_info
        description = (instructions or "").strip()
        if not description and info is not None:
            description = f"MCP server {info.name} {info.version}".strip()
        if not probe or not tools:
            return tools, description, None
        specs = _shown(cluster.server, [tool_spec(t) for t in tools])[0]
        # the tools' tags decide which calls the environment records as writes
        env.cluster = env.cluster.model_copy(update={"tools": specs})
        found = await discover(env, specs, fixed=cluster.server.args, propose=propose)
        if not found.probes and not found.edges:
            found.notes.append(f"server stderr: {env.stderr_tail().strip()[-600:]}")
    for note in found.notes:
        log.info("cluster %s: %s", cluster.cluster_id, note)
    if found.probes:
        found.probes = await _stable_across_environments(
            cluster.model_copy(update={"tools": found.tools}),
            found.probes,
            sandbox_kind,
            timeout_s,
            environ,
        )
    return tools, description, found


async def _stable_across_environments(
    cluster: ToolCluster,
    probes: list[ProbeCall],
    sandbox_kind: SandboxKind,
    timeout_s: float,
    environ: Mapping[str, str],
) -> list[ProbeCall]:
    """The probes whose answers agree in two fresh environments started a clock tick apart: a
    result with a timestamp, a random id or a process id in it cannot tell two end states
    apart."""
    from trajsynth.mcp_servers.environment import open_environment

    async def answer(delay_s: float) -> dict[str, Any]:
        # The second environment starts a tick after the first, while the first still reads:
        # a start time in an answer differs all the same, and `clusters add` waits one server
        # start less.
        await asyncio.sleep(delay_s)
        async with open_environment(
            cluster,
            sandbox_kind=sandbox_kind,
            start_timeout_s=timeout_s,
            tool_timeout_s=timeout_s,
            environ=environ,
        ) as env:
            return (await env.read_probes(probes)).tables

    answers = await asyncio.gather(answer(0.0), answer(1.1))
    keep = []
    for i, probe in enumerate(probes):
        key = f"probe{i}:{probe.label}"
        if answers[0].get(key) == answers[1].get(key):
            keep.append(probe)
        else:
            log.info("probe %s dropped: its answer differs between two fresh environments", key)
    return keep


def remove_outside_cluster(
    name: str, *, clusters_dir: Path = DEFAULT_CLUSTERS_DIR, missing_ok: bool = False
) -> list[Path]:
    """Delete a saved outside cluster (and its split parts); returns the files removed."""
    paths = [_outside_path(clusters_dir, name), *clusters_dir.glob(f"{name}.*.json")]
    removed = [p for p in paths if p.is_file()]
    if not removed and not missing_ok:
        raise InputError(f"no saved outside cluster {name!r} in {clusters_dir}")
    for path in removed:
        path.unlink()
    return removed


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
