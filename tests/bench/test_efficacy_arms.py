"""The efficacy bench's arms: one loss-token budget, the format control, content-keyed cache.

Fast: pure functions over hand-built rows and trajectories (the tokenizer is the real one).
The slow test runs ``bench/efficacy.py --small``: every arm end to end on the embedded model,
asserting the plumbing (bench/efficacy.py ``check_plumbing``), never the gains.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.schemas import Trajectory

pytestmark = pytest.mark.alone  # the bench trains: every core

ROOT = Path(__file__).resolve().parents[2]


def _load_arms():
    """bench/efficacy_arms.py by its path: bench/ must not go on sys.path, where its
    dask.py would shadow the dask package for every later import in this process."""
    spec = importlib.util.spec_from_file_location(
        "efficacy_arms", ROOT / "bench" / "efficacy_arms.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_arms = _load_arms()
cached, code_version, content_key = _arms.cached, _arms.code_version, _arms.content_key
swap_values, take_budget = _arms.swap_values, _arms.take_budget


def _trajectory(tid: str, email: str, name: str) -> Trajectory:
    args = json.dumps({"email": email})
    return Trajectory.model_validate(
        {
            "trajectory_id": tid,
            "run_id": "r",
            "blueprint_id": f"b-{tid}",
            "tree_id": "t",
            "leaf_node_id": "l",
            "cluster_id": "shop",
            "messages": [
                {"role": "user", "content": f"My email is {email}. What is my name?"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "function": {
                    "name": "find_user_by_email", "arguments": args}}]},
                {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"name": name})},
                {"role": "assistant", "content": f"The account of {email} is {name}."},
            ],
            "calls": [{"call_id": "c1", "tool": "find_user_by_email", "raw_arguments": args,
                       "arguments": {"email": email}, "observation": json.dumps({"name": name})}],
            "final_answer": f"The account of {email} is {name}.",
            "termination": "assistant_done",
        }
    )  # fmt: skip


def test_every_arm_is_cut_to_one_budget_of_loss_tokens() -> None:
    rows, tokens = list("abcdefgh"), [30, 10, 25, 5, 40, 15, 20, 35]
    for seed in range(5):
        kept, used = take_budget(rows, tokens, 60, seed=seed)
        assert used == sum(tokens[rows.index(r)] for r in kept) <= 60
        # whole rows: every row left out would have overspent the budget
        assert all(used + t > 60 for r, t in zip(rows, tokens, strict=True) if r not in kept)
    assert take_budget(rows, tokens, 60, seed=0) == take_budget(rows, tokens, 60, seed=0)
    assert take_budget(rows, tokens, 60, seed=0)[0] != take_budget(rows, tokens, 60, seed=3)[0]


def test_the_format_control_keeps_the_template_and_swaps_the_values() -> None:
    a = _trajectory("a", "mia.k@example.com", "Mia Kim")
    b = _trajectory("b", "liam.g@example.net", "Liam Garcia")
    lonely = _trajectory("c", "mia.k@example.com", "Mia Kim")  # same value as a: still swaps
    sa, sb, sc = swap_values([a, b, lonely], seed=0)
    assert sa.calls[0].arguments == {"email": "liam.g@example.net"}
    assert json.loads(sa.messages[1].tool_calls[0].function.arguments) == {
        "email": "liam.g@example.net"
    }
    assert "liam.g@example.net" in sa.messages[3].content and "liam.g" in sa.final_answer
    assert sb.calls[0].arguments["email"] == "mia.k@example.com"
    # the template is untouched: roles, tools, the user's words and the tool's result
    assert [m.role for m in sa.messages] == [m.role for m in a.messages]
    assert sa.messages[0] == a.messages[0] and sa.messages[2] == a.messages[2]
    assert abs(len(sa.messages[3].content) - len(a.messages[3].content)) <= 2
    # with no other trajectory to swap with, the value is reversed: same length, wrong
    (alone,) = swap_values([a], seed=0)
    assert alone.calls[0].arguments == {"email": "mia.k@example.com"[::-1]}
    assert sc.calls[0].arguments["email"] == "liam.g@example.net"


def test_a_cached_result_is_keyed_by_arguments_data_and_code(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "m.py").write_text("x = 1\n")
    code = code_version([src])
    key = content_key("sft", args={"seed": 0}, data="d1", code=code)
    assert key != content_key("sft", args={"seed": 1}, data="d1", code=code)
    assert key != content_key("sft", args={"seed": 0}, data="d2", code=code)
    (src / "m.py").write_text("x = 2\n")
    assert key != content_key("sft", args={"seed": 0}, data="d1", code=code_version([src]))
    made = []
    first, reused = cached(tmp_path, key, lambda where: made.append(where) or {"v": 1})
    again, reused_again = cached(tmp_path, key, lambda where: made.append(where) or {"v": 2})
    assert (first, reused, again, reused_again, len(made)) == ({"v": 1}, False, {"v": 1}, True, 1)


@pytest.mark.slow
@pytest.mark.llm
@pytest.mark.skipif(
    os.environ.get("SYNTH_BENCH_SMALL") != "1",
    reason="opt-in (SYNTH_BENCH_SMALL=1): `bench/efficacy.py --small` takes 17+ min on 2 "
    "cores, past CI's budget, and its generator arm passes nothing at that size yet",
)
def test_the_small_bench_runs_every_arm_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/efficacy.py"), "--small", "--work",
         str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=1800, env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "plumbing checks passed" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["wall_s"] < 20 * 60
