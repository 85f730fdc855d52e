"""Real public servers from the registries: the plain command joins (a host repository copied
into the sandbox), and a wrong trajectory fails constraints the product planned on them.

Slow: each server is installed into its own venv under tmp and started as a run starts it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes.npm_filesystem import filesystem_cluster
from fakes.registry_servers import pypi_server

from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.environment import open_environment
from trajsynth.mcp_servers.registry import add_outside_cluster
from trajsynth.planning.constraints import derive_constraints
from trajsynth.planning.gold import GoldFailure, run_gold_path
from trajsynth.planning.mutants import lint_by_mutation
from trajsynth.schemas import (
    Constraint,
    LiteralArg,
    Message,
    MessageRole,
    PlannedCall,
    ResetMode,
    ToolCallRecord,
    ToolCluster,
    Trajectory,
    canonical_json,
)
from trajsynth.schemas.rollout import ObsClass, Termination

pytestmark = pytest.mark.slow


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "work" / "repo"
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.email=a@b.c", "-c", "user.name=A"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return repo


async def _plan(cluster: ToolCluster, tool: str, arguments: dict[str, Any]) -> list[Constraint]:
    async with open_environment(cluster, sandbox_kind="local") as env:
        initial = await env.state()
        handle = await env.snapshot()
        steps = [
            PlannedCall(tool=tool, args={k: LiteralArg(value=v) for k, v in arguments.items()})
        ]
        outcome = await run_gold_path(env, cluster, steps, {}, initial)
        assert not isinstance(outcome, GoldFailure), outcome
        constraints = derive_constraints(
            outcome.run.calls, outcome.run.final_state, cluster, [], initial_state=initial
        )
        constraints, lint = await lint_by_mutation(
            env, handle, cluster, outcome.run.calls, constraints
        )
    assert lint.variants and lint.clean, lint
    return constraints


async def _wrong(
    cluster: ToolCluster, constraints: list[Constraint], tool: str, arguments: dict[str, Any]
) -> bool:
    async with open_environment(cluster, sandbox_kind="local") as env:
        result = await env.call_tool(tool, arguments)
        state = await env.state()
    record = ToolCallRecord(
        call_id="c0",
        tool=tool,
        raw_arguments=canonical_json(arguments),
        arguments=arguments,
        observation=result.text,
        obs_class=ObsClass.OK,
    )
    trajectory = Trajectory(
        trajectory_id="wrong", run_id="r", blueprint_id="bp", tree_id="t", leaf_node_id="l",
        cluster_id=cluster.cluster_id,
        messages=[Message(role=MessageRole.ASSISTANT, content="Done.")],
        tools=[t.to_openai() for t in cluster.tools], calls=[record], final_answer="Done.",
        termination=Termination.ASSISTANT_DONE,
    )  # fmt: skip
    return verify(trajectory, constraints, state).passed


async def test_git_plain_command_copies_the_repo_and_a_wrong_branch_fails(tmp_path: Path) -> None:
    """`clusters add git -- mcp-server-git --repository /abs/repo`: the repository is copied
    into the sandbox (reset snapshot, repo_path fixed and hidden), probes read it, the user's
    files never change, and a branch with the wrong name fails the planned checks."""
    server = pypi_server(tmp_path, "mcp-server-git")
    repo = _repo(tmp_path)
    tmp_path.chmod(0o755)
    before = subprocess.run(
        ["git", "-C", str(repo), "branch"], capture_output=True, text=True, check=True
    ).stdout
    [cluster] = add_outside_cluster(
        "git", command=[str(server), "--repository", str(repo)],
        clusters_dir=tmp_path / "clusters", sandbox_kind="local",
    )  # fmt: skip
    assert cluster.server.reset is ResetMode.SNAPSHOT
    assert cluster.server.command[-1] == "repo" and cluster.server.args == {"repo_path": "repo"}
    assert cluster.probes, cluster.warnings
    for tool in cluster.tools:
        assert "repo_path" not in (tool.input_schema.get("properties") or {}), tool.name
    constraints = await _plan(cluster, "git_create_branch", {"branch_name": "feature-x"})
    assert not await _wrong(
        cluster, constraints, "git_create_branch", {"branch_name": "wrong-name"}
    )
    assert await _wrong(cluster, constraints, "git_create_branch", {"branch_name": "feature-x"})
    after = subprocess.run(
        ["git", "-C", str(repo), "branch"], capture_output=True, text=True, check=True
    ).stdout
    assert after == before  # the user's repository was never touched


async def test_filesystem_move_of_a_missing_file_fails(tmp_path: Path) -> None:
    """server-filesystem from npm: the gold run moves a file that exists; a move of one that
    does not (the server's error result) fails the planned checks."""
    cluster = filesystem_cluster(tmp_path, {"notes.txt": "call Sam\n"})
    move = {"source": "docs/notes.txt", "destination": "docs/archive.txt"}
    constraints = await _plan(cluster, "move_file", move)
    missing = {"source": "docs/missing.txt", "destination": "docs/archive.txt"}
    assert not await _wrong(cluster, constraints, "move_file", missing)
    assert await _wrong(cluster, constraints, "move_file", move)
