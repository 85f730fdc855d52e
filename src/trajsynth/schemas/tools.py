"""Tools, their dependency edges and the clusters they form (METHODS.md §2)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record

__all__ = [
    "Domain",
    "EdgeOrigin",
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
    """The fixed domain catalog of METHODS.md §2; the unit of domain entropy."""

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
    name: str
    description: str = ""
    input_schema: dict[str, JsonValue] = Field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, JsonValue] | None = None
    access: ToolAccess = ToolAccess.READ
    # Where the read/write tag came from (STYLE.md §3): the tool's MCP annotations
    # (readOnlyHint / destructiveHint), its name, or the conservative default (write).
    access_source: Literal["annotation", "name", "default"] | None = None

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


class ToolEdge(Record):
    """u -> v: an output field of ``source`` can feed parameter ``in_param`` of ``target``."""

    source: str
    target: str
    out_field: str
    in_param: str
    score: float = Field(ge=0.0, le=1.0)
    origin: EdgeOrigin = EdgeOrigin.INFERRED
    verified: bool = False


class ServerKind(StrEnum):
    BUNDLED = "bundled"
    STDIO = "stdio"
    HTTP = "http"


class ServerSpec(Record):
    """How to start (or reach) the MCP server that serves a cluster."""

    kind: ServerKind
    module: str | None = Field(default=None, description="python module of a bundled server")
    command: list[str] | None = Field(default=None, description="argv of an outside stdio server")
    url: str | None = Field(default=None, description="streamable HTTP endpoint")
    env: dict[str, str] = Field(default_factory=dict)


class ToolCluster(Record):
    """One service's tools that depend on each other, served by one MCP server."""

    cluster_id: str
    domain: Domain
    description: str = ""
    server: ServerSpec
    tools: list[ToolSpec]
    edges: list[ToolEdge] = Field(default_factory=list)
    # False for outside servers: constraints then come from the call trace and the answer.
    state_readable: bool = True
    seed: int = 0
    source: Literal["bundled", "outside", "entry_point"] = "bundled"

    def tool(self, name: str) -> ToolSpec:
        for spec in self.tools:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]
