"""`synth clusters`: list, show, graph, add (stdio, for real with mcp-server-time), remove."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajsynth.cli.commands.clusters import app

runner = CliRunner()


def _run(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_list_show_and_graph(tmp_path: Path) -> None:
    listed = _run("list", "--clusters-dir", str(tmp_path))
    for name in ("shop", "travel", "calendar", "code"):
        assert name in listed
    shown = _run("show", "shop", "--clusters-dir", str(tmp_path))
    assert "search_products" in shown and "add_to_cart" in shown
    assert "products[].product_id" in shown  # an edge's out_field
    out = tmp_path / "shop.png"
    drawn = _run("graph", "shop", "--out", str(out), "--clusters-dir", str(tmp_path))
    assert str(out) in drawn.replace("\n", "")
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # mcp-server-time started 3 times (4-5 s); discovery is fast-tier (test_registry)
def test_add_a_stdio_server_then_use_it_like_any_cluster(tmp_path: Path) -> None:
    added = _run(
        "add", "time", "--clusters-dir", str(tmp_path), "--domain", "productivity",
        "--", sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC",
    )  # fmt: skip
    assert "time" in added and "annotation" in added
    saved = json.loads((tmp_path / "time.json").read_text())
    assert saved["domain"] == "productivity"
    assert saved["server"]["command"][-3:] == ["mcp_server_time", "--local-timezone", "UTC"]
    assert {t["name"] for t in saved["tools"]} == {"get_current_time", "convert_time"}
    assert "time" in _run("list", "--clusters-dir", str(tmp_path))
    shown = _run("show", "time", "--clusters-dir", str(tmp_path))
    # the state is read through stable read-only probe calls, shown with evidence
    assert "convert_time" in shown and "end-state probe: convert_time" in shown
    assert "readOnlyHint=True" in shown
    _run("remove", "time", "--clusters-dir", str(tmp_path))
    assert not (tmp_path / "time.json").exists()


def test_add_reports_a_bad_command(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["add", "x", "--clusters-dir", str(tmp_path), "--", "no-such-server-cmd-42"]
    )
    assert result.exit_code != 0
    assert "no-such-server-cmd-42" in str(result.exception)


def test_show_prints_the_mutation_lint_of_stored_blueprints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajsynth.schemas import ServerKind, ServerSpec, ToolCluster, ToolSpec
    from trajsynth.store import Store

    monkeypatch.chdir(tmp_path)
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    cluster = ToolCluster(
        cluster_id="notes", domain="other", source="outside", tools=[ToolSpec(name="put")],
        server=ServerSpec(kind=ServerKind.STDIO, command=["srv"], hidden_tools=["reset_state"],
                          hidden_params=["state_key"]),
    )  # fmt: skip
    (clusters / "notes.json").write_text(cluster.model_dump_json())
    store = Store(tmp_path / "data" / "synth.duckdb")
    lint = {"variants": 4, "caught_first": 3, "survived": [], "strengthened": ["matcher put.title"],
            "final_state_catches": 2, "gold_passes": True, "kinds": ["change", "drop"],
            "readback": 'get({"title":"Dentist"})', "readback_tried": 3}  # fmt: skip
    unseen = {**lint, "readback": "", "readback_tried": 2}
    with store.session():
        store.insert("blueprints", [{"blueprint_id": "bp1", "cluster_id": "notes",
                                     "mutation_lint": lint},
                                    {"blueprint_id": "bp2", "cluster_id": "notes",
                                     "mutation_lint": unseen}])  # fmt: skip
    shown = _run("show", "notes", "--clusters-dir", str(clusters))
    assert "hidden from the model: tools reset_state; params state_key" in shown
    assert "mutation lint: 2 blueprints, 2 with no wrong variant passing" in shown
    assert "8 variants, 6 caught by the planned checks, 2 checks added" in shown
    # the probe search: which read it put on the final-state check, and where it found none
    assert "probe search: 2 writing blueprints the probes could not see; a read-back found" in (
        " ".join(shown.split())
    )
    assert 'get({"title":"Dentist"})' in shown
