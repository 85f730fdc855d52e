"""Speed of the curation stages on synthetic rollouts: signals, topology, selection.

    python bench/curation.py [--tasks 2000] [--rollouts 5] [--calls 6]

Builds ``tasks × rollouts`` trajectories (reads, writes, failing calls, asks) without any model,
then times compute_signals, build_quotient_graph + metrics per task, and both selections.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from trajsynth.curation.select import select_rl, select_sft
from trajsynth.curation.signals import compute_signals
from trajsynth.curation.topology import build_quotient_graph, task_metrics, trajectory_metrics
from trajsynth.schemas import (
    FailureClass,
    FunctionCall,
    Message,
    ObsClass,
    Termination,
    ToolCall,
    ToolCallRecord,
    Trajectory,
    Verdict,
)

TOOLS = ["get_order", "list_items", "search_products", "add_to_cart", "cancel_order"]


def make(task: str, i: int, n_calls: int, rng: random.Random) -> Trajectory:
    tid = f"{task}-r{i}"
    messages = [Message(role="system", content="sys"), Message(role="user", content="goal")]
    calls = []
    for k in range(n_calls):
        tool = rng.choice(TOOLS)
        args = {"order_id": f"W{rng.randint(1, 3)}", "qty": rng.randint(1, 2)}
        error = rng.random() < 0.15
        raw = json.dumps(args)
        cid = f"{tid}-c{k}"
        obs = "Error: not found" if error else json.dumps({"id": args["order_id"], "n": k % 3})
        messages.append(
            Message(
                role="assistant",
                tool_calls=[ToolCall(id=cid, function=FunctionCall(name=tool, arguments=raw))],
            )
        )
        messages.append(Message(role="tool", content=obs, tool_call_id=cid, name=tool))
        calls.append(
            ToolCallRecord(
                call_id=cid,
                tool=tool,
                raw_arguments=raw,
                arguments=args,
                observation=obs,
                obs_class=ObsClass.ERROR if error else ObsClass.OK,
                failure_class=FailureClass.TOOL if error else None,
                error_type="not_found" if error else None,
                turn=k,
            )
        )
    messages.append(Message(role="assistant", content="Done, your order is updated."))
    messages.append(Message(role="user", content="Thanks!"))
    return Trajectory(
        trajectory_id=tid, run_id="bench", blueprint_id=task, tree_id=tid, leaf_node_id=tid,
        cluster_id="shop", messages=messages, calls=calls, termination=Termination.USER_STOP,
        n_turns=n_calls + 1,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--rollouts", type=int, default=5)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args()
    rng = random.Random(0)
    by_task = {
        f"t{t}": [make(f"t{t}", i, args.calls, rng) for i in range(args.rollouts)]
        for t in range(args.tasks)
    }
    verdicts = {
        tr.trajectory_id: Verdict(
            verdict_id=f"v-{tr.trajectory_id}",
            trajectory_id=tr.trajectory_id,
            results=[],
            passed=rng.random() < 0.6,
            score=0.0,
        )  # fmt: skip
        for ts in by_task.values()
        for tr in ts
    }
    n = sum(len(ts) for ts in by_task.values())
    t0 = time.perf_counter()
    signals = {
        tr.trajectory_id: compute_signals(tr, verdict=verdicts[tr.trajectory_id])
        for ts in by_task.values()
        for tr in ts
    }
    t1 = time.perf_counter()
    topo, tasks = [], []
    for ts in by_task.values():
        graph = build_quotient_graph(ts, verdicts)
        topo.extend(trajectory_metrics(graph))
        tasks.append(task_metrics(graph))
    t2 = time.perf_counter()
    sft = select_sft(topo, verdicts, signals)
    rl = select_rl(tasks)
    t3 = time.perf_counter()
    print(f"{n} trajectories ({args.tasks} tasks × {args.rollouts}, {args.calls} calls each)")
    print(f"signals:   {t1 - t0:7.2f} s  ({1e3 * (t1 - t0) / n:.3f} ms/trajectory)")
    print(f"topology:  {t2 - t1:7.2f} s  ({1e3 * (t2 - t1) / n:.3f} ms/trajectory)")
    print(f"selection: {t3 - t2:7.2f} s  (sft {sum(r.selected for r in sft)} picked, "
          f"rl {sum(r.selected for r in rl)} tasks)")  # fmt: skip


if __name__ == "__main__":
    main()
