"""Tool clusters: bundled MCP servers, the registry, dependency graphs, sandboxed environments.

Public names are imported lazily (PEP 562): ``trajsynth.mcp_servers.servers`` runs inside a
sandbox that has only the ``mcp`` SDK, so importing this package must pull in nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajsynth.mcp_servers.environment import Environment, ToolResult, open_environment
    from trajsynth.mcp_servers.graph import (
        communities,
        dependency_graph,
        draw_graph,
        entry_tools,
        infer_edges,
        split_cluster,
    )
    from trajsynth.mcp_servers.registry import (
        add_outside_cluster,
        cluster,
        cluster_names,
        get_cluster,
        list_clusters,
        register_cluster,
        registry_params,
        remove_outside_cluster,
    )
    from trajsynth.mcp_servers.tags import tag_tool

_LAZY: dict[str, str] = {
    "Environment": "trajsynth.mcp_servers.environment",
    "ToolResult": "trajsynth.mcp_servers.environment",
    "open_environment": "trajsynth.mcp_servers.environment",
    "communities": "trajsynth.mcp_servers.graph",
    "dependency_graph": "trajsynth.mcp_servers.graph",
    "draw_graph": "trajsynth.mcp_servers.graph",
    "entry_tools": "trajsynth.mcp_servers.graph",
    "infer_edges": "trajsynth.mcp_servers.graph",
    "split_cluster": "trajsynth.mcp_servers.graph",
    "add_outside_cluster": "trajsynth.mcp_servers.registry",
    "cluster": "trajsynth.mcp_servers.registry",
    "cluster_names": "trajsynth.mcp_servers.registry",
    "get_cluster": "trajsynth.mcp_servers.registry",
    "list_clusters": "trajsynth.mcp_servers.registry",
    "register_cluster": "trajsynth.mcp_servers.registry",
    "registry_params": "trajsynth.mcp_servers.registry",
    "remove_outside_cluster": "trajsynth.mcp_servers.registry",
    "tag_tool": "trajsynth.mcp_servers.tags",
}

__all__ = [
    "Environment",
    "ToolResult",
    "add_outside_cluster",
    "cluster",
    "cluster_names",
    "communities",
    "dependency_graph",
    "draw_graph",
    "entry_tools",
    "get_cluster",
    "infer_edges",
    "list_clusters",
    "open_environment",
    "register_cluster",
    "registry_params",
    "remove_outside_cluster",
    "split_cluster",
    "tag_tool",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
