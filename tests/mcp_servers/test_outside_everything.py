"""server-everything from npm, as a user adds it: the tools no run can call are hidden at
join, and a single cell plans one read whose answer is checked.

Its ``simulate-research-query`` runs only as an MCP task (``taskSupport: required``) and its
``gzip-file-as-resource`` fetches a URL (``openWorldHint``; the sandbox has no network): both
are hidden with the reason, never drawn. Its two toggles change nothing a read shows, so a
single cell's read-then-toggle paths are refused (``unseen_write``) and the unit then plans
one read (``planner._one_read``); the accepted attempt's detail lists the refused paths.

Slow: the server is installed into its own npm prefix under tmp and started as a run starts
it (local sandbox); the words are the template's (no LLM).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from trajsynth.mcp_servers.registry import add_outside_cluster
from trajsynth.planning.planner import (
    Planner,
    accepted_attempt,
    environment_factory,
    plan_blueprint,
)
from trajsynth.schemas import (
    AnswerContains,
    Blueprint,
    Cell,
    Difficulty,
    PathShape,
    ReasoningMode,
    SandboxKind,
    ToolCluster,
)

pytestmark = pytest.mark.slow

PACKAGE = "@modelcontextprotocol/server-everything"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> ToolCluster:
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm or node is not installed")
    tmp = tmp_path_factory.mktemp("everything")
    prefix = tmp / "npm"
    npm = subprocess.run(
        ["npm", "install", "--prefix", str(prefix), PACKAGE],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if npm.returncode != 0:
        pytest.skip(f"npm registry unreachable: {npm.stderr[-300:]}")
    tmp.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    [joined] = add_outside_cluster(
        "everything",
        command=["node", str(prefix / "node_modules/.bin/mcp-server-everything")],
        clusters_dir=tmp / "clusters", sandbox_kind="local",
    )  # fmt: skip
    return joined


def test_tools_no_run_can_call_are_hidden(cluster: ToolCluster) -> None:
    names = set(cluster.tool_names)
    hidden = set(cluster.server.hidden_tools)
    assert {"simulate-research-query", "gzip-file-as-resource"} <= hidden, hidden
    assert not names & hidden
    assert {"get-sum", "echo", "toggle-simulated-logging"} <= names, names  # control: kept


async def test_a_single_cell_plans_one_read_with_an_answer_check(cluster: ToolCluster) -> None:
    cell = Cell(
        cluster_id="everything",
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )
    factory = environment_factory(cluster, sandbox_kind=SandboxKind.LOCAL)
    planned = [
        await plan_blueprint(Planner(use_llm=False), None, factory, cluster, cell, seed)
        for seed in range(2)
    ]
    blueprints = [b for b in planned if isinstance(b, Blueprint)]
    assert blueprints, [getattr(p, "detail", p) for p in planned]
    for bp in blueprints:
        assert len(bp.tool_path) == 1 and bp.n_writes == 0, bp.tool_path
        assert any(isinstance(c, AnswerContains) for c in bp.constraints), bp.constraints
        assert bp.mutation_lint is not None and not bp.mutation_lint.survived
        attempt = accepted_attempt(bp)
        assert attempt.detail.count("[") >= 2, attempt.detail  # the refused paths before it
