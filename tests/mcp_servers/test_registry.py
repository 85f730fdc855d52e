"""The cluster registry: bundled clusters, @cluster, entry points, outside servers for real."""

from __future__ import annotations

import importlib.metadata
import json
import socket
import subprocess
import sys
import textwrap
import time
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import pytest

from trajsynth.mcp_servers import registry
from trajsynth.mcp_servers.graph import entry_tools
from trajsynth.mcp_servers.registry import (
    add_outside_cluster,
    cluster,
    cluster_names,
    get_cluster,
    list_clusters,
    registry_params,
    remove_outside_cluster,
)
from trajsynth.schemas import (
    Domain,
    InputError,
    ServerKind,
    ServerSpec,
    ToolAccess,
    ToolCluster,
    ToolSpec,
)

BUNDLED = ("calendar", "code", "shop", "travel")
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry whose additions vanish after the test."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_BUILT", dict(registry._BUILT))


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_cluster_has_tools_edges_entries_and_tags(name: str, tmp_path: Path) -> None:
    c = get_cluster(name, clusters_dir=tmp_path)
    assert c.cluster_id == name
    assert c.source == "bundled"
    assert c.server.kind == ServerKind.BUNDLED
    assert c.server.module == f"trajsynth.mcp_servers.servers.{name}"
    assert c.domain != Domain.OTHER
    assert len(c.tools) >= 6
    assert len(c.edges) >= 3
    names = set(c.tool_names)
    assert all(e.source in names and e.target in names for e in c.edges)
    assert any(e.origin == "declared" for e in c.edges)
    assert entry_tools(c), "a task needs somewhere to start"
    # the bundled servers annotate every tool (docs/style.md §3), and have both kinds
    assert {t.access_source for t in c.tools} == {"annotation"}
    assert {t.access for t in c.tools} == {ToolAccess.READ, ToolAccess.WRITE}
    assert all(t.input_schema.get("type") == "object" for t in c.tools)


def test_list_clusters_holds_every_bundled_one(tmp_path: Path) -> None:
    ids = [c.cluster_id for c in list_clusters(clusters_dir=tmp_path)]
    assert set(BUNDLED) <= set(ids)
    assert ids == sorted(ids)
    assert set(BUNDLED) <= set(cluster_names(clusters_dir=tmp_path))


def test_shop_graph_links_search_to_cart() -> None:
    shop = get_cluster("shop")
    edges = {(e.source, e.target): e for e in shop.edges}
    assert edges[("search_products", "add_to_cart")].in_param == "product_id"
    assert edges[("list_orders", "get_order")].out_field == "orders[].order_id"
    assert "search_products" in entry_tools(shop)
    assert "place_order" not in entry_tools(shop)


def test_unknown_cluster_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"unknown cluster 'nope'.*shop"):
        get_cluster("nope", clusters_dir=tmp_path)


