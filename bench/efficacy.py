"""What the data is worth: SFT on the product's own output, scored on new exercises, by arm.

Every arm's data comes through the user's path, run as a user runs it (the `synth` command
in a subprocess, one store under ``--work``):

0. round 0 (the same for every arm): gold demonstrations of training tasks planned from
   their own seeds (``planning.heldout.plan_eval_tasks`` at seed base 1,000; the blueprints are
   stored so the lineage names them) train a *generator* with ``synth sft --data``;
1. ``synth run --policy GENERATOR`` twice on the seen clusters, ``--rollout tree`` and
   ``--rollout linear``, each capped at the same generation tokens
   (``budgets.max_run_tokens``); curation runs inside each;
2. ``synth export`` of each run: the product's SFT selection;
3. the arms, each cut to one budget of *assistant tokens the loss trains on*
   (``efficacy_arms.take_budget``; the smallest arm's total):

   - ``product``: the tree run's export (trees are the product's default);
   - ``unfiltered``: the tree run's trajectories, whatever the verifier said, at random;
   - ``random-verified``: its verified trajectories at random instead of by the selection;
   - ``linear``: the linear run's export (against ``product``: trees vs linear at equal
     generation tokens);
   - ``format-control``: the product's trajectories with their argument values swapped
     between trajectories (``efficacy_arms.swap_values``), re-verified, kept only where the
     verifier now fails them: the same template, other content;
   - ``gold``: the gold demonstrations alone;

4. ``synth sft --config`` (data/train/sft-cpu.toml, the recipe a stranger's script uses,
   with the seed set) on each arm, ``--seeds`` times;
5. held-out tasks of three strata (``training.splits``), planned from the eval seed and
   dropped where they leak into the training tasks of *any* arm (all blueprints of both runs
   and the gold tasks): ``new-entities`` and ``path-disjoint`` of the seen clusters, and the
   left-out cluster ``--loco``. Each model's own recorded lineage (``flows.lineage``, read
   from the ``models`` table, ancestors included) is checked against them again;
6. base and every model on every stratum (``training.eval``'s tries; the user's turns from
   ``TemplateUser`` so arms differ only in the assistant); pass@1 with a bootstrap interval
   over tasks, each arm against base and the arm pairs the issue names paired by task (paired
   bootstrap of the difference, one-sided sign test). "Beats" is p < 0.05; the number of
   comparisons is printed with Holm-adjusted p beside each.

Everything cached is keyed by its content (arguments, data hash, code version:
``efficacy_arms.content_key``), so a rerun reuses only what the same code made from the same
data. ``--small`` runs every arm end to end on a few tasks with one seed and checks the
plumbing (every arm trained on its budget, lineage complete, no leak, every eval scored),
never the gains.

    nice python bench/efficacy.py --small --work /tmp/eff-small
    python bench/efficacy.py --work /tmp/eff --seeds 3 --eval-tasks 60 --samples 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from efficacy_arms import (  # noqa: E402
    assistant_tokens,
    cached,
    code_version,
    content_key,
    swap_values,
    take_budget,
)

from trajsynth.schemas import SFTRow, Trajectory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("product", "unfiltered", "random-verified", "linear", "format-control", "gold")
STRATA = ("new-entities", "path-disjoint", "loco")
# (A, B, what A beating B would show)
PAIRS = (
    ("random-verified", "unfiltered", "verification adds"),
    ("product", "random-verified", "diversity selection adds"),
    ("product", "linear", "trees add, per generation token"),
    ("product", "format-control", "the content, not the protocol"),
)


T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.0f} s] {msg}", flush=True)


# --- the user's path: the `synth` command --------------------------------------------
class Synth:
    """``synth`` in a subprocess against the bench's store, as a user runs it."""

    def __init__(self, work: Path, sandbox: str, distractors: int, max_turns: int) -> None:
        self.work = work
        self.store = work / "store.duckdb"
        self.env = {
            **os.environ,
            "SYNTH_STORE_PATH": str(self.store),
            "SYNTH_RUN__SANDBOX": sandbox,
            "SYNTH_RUN__LLM__DISTRACTORS": str(distractors),
            "SYNTH_RUN__BUDGETS__MAX_TURNS": str(max_turns),
        }

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> str:
        cmd = [sys.executable, "-m", "trajsynth.cli", *args]
        done = subprocess.run(
            cmd, cwd=self.work, env={**self.env, **(env or {})}, capture_output=True, text=True
        )
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-3000:]
            raise SystemExit(f"`synth {' '.join(args)}` failed ({done.returncode}):\n{tail}")
        return done.stdout


