"""Evolution against no evolution at the same budget (docs/methods.md §6).

    HF_HUB_OFFLINE=1 python bench/evolution.py [--tasks 6] [--samples 2] [--rounds 3]
                                               [--seed 0] [--out bench/out/evolution]
                                               [--policy TUNED.gguf --distractors 4]

Runs the ``build-dataset`` flow (``trajsynth.flows.build.build_dataset``) twice with the same
seeds, tasks per round, samples and rounds on the embedded model (``llm.base_url`` unset): once
with ``curation.evolution`` on, once off. Each arm has its own store. Prints, per arm and per
round, domain entropy, reasoning-mode entropy and mean action complexity of the dataset after
the round (``round_stats``), then the last round side by side. Target: evolution higher on
all three.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trajsynth.cli.settings import Settings  # noqa: E402
from trajsynth.schemas import RunConfig  # noqa: E402
from trajsynth.store import Store  # noqa: E402

KEYS = ("domain_entropy", "reasoning_mode_entropy", "action_complexity", "error_branch_ratio")


def arm_config(args: argparse.Namespace, evolution: bool) -> RunConfig:
    from trees import policy_ref  # bench/trees.py, beside this file

    base = Settings().run_config(
        tasks=args.tasks,
        samples=args.samples,
        rounds=args.rounds,
        seed=args.seed,
        policy=policy_ref(args.policy),
        llm={"distractors": args.distractors},
    )
    llm = base.llm.model_copy(update={"base_url": None})
    curation = base.curation.model_copy(update={"evolution": evolution})
    return base.model_copy(update={"llm": llm, "curation": curation})


def run_arm(config: RunConfig, store_path: Path, cache_dir: Path) -> list[dict]:
    from trajsynth.flows.build import build_dataset

    result = build_dataset(config=config, store_path=str(store_path), cache_dir=str(cache_dir))
    if inspect.isawaitable(result):
        asyncio.run(result)
    store = Store(store_path)
    return store.query("SELECT * FROM round_stats ORDER BY run_id, round")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/out/evolution"))
    ap.add_argument("--policy", default=None, help="a tuned policy (.gguf) as the assistant")
    ap.add_argument("--distractors", type=int, default=None, help="[run.llm] distractors")
    args = ap.parse_args()
    try:
        import trajsynth.flows.build  # noqa: F401
    except ImportError as exc:
        print(f"trajsynth.flows.build is not there yet ({exc}); nothing run", file=sys.stderr)
        return 2
    results: dict[str, list[dict]] = {}
    for name, evolution in (("evolution", True), ("no evolution", False)):
        out = args.out / name.replace(" ", "_")
        out.mkdir(parents=True, exist_ok=True)
        store_path = out / "synth.duckdb"
        store_path.unlink(missing_ok=True)
        rows = run_arm(arm_config(args, evolution), store_path, args.out / "cache")
        results[name] = rows
        print(f"\n{name}:")
        print("round  " + "  ".join(f"{k:>24}" for k in KEYS) + "  n_accepted")
        for r in rows:
            vals = "  ".join(f"{(r[k] if r[k] is not None else float('nan')):24.4f}" for k in KEYS)
            print(f"{r['round']:>5}  {vals}  {r['n_accepted']:>10}")
    print("\nafter the last round (dataset so far):")
    for key in KEYS[:3]:
        on = results["evolution"][-1][key] if results["evolution"] else None
        off = results["no evolution"][-1][key] if results["no evolution"] else None
        verdict = "higher" if on is not None and off is not None and on > off else "not higher"
        print(f"  {key:24} evolution {on!s:>10.8}  no evolution {off!s:>10.8}  -> {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
