"""Tools, their dependency edges and the clusters they form (docs/methods.md §2)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record

__all__ = [
    "BundledCluster",
    "CopiedFile",
    "DeclaredEdge",
    "Domain",
    "DomainFacts",
    "EdgeOrigin",
    "ProbeCall",
    "ResetMode",
    "ServerKind",
    "ServerSpec",
    "ToolAccess",
    "ToolCluster",
    "ToolEdge",
    "ToolSpec",
]


class ToolAccess(StrEnum):
    READ = "read"
    WRITE = "write"


class Domain(StrEnum):
    """The fixed domain catalog of docs/methods.md §2; the unit of domain entropy."""

    RETAIL = "retail"
    TRAVEL = "travel"
    FINANCE = "finance"
    PRODUCTIVITY = "productivity"
    DEVTOOLS = "devtools"
    DATA_SQL = "data_sql"
    FILESYSTEM = "filesystem"
    CODE = "code"
    OTHER = "other"


class ToolSpec(Record):
    name: str = Field(description="the tool's name")
    description: str = Field(
        default="", description="the tool's description as the server gives it"
    )
    input_schema: dict[str, JsonValue] = Field(
        default_factory=lambda: {"type": "object"}, description="JSON schema of the arguments"
    )
    output_schema: dict[str, JsonValue] | None = Field(
        default=None, description="JSON schema of the result, where declared"
    )
    access: ToolAccess = Field(
        default=ToolAccess.READ, description="read or write (whether a call changes state)"
    )
    # Where the read/write tag came from (docs/style.md §3): the tool's MCP annotations
    # (readOnlyHint / destructiveHint), a probe call in a throw-away environment (outside
    # servers), its name, or the conservative default (write).
    access_source: Literal["annotation", "probe", "name", "default"] | None = None
    access_evidence: str | None = Field(default=None, description="why the tag is what it is")
    idempotent: bool | None = Field(default=None, description="MCP idempotentHint, if given")
    # outside servers: parameters left out of the schema the model sees, with the value the
    # environment adds to every call (--arg, --hide-param; mcp_servers.hidden)
    injected: dict[str, JsonValue] = Field(default_factory=dict)

    def parameter_schemas(self) -> dict[str, dict[str, JsonValue]]:
        """Each parameter's schema by name, as the input schema's ``properties`` gives it (a
        parameter whose schema is not an object, such as JSON Schema's ``true``, left out)."""
        props = self.input_schema.get("properties")
        if not isinstance(props, dict):
            return {}
        return {name: sub for name, sub in props.items() if isinstance(sub, dict)}

    def required_parameters(self) -> list[str]:
        """The names the input schema lists as required (none when it lists no names)."""
        names = self.input_schema.get("required")
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    def to_openai(self) -> dict[str, JsonValue]:
        """The tool as an OpenAI ``tools`` entry (what chat templates take as ``tools=``)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }


class EdgeOrigin(StrEnum):
    DECLARED = "declared"
    INFERRED = "inferred"
    VALUE_FLOW = "value_flow"  # a probe saw a returned value accepted by the target's param
    LLM = "llm"  # the LLM read it into the descriptions, and a probe confirmed it


class EdgeProposal(Record):
    """An edge the LLM reads into the tools' descriptions: ``out_field`` of what ``source``
    returns feeds ``in_param`` of ``target``. Kept only when a probe confirms it
    (``mcp_servers.discovery``)."""

    source: str
    out_field: str
    target: str
    in_param: str
    why: str = ""


class ToolEdge(Record):
    """u -> v: an output field of ``source`` can feed parameter ``in_param`` of ``target``."""

    source: str = Field(description="the tool whose output feeds")
    target: str = Field(description="the tool whose parameter is fed")
    out_field: str = Field(description="the output field of the source")
    in_param: str = Field(description="the parameter of the target")
    score: float = Field(ge=0.0, le=1.0, description="how sure the inference is (0-1)")
    origin: EdgeOrigin = Field(default=EdgeOrigin.INFERRED, description="inferred or declared")
    verified: bool = Field(default=False, description="seen to work in a gold run")
    evidence: str | None = Field(default=None, description="the probe calls that showed it")


class ServerKind(StrEnum):
    BUNDLED = "bundled"
    STDIO = "stdio"
    HTTP = "http"


class ResetMode(StrEnum):
    """How an outside cluster's state is reset between episodes."""

    FRESH = "fresh"  # a new server process per episode
    SNAPSHOT = "snapshot"  # state is files copied into the work dir; restored from snapshots
    REPLAY = "replay"  # restart and replay the successful writes


class CopiedFile(Record):
    """A file copied into the sandbox work dir for every episode (``--copy SRC``)."""

    source: str
    dest: str
    sha256: str


class ProbeCall(Record):
    """A read-only call whose result is part of an outside cluster's end state (§2):
    the same probes run after the gold run and after a rollout, and their results compared.

    A probe reads a tool (``tool`` with ``arguments``) or, with ``resource`` set, a static MCP
    resource by its URI (a memo no tool reads); a spec without ``resource`` is a tool probe."""

    tool: str = ""
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    resource: str | None = Field(default=None, description="URI of a static MCP resource")

    @property
    def label(self) -> str:
        """What the probe reads, for table keys and messages: the tool, or the resource URI."""
        return self.resource or self.tool


class ServerSpec(Record):
    """How to start (or reach) the MCP server that serves a cluster."""

    kind: ServerKind
    module: str | None = Field(default=None, description="python module of a bundled server")
    command: list[str] | None = Field(default=None, description="argv of an outside stdio server")
    url: str | None = Field(default=None, description="streamable HTTP endpoint")
    env: dict[str, str] = Field(default_factory=dict)
    # Outside servers. Names of environment variables the server gets; their
    # values are read from the launching process's environment, never stored.
    env_keys: list[str] = Field(default_factory=list)
    mounts: list[str] = Field(default_factory=list, description="host paths mounted read-only")
    on_host: bool = Field(default=False, description="runs on the host, state not isolated")
    reset: ResetMode = ResetMode.FRESH
    copies: list[CopiedFile] = Field(default_factory=list, description="--copy, by hash")
    args: dict[str, JsonValue] = Field(default_factory=dict, description="--arg name=value")
    hidden_tools: list[str] = Field(
        default_factory=list, description="--hide and harness controls: never shown or planned"
    )
    hidden_params: list[str] = Field(
        default_factory=list, description="--hide-param: left out of what the model sees"
    )


class DomainFacts(Record):
    """What a cluster tells the planner about its users, so agents read it from the cluster."""

    persona: str = Field(description="who the user is, one sentence (a draft without one)")


class DeclaredEdge(Record):
    """A dependency edge a bundled cluster states outright (added with score 1, §2 step 3)."""

    source: str
    target: str
    out_field: str
    in_param: str


class Precondition(Record):
    """What a tool accepts for one parameter in a given state, stated by a bundled cluster: the
    value is ``column`` of some row of ``table`` whose columns in ``where`` hold one of the
    listed values, whose columns in ``same`` equal the call's other parameters, and whose
    ``column`` matches ``pattern`` (``place_order.user_id``: a ``cart_items.user_id``, since an
    empty cart cannot be ordered); with ``absent``, in no such row (``book_flight.flight_id``:
    no confirmed booking of the same user). The path binder draws values that satisfy it and
    checks the values the path's references will carry against it; the tool still decides."""

    tool: str
    param: str
    table: str
    column: str
    where: dict[str, list[JsonValue]] = Field(default_factory=dict)
    same: dict[str, str] = Field(
        default_factory=dict, description="row column -> another parameter of the same call"
    )
    pattern: str | None = Field(default=None, description="regex the value must match (search)")
    absent: bool = Field(
        default=False, description="the value must be in no such row (a flight not yet booked)"
    )


class BundledCluster(Record):
    """A bundled cluster's declaration: ``servers/<name>/cluster.py`` holds one, and its
    ``trajsynth.clusters`` entry point names it. The registry builds the ``ToolCluster`` from
    it (tools read from the running server, edges inferred plus ``declared_edges``)."""

    cluster_id: str
    domain: Domain
    description: str
    module: str = Field(
        description="the folder's package: `python -m` runs it; its `.server` holds the server"
    )
    declared_edges: list[DeclaredEdge] = Field(default_factory=list)
    preconditions: list[Precondition] = Field(default_factory=list)
    facts: DomainFacts

    @property
    def server_module(self) -> str:
        """The module with the ``MCPServer`` (``server``) and the state store (``STORE``)."""
        return f"{self.module}.server"


class ToolCluster(Record):
    """One service's tools that depend on each other, served by one MCP server."""

    cluster_id: str = Field(description="the cluster's name")
    domain: Domain = Field(description="the service domain (shop, calendar, ...)")
    description: str = Field(default="", description="what the cluster's service does")
    server: ServerSpec = Field(description="how the MCP server is started")
    tools: list[ToolSpec]
    edges: list[ToolEdge] = Field(default_factory=list)
    # False for outside servers: constraints then come from the call trace and the answer.
    state_readable: bool = Field(
        default=True, description="whether the end state can be read for verification"
    )
    seed: int = 0
    source: Literal["bundled", "outside", "entry_point"] = Field(
        default="bundled", description="bundled, outside or entry_point (where it came from)"
    )
    # Outside clusters: read-only probe calls that read the end state, argument values that
    # probing saw accepted (tool -> param -> values), and warnings shown at add and in show.
    probes: list[ProbeCall] = Field(default_factory=list)
    arg_values: dict[str, dict[str, list[JsonValue]]] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    # Bundled clusters declare them; None: the words fall back to the domain's defaults.
    facts: DomainFacts | None = None
    # Bundled clusters state them: what a tool's parameter accepts in a given state.
    preconditions: list[Precondition] = Field(default_factory=list)

    def tool(self, name: str) -> ToolSpec:
        for spec in self.tools:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]