def _store() -> Any:
    from trajsynth.store import Store

    return Store


def sft_config(
    work: Path, name: str, *, seed: int, epochs: float, max_steps: int, accumulate: int | None
) -> Path:
    """data/train/sft-cpu.toml with the seed and length set (and, for --small, the rows per
    step): the recipe, unchanged else."""
    import tomllib

    recipe = tomllib.loads((ROOT / "src/trajsynth/data/train/sft-cpu.toml").read_text())
    sft = recipe["sft"]
    sft.update(seed=seed, num_train_epochs=epochs, max_steps=max_steps)
    if accumulate is not None:
        sft["gradient_accumulation_steps"] = accumulate
    lines = ["[sft]"]
    for k, v in sft.items():
        if k != "lora":
            lines.append(f"{k} = {json.dumps(v)}")
    lines.append("[sft.lora]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in sft["lora"].items()]
    path = work / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_rows(rows: Sequence[SFTRow], folder: Path) -> Path:
    from trajsynth.flows.improve import write_rows as write

    return write(rows, folder)


def data_hash_of(rows: Sequence[SFTRow]) -> str:
    from trajsynth.training.records import data_hash

    return data_hash(
        [{"messages": [m.to_openai() for m in r.messages], "tools": r.tools} for r in rows]
    )


def train(
    synth: Synth,
    name: str,
    rows: list[SFTRow],
    seed: int,
    args: Any,
    code: str,
    *,
    max_steps: int | None = None,
) -> dict:
    """`synth sft --config RECIPE --data ROWS`: the model's folder, GGUF and models row id."""
    steps = args.max_steps if max_steps is None else max_steps
    key = content_key(
        "sft",
        args={
            "seed": seed,
            "epochs": args.epochs,
            "max_steps": steps,
            "accumulate": args.accumulate,
        },
        data=data_hash_of(rows),
        code=code,
    )

    def make(where: Path) -> dict[str, Any]:
        data = write_rows(rows, where / "data")
        cfg = sft_config(
            where, "sft", seed=seed, epochs=args.epochs, max_steps=steps, accumulate=args.accumulate
        )
        synth(
            "sft",
            "--config",
            str(cfg),
            "--data",
            str(data),
            "--output-dir",
            str(where / "out"),
            "--store",
            str(synth.store),
        )
        (row,) = _store()(synth.store).query(
            "SELECT model_id, path, gguf_path, n_rows, n_tokens FROM models "
            "ORDER BY created_at DESC LIMIT 1"
        )
        return {"name": name, "seed": seed, **row}

    result, reused = cached(synth.work / "cache", key, make)
    log(f"sft {name} seed {seed}: {result['n_rows']} rows{' (cached)' if reused else ''}")
    return result


def run_and_export(synth: Synth, mode: str, generator: str, args: Any, code: str) -> dict:
    """`synth run --policy GENERATOR --rollout MODE`, then `synth export` of that run."""
    # blueprint ids are content ids: two runs of one seed in one store plan the same tasks,
    # stored once under the first run, and the second run finds none of its own
    seed = args.run_seed + (1 if mode == "linear" else 0)

    key = content_key(
        "run",
        args={
            "mode": mode,
            "tasks": args.run_tasks,
            "samples": args.run_samples,
            "seen": args.seen,
            "tokens": args.run_tokens,
            "seed": seed,
        },
        data=generator,
        code=code,
    )

    def make(where: Path) -> dict[str, Any]:
        Store = _store()
        before = {r["run_id"] for r in Store(synth.store).query("SELECT run_id FROM runs")}
        synth(
            "run",
            "--tasks",
            str(args.run_tasks),
            "--clusters",
            ",".join(args.seen),
            "--samples",
            str(args.run_samples),
            "--rollout",
            mode,
            "--policy",
            generator,
            "--seed",
            str(seed),
            "--rounds",
            "1",
            env={"SYNTH_RUN__BUDGETS__MAX_RUN_TOKENS": str(args.run_tokens)},
        )
        runs = Store(synth.store).query("SELECT run_id FROM runs ORDER BY updated_at DESC")
        new = [r["run_id"] for r in runs if r["run_id"] not in before] or [runs[0]["run_id"]]
        run_id = new[0]
        try:
            synth("export", "--run", run_id, "--out", str(where / "export"), "--overwrite")
            export = str(where / "export")
        except SystemExit as exc:  # an empty selection: the arm has no data, and says so
            log(f"export of {run_id}: {str(exc).splitlines()[-1]}")
            export = None
        from trajsynth.store.summary import summarize_run

        s = summarize_run(Store(synth.store), run_id, wall_s=0.0)
        return {
            "run_id": run_id,
            "export": export,
            "generation_tokens": sum(s.tokens_by_role.values()),
            "trajectories": s.trajectories,
            "passed": s.passed,
        }

    result, reused = cached(synth.work / "cache", key, make)
    log(
        f"run {mode}: {result['run_id']} {result['passed']}/{result['trajectories']} passed, "
        f"{result['generation_tokens']} generation tokens{' (cached)' if reused else ''}"
    )
    return result


# --- the arms' data ------------------------------------------------------------------
def exported_rows(folder: str | None) -> list[SFTRow]:
    """The SFT rows a `synth export` folder holds, as a user's script reads them."""
    from trajsynth.training.sft import load_sft_dataset

    out: list[SFTRow] = []
    if folder is None:
        return out
    for r in load_sft_dataset(folder).to_list():
        meta = json.loads(r["metadata"]) if r.get("metadata") else {}
        tools = [json.loads(t) if isinstance(t, str) else t for t in r["tools"]]
        messages = [{k: v for k, v in m.items() if v is not None} for m in r["messages"]]
        out.append(
            SFTRow.model_validate(
                {
                    "id": r["id"],
                    "messages": messages,
                    "tools": tools,
                    "task_id": r["task_id"],
                    "cluster_id": r["cluster_id"],
                    "score": r["score"] or 0.0,
                    "verdict": bool(r["verdict"]),
                    "metadata": meta,
                }
            )
        )
    return out


def run_trajectories(store: Any, run_id: str) -> list[tuple[Trajectory, dict[str, Any]]]:
    """Every trajectory of a run with its verdict row (passed, excluded)."""
    rows = store.query(
        "SELECT t.*, v.passed AS v_passed, v.excluded AS v_excluded FROM trajectories t "
        "LEFT JOIN verdicts v ON v.trajectory_id = t.trajectory_id WHERE t.run_id = ? "
        "QUALIFY row_number() OVER (PARTITION BY t.trajectory_id ORDER BY v.verdict_id) = 1 "
        "ORDER BY t.trajectory_id",
        [run_id],
    )
    fields = Trajectory.model_fields
    out = []
    for r in rows:
        data = {k: v for k, v in r.items() if k in fields and v is not None}
        out.append(
            (
                Trajectory.model_validate(data),
                {"passed": bool(r["v_passed"]), "excluded": bool(r["v_excluded"])},
            )
        )
    return out


def as_row(t: Trajectory, passed: bool) -> SFTRow:
    return SFTRow(
        id=t.trajectory_id,
        messages=t.messages,
        tools=t.tools,
        task_id=t.blueprint_id,
        cluster_id=t.cluster_id,
        score=float(passed),
        verdict=passed,
        metadata={"run_id": t.run_id, "round": t.round},
    )


def renderable(rows: list[SFTRow], tokenizer: Any) -> tuple[list[SFTRow], list[int]]:
    """Rows the chat template renders (a call the model wrote as broken JSON is no SFT row;
    the export refuses it too) and their assistant tokens."""
    from trajsynth.llm.chat_template import RenderError

    kept, tokens = [], []
    for row in rows:
        try:
            (n,) = assistant_tokens([row], tokenizer)
        except RenderError:
            continue
        if n:
            kept.append(row)
            tokens.append(n)
    return kept, tokens


def format_control(store: Any, product: list[SFTRow], seed: int) -> tuple[list[SFTRow], int]:
    """The product's trajectories with values swapped, kept where the verifier fails them;
    returns them and how many swapped ones still passed (left out)."""
    from trajsynth.curation.verify import verify
    from trajsynth.flows.lineage import read_blueprints
    from trajsynth.schemas import EnvState

    ids = [r.id for r in product]
    if not ids:
        return [], 0
    marks = ", ".join("?" for _ in ids)
    rows = store.query(f"SELECT * FROM trajectories WHERE trajectory_id IN ({marks})", ids)
    trajs = [
        Trajectory.model_validate(
            {k: v for k, v in r.items() if k in Trajectory.model_fields and v is not None}
        )
        for r in rows
    ]
    tasks = {b.blueprint_id: b for b in read_blueprints(store, ids=[t.blueprint_id for t in trajs])}
    states = {}
    hashes = [t.final_state_hash for t in trajs if t.final_state_hash]
    if hashes:
        marks = ", ".join("?" for _ in hashes)
        for r in store.query(
            f"SELECT state_hash, state FROM final_states WHERE state_hash IN ({marks})", hashes
        ):
            states[r["state_hash"]] = EnvState.model_validate(r["state"])
    kept, still = [], 0
    for t in swap_values(trajs, seed=seed):
        state = states.get(t.final_state_hash or "") or EnvState(
            state_hash="unavailable", readable=False
        )
        task = tasks.get(t.blueprint_id)
        if task is None or verify(t, task.constraints, state).passed:
            still += 1
            continue
        kept.append(as_row(t, False))
    return kept, still


# --- held-out tasks and evals --------------------------------------------------------
def plan_strata(args: Any, train_keys: list[Any]) -> dict[str, list[Any]]:
    """Each stratum's held-out tasks; a stratum with none left (every candidate leaked or
    fell in the other stratum) is empty and said so, never filled from another."""
    from trajsynth.cli.commands.eval import plan_split
    from trajsynth.schemas import InputError, SandboxKind

    out: dict[str, list[Any]] = {}
    for stratum in STRATA:
        split = f"loco:{args.loco}" if stratum == "loco" else stratum
        try:
            planned = asyncio.run(
                plan_split(
                    split,
                    clusters=args.seen,
                    per_cluster=args.eval_tasks,
                    train_keys=train_keys,
                    sandbox=SandboxKind(args.sandbox),
                    seed=args.eval_seed,
                )
            )
        except InputError as exc:
            log(f"stratum {stratum}: no tasks ({exc})")
            out[stratum] = []
            continue
        out[stratum] = planned.tasks
        log(
            f"stratum {stratum}: {len(planned.tasks)} tasks "
            f"({len(planned.dropped)} of {planned.n_planned} planned dropped: they leak)"
        )
    return out


def evaluate(
    synth: Synth, policy: str, key_of: str, tasks: list[Any], stratum: str, args: Any, code: str
) -> list[Any]:
    from trajsynth.cli.commands.eval import run_eval
    from trajsynth.schemas import Budgets, SandboxKind
    from trajsynth.schemas.evals import TryResult
    from trajsynth.training.eval import summarize
    from trajsynth.training.records import eval_row

    key = content_key(
        "eval",
        args={
            "tasks": sorted(t.blueprint_id for t in tasks),
            "samples": args.samples,
            "distractors": args.distractors,
            "max_turns": args.max_turns,
        },
        data=key_of,
        code=code,
    )

    def make(_where: Path) -> dict[str, Any]:
        summary, tries = asyncio.run(
            run_eval(
                policy=policy,
                tasks=tasks,
                samples=args.samples,
                budgets=Budgets(max_turns=args.max_turns, max_tokens=1500),
                sandbox=SandboxKind(args.sandbox),
                template_user=True,
                distractors=args.distractors,
            )
        )
        row = eval_row(
            policy=policy,
            model_id=None if policy == "embedded" else key_of,
            split=stratum,
            split_kind=stratum,
            summary=summary,
            tries=tries,
        )
        _store()(synth.store).insert("evals", [row])
        return {"eval_id": row["eval_id"], "tries": [t.model_dump(mode="json") for t in tries]}

    result, _ = cached(synth.work / "cache", key, make)
    tries = [TryResult.model_validate(t) for t in result["tries"]]
    s = summarize(tries, k=args.samples)
    log(
        f"eval {key_of[:24]} on {stratum}: pass@1 "
        f"{'-' if s.pass1 is None else f'{s.pass1.estimate:.3f}'} ({s.n_tasks} tasks)"
    )
    return tries


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# --- main ------------------------------------------------------------------------------
def parse(argv: Sequence[str] | None = None) -> Any:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="store, cache and models")
    ap.add_argument("--small", action="store_true", help="every arm end to end, in minutes")
    ap.add_argument("--seen", default="shop,calendar")
    ap.add_argument("--loco", default="travel")
    ap.add_argument("--gold-tasks", type=int, default=6, help="gold tasks per seen cluster")
    ap.add_argument("--run-tasks", type=int, default=12, help="tasks of each synth run")
    ap.add_argument("--run-samples", type=int, default=4)
    ap.add_argument(
        "--run-tokens",
        type=int,
        default=200_000,
        help="generation tokens of each run (tree and linear alike)",
    )
    ap.add_argument("--run-seed", type=int, default=7)
    ap.add_argument("--seeds", type=int, default=3, help="SFT seeds per arm")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--max-steps", type=int, default=-1, help="> 0 overrides --epochs")
    ap.add_argument("--accumulate", type=int, default=None, help="rows per step (recipe: 4)")
    ap.add_argument("--generator-steps", type=int, default=-1, help="round 0's SFT steps")
    ap.add_argument("--eval-tasks", type=int, default=60, help="tasks per stratum (per cluster)")
    ap.add_argument("--eval-seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--distractors", type=int, default=4)
    ap.add_argument("--sandbox", default="local")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.small:
        args.gold_tasks, args.run_tasks, args.run_samples, args.run_tokens = 2, 2, 2, 6000
        args.seeds, args.max_steps, args.eval_tasks, args.samples = 1, 2, 1, 1
        args.generator_steps, args.accumulate = 4, 1
        args.max_turns = 3
    args.seen = [c.strip() for c in args.seen.split(",") if c.strip()]
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from trajsynth.flows.lineage import model_lineage, read_blueprints
    from trajsynth.flows.units import _blueprint_row
    from trajsynth.llm.chat_template import load_tokenizer
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.gold import gold_demos
    from trajsynth.planning.heldout import plan_eval_tasks
    from trajsynth.schemas import SandboxKind
    from trajsynth.training.eval import compare, summarize
    from trajsynth.training.splits import check_no_leakage, task_key

    args = parse(argv)
    t_start = time.perf_counter()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    # what computes a cached result from its arguments and data: the package (`synth`
    # itself) and the arms' data builder; this file only orders the steps
    code = code_version(
        [ROOT / "src/trajsynth", Path(__file__).resolve().parent / "efficacy_arms.py"]
    )
    synth = Synth(work, args.sandbox, args.distractors, args.max_turns)
    Store = _store()
    store = Store(synth.store)
    store.migrate()
    sandbox = SandboxKind(args.sandbox)
    tok = load_tokenizer()
    figures: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "code": code}

    # 0. round 0: gold demonstrations of training tasks train the generator
    clusters = {c: get_cluster(c) for c in [*args.seen, args.loco]}
    gold_tasks = asyncio.run(
        plan_eval_tasks(
            [clusters[c] for c in args.seen], args.gold_tasks, sandbox_kind=sandbox, seed_base=1_000
        )
    )
    store.insert("blueprints", [_blueprint_row(b, "bench-gold") for b in gold_tasks])
    pairs = asyncio.run(
        gold_demos(
            gold_tasks,
            clusters,
            run_id="bench-gold",
            sandbox_kind=sandbox,
            distractors=args.distractors,
        )
    )
    gold = [as_row(t, v.passed) for t, v in pairs]
    log(f"gold: {len(gold)} verified demonstrations of {len(gold_tasks)} tasks")
    generator = train(synth, "generator", gold, 0, args, code, max_steps=args.generator_steps)

    # 1-2. the product's runs with the generator, and their exports
    tree = run_and_export(synth, "tree", generator["gguf_path"], args, code)
    linear = run_and_export(synth, "linear", generator["gguf_path"], args, code)
    figures["runs"] = {"tree": tree, "linear": linear}

    # 3. the arms' pools, then one assistant-token budget
    product = exported_rows(tree["export"])
    tree_trajs = run_trajectories(store, tree["run_id"])
    unfiltered = [as_row(t, v["passed"]) for t, v in tree_trajs if not v["excluded"]]
    verified = [r for r in unfiltered if r.verdict]
    control, still_passed = format_control(store, product, seed=0)
    pools = {
        "product": product,
        "unfiltered": unfiltered,
        "random-verified": verified,
        "linear": exported_rows(linear["export"]),
        "format-control": control,
        "gold": gold,
    }
    tokens = {}
    for arm, rows in pools.items():
        pools[arm], tokens[arm] = renderable(rows, tok)
    # an arm with no rows (a generator that passed nothing leaves the selection empty) is
    # reported, never filled from elsewhere; the budget is the smallest arm that has data
    empty = [arm for arm in ARMS if not pools[arm]]
    if empty:
        log(f"arms with no trainable rows, not trained: {', '.join(empty)}")
    figures["empty_arms"] = empty
    budget = min(sum(tokens[a]) for a in ARMS if a not in empty)
    log(
        f"pools (rows, assistant tokens): "
        f"{ {a: (len(pools[a]), sum(tokens[a])) for a in ARMS} }; budget {budget}; format "
        f"control: {still_passed} swapped rows still passed and were left out"
    )
    figures["pools"] = {
        a: {"rows": len(pools[a]), "assistant_tokens": sum(tokens[a])} for a in ARMS
    }
    figures["budget"] = budget
    figures["format_control_still_passed"] = still_passed

    # 4. SFT: every arm, every seed, on the same budget
    models: dict[str, list[dict[str, Any]]] = {}
    figures["trained"] = []
    for arm in ARMS:
        if arm in empty:
            continue
        for seed in range(args.seeds):
            rows, used = take_budget(pools[arm], tokens[arm], budget, seed=seed)
            model = train(synth, arm, rows, seed, args, code)
            models.setdefault(arm, []).append(model)
            figures["trained"].append(
                {
                    "arm": arm,
                    "seed": seed,
                    "rows": len(rows),
                    "assistant_tokens": used,
                    "model_id": model["model_id"],
                }
            )

    # 5. held-out strata against every arm's training tasks (both runs' and gold's)
    run_tasks = read_blueprints(store, run_ids=[tree["run_id"], linear["run_id"]])
    train_keys = [task_key(b) for b in [*gold_tasks, *run_tasks]]
    strata = plan_strata(args, train_keys)
    eval_keys = [task_key(t) for tasks in strata.values() for t in tasks]
    for arm, ms in [("generator", [generator]), *models.items()]:
        for m in ms:
            lineage = model_lineage(store, m["path"])
            if not lineage.complete:
                raise SystemExit(f"{arm}: {lineage.why_incomplete}")
            check_no_leakage(eval_keys, lineage.keys)  # what the model itself recorded
    figures["strata"] = {s: len(t) for s, t in strata.items()}

    # 6. evals, then the table and the paired comparisons
    tries: dict[tuple[str, str], list[Any]] = {}
    for stratum, tasks in strata.items():
        if not tasks:
            continue
        tries["base", stratum] = evaluate(synth, "embedded", "embedded", tasks, stratum, args, code)
        for arm, ms in models.items():
            tries[arm, stratum] = [
                t
                for m in ms
                for t in evaluate(synth, m["gguf_path"], m["model_id"], tasks, stratum, args, code)
            ]
    table = []
    for (arm, stratum), ts in tries.items():
        s = summarize(ts, k=args.samples)
        table.append(
            {
                "arm": arm,
                "stratum": stratum,
                "n_tasks": s.n_tasks,
                "pass1": s.pass1.model_dump() if s.pass1 else None,
            }
        )
    comparisons = [(arm, "base", "SFT on it beats base") for arm in models]
    comparisons += list(PAIRS)
    compared = []
    for a, b, meaning in comparisons:
        for stratum in STRATA:
            if (a, stratum) not in tries or (b, stratum) not in tries:
                continue
            try:
                c = compare(tries[a, stratum], tries[b, stratum])
            except ValueError:
                continue
            compared.append(
                {"a": a, "b": b, "stratum": stratum, "meaning": meaning, **c.model_dump()}
            )
    for c, p in zip(compared, holm([c["p_value"] for c in compared]), strict=True):
        c["p_holm"] = p
        c["beats"] = c["p_value"] < 0.05
    figures["table"], figures["compare"] = table, compared
    figures["wall_s"] = time.perf_counter() - t_start
    figures["date"] = datetime.now(UTC).isoformat(timespec="seconds")

    print()
    print(
        "arm x stratum: pass@1 [95% bootstrap over tasks]; vs base: difference "
        "[95% paired bootstrap], one-sided sign test p"
    )
    vs_base = {(c["a"], c["stratum"]): c for c in compared if c["b"] == "base"}
    for row in table:
        iv = row["pass1"]
        cell = "-" if iv is None else f"{iv['estimate']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}]"
        c = vs_base.get((row["arm"], row["stratum"]))
        diff = (
            ""
            if c is None
            else (
                f"  {c['difference']['estimate']:+.3f} [{c['difference']['low']:+.3f}, "
                f"{c['difference']['high']:+.3f}] p = {c['p_value']:.4f}"
            )
        )
        print(f"  {row['arm']:16} {row['stratum']:14} n={row['n_tasks']:<4} {cell:24}{diff}")
    print(
        f"{len(compared)} paired comparisons; 'beats' = one-sided sign test p < 0.05 "
        "(Holm-adjusted p beside it):"
    )
    for c in compared:
        if c["b"] != "base":
            print(
                f"  {c['a']:>15} vs {c['b']:<15} {c['stratum']:14} p = {c['p_value']:.4f} "
                f"(Holm {c['p_holm']:.4f}) {'beats' if c['beats'] else 'does not beat'}: "
                f"{c['meaning']}"
            )
    print(f"wall {figures['wall_s']:.0f} s; code {code}; store {synth.store}")
    if args.small:
        check_plumbing(figures, args)
        print("plumbing checks passed (--small: no claim about gains)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return figures


def check_plumbing(figures: dict[str, Any], args: Any) -> None:
    """--small's assertions: every arm trained on the budget, strata planned, every
    (arm, stratum) scored, every comparison made. Nothing about which arm wins."""
    trained = figures["trained"]
    # every arm trained, or reported empty (no rows to train on); gold always has rows
    assert {t["arm"] for t in trained} | set(figures["empty_arms"]) == set(ARMS), trained
    assert "gold" not in figures["empty_arms"] and "unfiltered" not in figures["empty_arms"]
    assert all(0 < t["assistant_tokens"] <= figures["budget"] for t in trained), trained
    # matched: no arm trains on less than half the budget (whole rows make it inexact)
    assert all(t["assistant_tokens"] >= figures["budget"] / 2 for t in trained), trained
    assert figures["strata"]["loco"] > 0, figures["strata"]
    assert any(figures["strata"][s] > 0 for s in ("new-entities", "path-disjoint"))
    arms = [a for a in ARMS if a not in figures["empty_arms"]]
    planned = [s for s in STRATA if figures["strata"][s]]
    scored = {(r["arm"], r["stratum"]) for r in figures["table"] if r["n_tasks"]}
    assert scored == {(a, s) for a in ("base", *arms) for s in planned}, scored
    assert {(c["a"], c["b"]) for c in figures["compare"]} >= {(a, "base") for a in arms}


if __name__ == "__main__":
    main()