def _toy(tag: str = "") -> ToolCluster:
    tools = [
        ToolSpec(
            name="list_items",
            output_schema={"type": "object", "properties": {"items": {"type": "array",
                "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}},
        ),
        ToolSpec(
            name="get_item",
            input_schema={"type": "object", "properties": {"item_id": {"type": "string"}},
                          "required": ["item_id"]},
        ),
    ]  # fmt: skip
    return ToolCluster(
        cluster_id=f"toy{tag}",
        domain=Domain.OTHER,
        server=ServerSpec(kind=ServerKind.STDIO, command=["toy-server"]),
        tools=tools,
    )


def test_cluster_decorator_registers_with_params(clean_registry: None, tmp_path: Path) -> None:
    calls: list[str] = []

    @cluster("toy-deco", tag="-deco")
    def make(tag: str) -> ToolCluster:
        calls.append(tag)
        return _toy(tag)

    built = get_cluster("toy-deco", clusters_dir=tmp_path)
    assert built.cluster_id == "toy-deco"
    assert get_cluster("toy-deco", clusters_dir=tmp_path) is built  # built once
    assert calls == ["-deco"]
    assert registry_params("toy-deco") == {
        "name": "toy-deco",
        "source": "decorator",
        "tag": "-deco",
    }
    assert "toy-deco" in [c.cluster_id for c in list_clusters(clusters_dir=tmp_path)]


def test_entry_points_extend_the_registry(
    clean_registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "outside_clusters.py").write_text(
        textwrap.dedent(
            """
            from trajsynth.schemas import Domain, ServerKind, ServerSpec, ToolCluster, ToolSpec

            def make():
                return ToolCluster(
                    cluster_id="ep-toy", domain=Domain.FINANCE,
                    server=ServerSpec(kind=ServerKind.STDIO, command=["bank-server"]),
                    tools=[
                        ToolSpec(name="list_accounts", output_schema={"type": "object",
                            "properties": {"accounts": {"type": "array", "items": {
                                "type": "object", "properties": {"id": {"type": "string"}}}}}}),
                        ToolSpec(name="get_balance", input_schema={"type": "object",
                            "properties": {"account_id": {"type": "string"}},
                            "required": ["account_id"]}),
                    ],
                )

            NOT_A_CLUSTER = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(pkg))
    eps = [
        importlib.metadata.EntryPoint(
            "ep-toy", "outside_clusters:make", registry.ENTRY_POINT_GROUP
        ),
        importlib.metadata.EntryPoint(
            "ep-bad", "outside_clusters:NOT_A_CLUSTER", registry.ENTRY_POINT_GROUP
        ),
    ]

    def fake_entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return eps if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    c = get_cluster("ep-toy", clusters_dir=tmp_path)
    assert c.source == "entry_point"
    assert c.domain == Domain.FINANCE
    # edges were inferred because the entry point gave none
    assert [(e.source, e.target, e.in_param) for e in c.edges] == [
        ("list_accounts", "get_balance", "account_id")
    ]
    with pytest.raises(InputError, match=r"ep-bad.*expected a BundledCluster, a ToolCluster"):
        get_cluster("ep-bad", clusters_dir=tmp_path)


# Slow: discovery starts the real server three times and waits two clock ticks.
@pytest.mark.slow
def test_outside_stdio_server_mcp_server_time(tmp_path: Path) -> None:
    parts = add_outside_cluster("time", command=TIME_SERVER, clusters_dir=tmp_path)
    assert [p.cluster_id for p in parts] == ["time"]
    c = parts[0]
    assert sorted(c.tool_names) == ["convert_time", "get_current_time"]
    assert all(t.access == ToolAccess.READ and t.access_source == "annotation" for t in c.tools)
    # discovery: the end state is read through stable read calls; get_current_time's answer
    # changes with the clock, so only convert_time is a probe
    assert c.state_readable is True
    assert [p.tool for p in c.probes] == ["convert_time"]
    zones = c.arg_values["get_current_time"]["timezone"]
    assert len(zones) >= 2 and set(zones) <= zoneinfo.available_timezones()
    assert c.source == "outside"
    assert c.domain == Domain.OTHER
    assert c.server == ServerSpec(kind=ServerKind.STDIO, command=TIME_SERVER)
    assert "mcp-time" in c.description
    convert = c.tool("convert_time")
    assert set(convert.input_schema["required"]) == {"source_timezone", "time", "target_timezone"}
    assert convert.output_schema is not None
    # saved, and read back like any other cluster
    saved = json.loads((tmp_path / "time.json").read_text())
    assert saved["cluster_id"] == "time"
    assert get_cluster("time", clusters_dir=tmp_path) == c
    assert "time" in [x.cluster_id for x in list_clusters(clusters_dir=tmp_path)]
    assert remove_outside_cluster("time", clusters_dir=tmp_path) == [tmp_path / "time.json"]
    with pytest.raises(InputError, match="unknown cluster 'time'"):
        get_cluster("time", clusters_dir=tmp_path)


def test_outside_server_that_dies_is_an_input_error_naming_command_and_stderr(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-c", "import sys; sys.stderr.write('boom-4711 no db'); sys.exit(3)"]
    with pytest.raises(InputError) as info:
        add_outside_cluster("broken", command=command, clusters_dir=tmp_path, timeout_s=20)
    message = str(info.value)
    assert "boom-4711 no db" in message
    assert sys.executable in message
    assert not (tmp_path / "broken.json").exists()


def test_outside_command_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no-such-mcp-server-xyz"):
        add_outside_cluster("ghost", command=["no-such-mcp-server-xyz"], clusters_dir=tmp_path)


def test_outside_cluster_argument_checks(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="exactly one"):
        add_outside_cluster("x", clusters_dir=tmp_path)
    with pytest.raises(InputError, match="exactly one"):
        add_outside_cluster("x", command=["a"], url="http://x", clusters_dir=tmp_path)
    with pytest.raises(InputError, match="taken by a bundled cluster"):
        add_outside_cluster("shop", command=TIME_SERVER, clusters_dir=tmp_path)
    with pytest.raises(InputError, match="lower-case"):
        add_outside_cluster("Bad Name", command=TIME_SERVER, clusters_dir=tmp_path)
    with pytest.raises(InputError, match="http"):
        add_outside_cluster("x", url="ftp://host/mcp", clusters_dir=tmp_path)


def test_a_corrupt_saved_cluster_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        list_clusters(clusters_dir=tmp_path)


HTTP_SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations
    from pydantic import BaseModel

    server = MCPServer("notes")
    NOTES = {}

    class Saved(BaseModel):
        note_id: str

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def save_note(title: str, body: str) -> Saved:
        NOTES[title] = body
        return Saved(note_id=title)

    @server.tool()
    def read_note(note_id: str) -> str:
        return NOTES[note_id]

    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    script = tmp_path / "notes_server.py"
    script.write_text(HTTP_SERVER)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow  # an HTTP server process (4-5 s); tags, edges: fast-tier (test_tags, test_graph)
def test_outside_streamable_http_server(http_server: str, tmp_path: Path) -> None:
    [c] = add_outside_cluster("notes", url=http_server, clusters_dir=tmp_path)
    assert c.server == ServerSpec(kind=ServerKind.HTTP, url=http_server)
    tags = {t.name: (t.access, t.access_source) for t in c.tools}
    assert tags == {
        "save_note": (ToolAccess.WRITE, "annotation"),
        "read_note": (ToolAccess.READ, "name"),
    }
    assert [(e.source, e.target, e.in_param) for e in c.edges] == [
        ("save_note", "read_note", "note_id")
    ]
