"""Speed of ``flows.curate.curate_round`` on stored trajectories, split by stage.

    HF_HUB_OFFLINE=1 python bench/curation.py [--sizes 1000,2000,5000,10000] [--rollouts 5]
                                              [--no-embeddings] [--fake-embedder]

For each size, a fresh store gets ``size`` trajectories (``size / rollouts`` tasks, 5
rollouts each, 1-7 calls with reads, writes and failing calls, asks, answers) built with the
hand-built generators of ``tests/fakes`` and assistant words drawn from a fixed pool of
templated sentences (what a fake / small LLM says); then one ``curate_round`` is timed with
all-MiniLM-L6-v2 embeddings (cold cache: every distinct digest is embedded once). Prints the
time of each stage and the total per size, so the growth from 1k to 10k can be read off.
Then a second run of the same texts (new ids) is curated in the same store, its embeddings
read from the store's digest cache, and at 10,000 both are printed beside the 30 s target.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes.store_rows import hash_embedder, write_round  # noqa: E402
from fakes.trajectories import call, make_trajectory, make_verdict  # noqa: E402

from trajsynth.flows.curate import curate_round  # noqa: E402
from trajsynth.schemas import CurationConfig  # noqa: E402
from trajsynth.store import Store  # noqa: E402

TARGET_SIZE, TARGET_S = 10_000, 30.0  # 10k trajectories, embeddings included
READS = ["get_order", "get_item", "list_items"]
WRITES = ["cancel_order", "add_item"]
PLANS = [
    "Let me look up order {o} first.",
    "I will check the items in order {o} before changing anything.",
    "To cancel order {o} I need its status.",
    "I'll search the catalogue for {i} and then add it.",
    "First I verify the order {o}, then I update it.",
    "Checking whether {i} is in stock.",
    "I need the order id; I will ask you for it.",
    "The order {o} is delivered, so I cannot cancel it.",
]
ANSWERS = [
    "Done: order {o} is cancelled.",
    "I added {i} to order {o}.",
    "Order {o} was delivered yesterday.",
    "Sorry, I could not find order {o}.",
    "Your order {o} now has {n} items.",
]
QUESTIONS = ["Which order do you mean?", "Could you give me the order id?", "Is {i} right?"]


def make_task(task: int, rollouts: int, rng: random.Random, prefix: str = ""):
    cluster = "shop" if task % 2 else "store"
    o, i = f"W{rng.randint(1, 40)}", rng.choice(["mug", "lamp", "desk", "pen", "cable"])
    slots = {"o": o, "i": i, "n": rng.randint(1, 4)}
    trajectories, verdicts = [], {}
    for r in range(rollouts):
        tid = f"{prefix}t{task}-r{r}"
        turns = []
        if rng.random() < 0.15:
            turns.append(rng.choice(QUESTIONS).format(**slots))
        for _ in range(rng.randint(1, 5)):
            batch = []
            for _ in range(1 if rng.random() < 0.8 else 2):
                tool = rng.choice(READS if rng.random() < 0.65 else WRITES)
                args = {"order_id": o if rng.random() < 0.85 else f"X{rng.randint(1, 9)}"}
                if tool == "add_item":
                    args["sku"] = i
                if args["order_id"].startswith("X") or rng.random() < 0.05:
                    batch.append(call(tool, args, "no such order", error="not_found"))
                else:
                    batch.append(call(tool, args, {"order_id": o, "status": "ok", "n": 2}))
            turns.append(batch)
        plan = rng.choice(PLANS).format(**slots)
        answer = rng.choice(ANSWERS).format(**slots)
        t = make_trajectory(tid, turns, task_id=f"{prefix}task{task}", final=f"{plan} {answer}")
        trajectories.append(t.model_copy(update={"cluster_id": cluster}))
        verdicts[tid] = make_verdict(tid, passed=rng.random() < 0.6)
    return trajectories, verdicts


def build(store: Store, size: int, rollouts: int, seed: int, run_id: str = "run-1") -> None:
    """``size`` trajectories as round 0 of ``run_id``; the same seed gives the same texts
    (ids are prefixed by the run, so a second run is new rows with texts already embedded)."""
    rng = random.Random(seed)
    trajectories, verdicts = [], {}
    for task in range(size // rollouts):
        ts, vs = make_task(task, rollouts, rng, prefix="" if run_id == "run-1" else f"{run_id}-")
        trajectories.extend(ts)
        verdicts.update(vs)
    write_round(
        store, trajectories, verdicts, run_id=run_id, domains={"shop": "retail", "store": "retail"}
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,2000,5000,10000")
    ap.add_argument("--rollouts", type=int, default=5)
    ap.add_argument("--no-embeddings", action="store_true")
    ap.add_argument("--fake-embedder", action="store_true", help="hash embedder (no model)")
    args = ap.parse_args()
    cfg = CurationConfig(embeddings=not args.no_embeddings)
    embedder = hash_embedder(384) if args.fake_embedder else None
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(Path(tmp) / "bench.duckdb")
            t0 = time.perf_counter()
            build(store, size, args.rollouts, seed=size)
            built = time.perf_counter() - t0
            t0 = time.perf_counter()
            report = curate_round(store, "run-1", 0, cfg, embedder=embedder)
            total = time.perf_counter() - t0
            again = time.perf_counter()
            reused = curate_round(store, "run-1", 0, cfg, embedder=embedder)
            again = time.perf_counter() - again
            # a second run of the same texts: every embedding comes from the store's digest cache
            build(store, size, args.rollouts, seed=size, run_id="run-2")
            warm_start = time.perf_counter()
            warm_report = curate_round(store, "run-2", 0, cfg, embedder=embedder)
            warm = time.perf_counter() - warm_start
        rows.append((size, total, report, built, again, reused.reused))
        stages = "  ".join(f"{k} {v:.2f}" for k, v in report.timings.items())
        warm_stages = "  ".join(f"{k} {v:.2f}" for k, v in warm_report.timings.items())
        print(
            f"{size:>6} trajectories: curate {total:6.2f} s  (build {built:.1f} s; "
            f"second run {again:.2f} s, reused={reused.reused})\n"
            f"        stages: {stages}\n"
            f"        embedded {report.n_embedded} distinct texts, cached {report.n_embed_cached}; "
            f"tasks {report.n_tasks}, sft {report.n_sft_selected}, rl {report.n_rl_selected}, "
            f"duplicates {report.n_duplicates}, codebook {report.mode_codebook}\n"
            f"        another run of the same texts: curate {warm:6.2f} s (embedded "
            f"{warm_report.n_embedded}, cached {warm_report.n_embed_cached}); "
            f"stages: {warm_stages}",
            flush=True,
        )
        if size == TARGET_SIZE:
            for label, seconds in (("cold digest cache", total), ("warm digest cache", warm)):
                verdict = "met" if seconds <= TARGET_S else "NOT met"
                print(f"        {label}: {seconds:.1f} s, target <= {TARGET_S:.0f} s ({verdict})")
    base_size, base_time = rows[0][0], rows[0][1]
    print("\nsize      total s   s per 1k   ratio to linear")
    for size, total, *_ in rows:
        linear = base_time * size / base_size
        print(f"{size:>6} {total:9.2f} {1000 * total / size:10.2f} {total / linear:12.2f}")


if __name__ == "__main__":
    main()
