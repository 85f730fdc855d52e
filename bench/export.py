"""Export time for 10,000 SFT rows and 10,000 RL rows against its target.

Builds a temp store of N tasks with one selected trajectory each (a call, its result, a
closing answer), then times ``export_dataset`` as a whole and its phases: reading the rows,
rendering every SFT row through the tool-aware template, writing Parquet, and the card.

    python bench/export.py [--n 10000] [--no-render]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def build_store(path: Path, n: int):
    from trajsynth.store import Store

    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name} in the shop",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        }
        for name in ("get_order", "cancel_order", "list_items")
    ]
    constraint = {"kind": "tool_called", "call": {"tool": "get_order", "matchers": {}}}
    trajectories, verdicts, blueprints, selections, scores = [], [], [], [], []
    for i in range(n):
        tid, task = f"traj-{i:06d}", f"task-{i:06d}"
        args = json.dumps({"order_id": f"W{i}"})
        messages = [
            {"role": "system", "content": "You are a helpful shop assistant."},
            {"role": "user", "content": f"Where is my order W{i}? It was due last week."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": args},
                    }
                ],
            },  # fmt: skip
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "name": "get_order",
                "content": json.dumps({"order_id": f"W{i}", "status": "shipped", "eta": "2 days"}),
            },  # fmt: skip
            {"role": "assistant", "content": f"Order W{i} has shipped and arrives in 2 days."},
        ]
        trajectories.append(
            {"trajectory_id": tid, "run_id": "bench", "blueprint_id": task, "tree_id": tid,
             "leaf_node_id": tid, "cluster_id": ("shop", "travel", "calendar")[i % 3],
             "round": 0, "messages": messages, "tools": tools, "termination": "user_stop"}
        )  # fmt: skip
        verdicts.append(
            {"verdict_id": f"v{i}", "trajectory_id": tid, "passed": i % 4 != 0,
             "score": float(i % 4 != 0), "excluded": False}
        )  # fmt: skip
        blueprints.append(
            {"blueprint_id": task, "run_id": "bench", "round": 0,
             "cluster_id": ("shop", "travel", "calendar")[i % 3],
             "domain": ("retail", "travel", "productivity")[i % 3],
             "target_mode": ("direct_execute", "clarify")[i % 2], "seed": i,
             "initial_state_id": f"s{i % 7}", "constraints": [constraint], "goal": "order"}
        )  # fmt: skip
        scores.append(
            {"trajectory_id": tid, "action_complexity": 1.0 + (i % 11) / 2, "run_id": "bench"}
        )
        for kind, item in (("sft", tid), ("rl", task)):
            selections.append(
                {"selection_id": f"{kind}-{i}", "run_id": "bench", "kind": kind,
                 "item_id": item, "task_id": task, "round": 0, "selected": True,
                 "score": 0.5, "reason": "bench"}
            )  # fmt: skip
    store = Store(path)
    store.insert_bulk(
        {
            "trajectories": trajectories,
            "verdicts": verdicts,
            "blueprints": blueprints,
            "scores": scores,
            "selections": selections,
        }
    )
    return store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--no-render", action="store_true")
    opts = parser.parse_args()

    from trajsynth.export import export_dataset, render_rows, rl_rows, sft_rows
    from trajsynth.llm.chat_template import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        store = build_store(root / "bench.duckdb", opts.n)
        print(
            f"store with {opts.n} SFT + {opts.n} RL selections built in "
            f"{time.perf_counter() - t:.1f} s"
        )
        t = time.perf_counter()
        tokenizer = load_tokenizer()
        print(f"tokenizer loaded in {time.perf_counter() - t:.1f} s")

        t = time.perf_counter()
        sft = sft_rows(store, "bench")
        t_sft = time.perf_counter() - t
        t = time.perf_counter()
        rl_rows(store, "bench")
        t_rl = time.perf_counter() - t
        t = time.perf_counter()
        n_tok, n_asst = render_rows(sft, tokenizer)
        t_render = time.perf_counter() - t
        print(f"read SFT rows {t_sft:.1f} s, RL rows {t_rl:.1f} s")
        print(f"render {len(sft)} rows: {t_render:.1f} s ({1e3 * t_render / len(sft):.2f} ms/row, "
              f"{n_tok} tokens, {n_asst} assistant)")  # fmt: skip

        t = time.perf_counter()
        report = export_dataset(
            store, root / "out", tokenizer=tokenizer, check_render=not opts.no_render
        )
        total = time.perf_counter() - t
        size = sum(p.stat().st_size for p in (root / "out").rglob("*") if p.is_file())
        print(
            f"export_dataset: {report.n_sft} SFT + {report.n_rl} RL rows in {total:.1f} s "
            f"(render {'on' if not opts.no_render else 'off'}), {size / 1e6:.1f} MB, "
            f"{len(report.files)} files"
        )


if __name__ == "__main__":
    main()
