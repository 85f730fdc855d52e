"""Does the data make the policy better? base vs SFT-verified vs SFT-unverified (issue 18).

On the embedded SmolLM2-135M, CPU only:

1. plan training tasks of the seen clusters (``--clusters``; seeds from 1,000) and held-out
   tasks: (a) other seeds of the same clusters, (b) every task of one left-out cluster
   (``--loco``); the leakage check (``training.splits``) runs on both;
2. verified data: the gold demonstrations of the training tasks (replayed, verified);
   unverified data: the base policy's own rollouts of the same tasks, whatever the verifier
   said, cut to the verified set's token count (equal tokens);
3. SFT (LoRA) on each, merge, write a GGUF, serve it back for the assistant role;
4. expert iteration (``--expert-rounds``): the SFT-verified policy acts out new training
   tasks, its verified tries join the gold demos, and the base is trained on the union;
5. evaluate base and every tuned policy on (a) and (b): pass@1 with 95% Wilson intervals.
   A tuned policy is served in the layout it was trained in and decides at every turn
   whether to call; the base is evaluated both steered (a call required after the user:
   what makes it call at all) and free. Each tuned policy is then compared with the steered
   base on the same tasks (``training.eval.compare``: the difference with a paired bootstrap
   interval, and the one-sided sign test over tasks), and each target is marked met or not.
   (b) passes about a tenth as often as (a), so it wants more tasks: ``--loco-tasks``.

The user's turns come from ``TemplateUser`` (no model in the user's seat), so the
policies differ only in the assistant. Every episode, training row and eval lists the tools
its task needs plus the ``--distractors`` nearest (``LLMConfig.distractors``): the same view
for every policy, and rows ~2.5x shorter than with all 13 of the shop's schemas, which is
what makes tens of SFT rows affordable on 2 cores. Prints one table; ``--json`` writes the
figures.

    python bench/efficacy.py --train-per-cluster 4 --heldout-per-cluster 2 --epochs 2
    python bench/efficacy.py --sandbox docker --train-per-cluster 6 --clusters shop,calendar,code \
        --heldout-per-cluster 6 --loco-tasks 70 --samples 2 --epochs 3 --expert-rounds 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from trajsynth.agents.gold import gold_demos
from trajsynth.agents.heldout import eval_assistant, evaluate, plan_eval_tasks
from trajsynth.agents.llm import open_llm_client
from trajsynth.agents.policy import RoleRoutedLLM, serve_policy
from trajsynth.cli.commands.sft import write_sft_rows
from trajsynth.curation.verify import verify
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.schemas import Budgets, EnvState, LLMConfig, SandboxKind
from trajsynth.training.eval import compare, summarize
from trajsynth.training.serve import export_gguf
from trajsynth.training.sft import SFTConfig, sft
from trajsynth.training.splits import check_no_leakage, make_split, task_key


def _tokens(pairs: list[Any]) -> list[int]:
    from trajsynth.training.chat_template import load_tokenizer, render

    tok = load_tokenizer()
    out = []
    for t, _ in pairs:
        ids, _mask = render([m.to_openai() for m in t.messages], t.tools, tok)
        out.append(len(ids))
    return out


def _trainable(pairs: list[Any]) -> list[Any]:
    """The rows the chat template renders: a rollout whose call the model wrote as broken
    JSON is data for the verifier (a `model` failure) but no SFT row (the export refuses it
    too), so it is left out of the unverified set rather than crashing the bench."""
    from trajsynth.training.chat_template import RenderError, load_tokenizer, render

    tok = load_tokenizer()
    out = []
    for pair in pairs:
        try:
            render([m.to_openai() for m in pair[0].messages], pair[0].tools, tok)
        except RenderError:
            continue
        out.append(pair)
    return out


def _take(pairs: list[Any], tokens: list[int], budget: int) -> tuple[list[Any], int]:
    """The first rows whose tokens fit in ``budget``."""
    out, used = [], 0
    for pair, n in zip(pairs, tokens, strict=True):
        if used + n > budget:
            continue
        out.append(pair)
        used += n
    return out, used


def _compared(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """``training.eval.compare`` as JSON, or no tasks when the two share none counted."""
    try:
        return compare(a, b).model_dump()
    except ValueError:
        return {"n_tasks": 0}


def _targets(
    table: list[dict[str, Any]], compared: list[dict[str, Any]], loco: str
) -> Iterator[tuple[str, bool]]:
    """Issue 18's targets, each met or not: (a) doubled, verified above unverified, (b)
    above base; "above" is a one-sided sign test over tasks at 5%."""
    rows = {r["policy"]: r for r in table}

    def rate(policy: str, split: str) -> float:
        iv = rows.get(policy, {}).get(split)
        return iv["estimate"] if iv else 0.0

    def beats(a: str, b: str, split: str) -> bool:
        found = [c for c in compared if (c["a"], c["b"], c["split"]) == (a, b, split)]
        return bool(found and found[0].get("n_tasks") and found[0]["p_value"] < 0.05)

    a, b = "a_heldout_seeds", f"b_loco_{loco}"
    tuned = [p for p in rows if p.startswith(("sft-verified", "expert-"))]
    base_a = rate("base", a)
    yield "SFT >= 2x base on (a)", any(rate(p, a) >= 2 * base_a and rate(p, a) > 0 for p in tuned)
    yield "verified > unverified on (a) (p < 0.05)", beats("sft-verified", "sft-unverified", a)
    yield "(b) above base (p < 0.05)", any(beats(p, "base", b) for p in tuned)


def _failures(tries: list[Any]) -> dict[str, int]:
    """Failure classes of the tries that did not pass, most common first
    ("constraint_failed": the episode ended cleanly and the verifier failed it)."""
    counts = Counter(t.failure_class or "constraint_failed" for t in tries if not t.passed)
    return dict(counts.most_common())


@asynccontextmanager
async def _policy_client(policy: str):
    llm = LLMConfig(temperature=0.7, max_tokens=128)
    if policy == "embedded":
        async with open_llm_client(llm) as client:
            yield client
    else:
        async with serve_policy(policy, llm) as client:
            yield client


async def _rollouts(policy: str, tasks, clusters, sandbox, budgets, distractors, run_id):
    """One rollout of every task by ``policy``, with its verdict (unfiltered)."""
    from trajsynth.agents.context import shown_tools
    from trajsynth.agents.gold import TemplateUser
    from trajsynth.agents.rollout import run_episode
    from trajsynth.agents.user_sim import UserSimulator
    from trajsynth.mcp_servers.environment import open_environment

    pairs = []
    async with _policy_client(policy) as client:
        for task in tasks:
            async with open_environment(
                clusters[task.cluster_id], sandbox_kind=sandbox, seed=task.seed
            ) as env:
                result = await run_episode(
                    blueprint=task,
                    env=env,
                    llm=RoleRoutedLLM(client, TemplateUser(task)),
                    assistant=eval_assistant(True, tuned=policy != "embedded"),
                    user_sim=UserSimulator(),
                    budgets=budgets,
                    run_id=run_id,
                    shown=shown_tools(
                        task, env.tools, context_tokens=None, distractors=distractors
                    ),
                )
            state = result.final_state or EnvState(state_hash="unavailable", readable=False)
            pairs.append((result.trajectory, verify(result.trajectory, task.constraints, state)))
    return pairs


async def _eval(policy: str, tasks, clusters, sandbox, budgets, samples, distractors, free=False):
    llm = LLMConfig(temperature=0.7, max_tokens=128)
    kw = dict(
        samples=samples,
        run_id=f"bench:{policy}",
        assistant=eval_assistant(True, tuned=free or policy != "embedded"),
        budgets=budgets,
        sandbox_kind=sandbox,
        template_user=True,
        distractors=distractors,
    )
    if policy == "embedded":
        async with open_llm_client(llm) as base:
            return await evaluate(tasks, clusters, base, **kw)
    async with serve_policy(policy, llm) as tuned:
        return await evaluate(tasks, clusters, tuned, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", default="shop,calendar")
    ap.add_argument("--loco", default="travel")
    ap.add_argument("--train-per-cluster", type=int, default=4)
    ap.add_argument("--heldout-per-cluster", type=int, default=2)
    ap.add_argument(
        "--loco-tasks",
        type=int,
        default=None,
        help="distinct tasks of the left-out cluster, (b) (default: --heldout-per-cluster)",
    )
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument(
        "--distractors",
        type=int,
        default=4,
        help="tools listed: the needed ones plus the N nearest, the same in training rows "
        "and evals (LLMConfig.distractors); -1: every tool",
    )
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 autocast in SFT; default: where the CPU has avx512_bf16/AMX (12.1 vs 18.7 s "
        "a 2,350-token step there; emulated elsewhere, about 10x slower than fp32)",
    )
    ap.add_argument(
        "--expert-rounds",
        type=int,
        default=1,
        help="rounds of expert iteration after SFT on the gold demos: the tuned policy acts "
        "out new training tasks, its verified tries join the demos, SFT again from the base",
    )
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep the models an earlier run with the same --work and arguments trained "
        "(their GGUF and train.json), and train only what is missing",
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--sandbox",
        default="local",
        choices=[k.value for k in SandboxKind],
        help="where the tools run (docker where the local sandbox cannot see the packages)",
    )
    args = ap.parse_args()
    distractors = None if args.distractors < 0 else args.distractors
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-efficacy-"))
    work.mkdir(parents=True, exist_ok=True)
    sandbox = SandboxKind(args.sandbox)
    seen = [c.strip() for c in args.clusters.split(",") if c.strip()]
    clusters = {c: get_cluster(c) for c in [*seen, args.loco]}
    budgets = Budgets(max_turns=4, max_tokens=1500)
    t0 = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - t0:7.0f} s] {msg}", flush=True)  # noqa: E731

    train_tasks = asyncio.run(
        plan_eval_tasks(
            [clusters[c] for c in seen],
            args.train_per_cluster,
            sandbox_kind=sandbox,
            seed_base=1_000,
        )
    )
    heldout = asyncio.run(
        plan_eval_tasks([clusters[c] for c in seen], args.heldout_per_cluster, sandbox_kind=sandbox)
    )
    loco = asyncio.run(
        plan_eval_tasks(
            [clusters[args.loco]], args.loco_tasks or args.heldout_per_cluster, sandbox_kind=sandbox
        )
    )
    train_keys = [task_key(t) for t in train_tasks]
    split_a = make_split("heldout", "heldout-seeds", [task_key(t) for t in heldout], train_keys)
    split_b = make_split("loco", "loco", [task_key(t) for t in loco], train_keys, cluster=args.loco)
    heldout = [t for t in heldout if t.blueprint_id in split_a.eval_ids]
    loco = [t for t in loco if t.blueprint_id in split_b.eval_ids]
    check_no_leakage([task_key(t) for t in heldout + loco], train_keys)
    log(f"tasks: {len(train_tasks)} train, {len(heldout)} held-out seeds, {len(loco)} {args.loco}")

    verified = asyncio.run(
        gold_demos(
            train_tasks, clusters, run_id="bench", sandbox_kind=sandbox, distractors=distractors
        )
    )
    log(f"gold demos: {len(verified)} of {len(train_tasks)} replays verified")
    verified_all = verified
    policies: dict[str, str] = {}  # the tuned ones, by name: their GGUF
    figures: dict[str, Any] = {"train": {}, "distractors": distractors, "expert": []}

    def trained(name: str) -> Path | None:
        """With ``--reuse``: the GGUF and figures an earlier run with this --work left."""
        gguf, kept = work / name / "model.f16.gguf", work / name / "train.json"
        return gguf if args.reuse and gguf.is_file() and kept.is_file() else None

    if trained("sft-verified") and trained("sft-unverified"):
        verified = unverified = []  # both models are there: their data was made by that run
        log("sft-verified and sft-unverified: reused from --work (--reuse)")
    else:
        rollouts = asyncio.run(
            _rollouts(
                "embedded", train_tasks, clusters, sandbox, budgets, distractors, "bench-base"
            )
        )
        trainable = _trainable(rollouts)
        log(f"base rollouts: {len(trainable)} of {len(rollouts)} render for training")
        v_tokens, u_tokens = _tokens(verified), _tokens(trainable)
        budget = min(sum(v_tokens), sum(u_tokens))  # equal tokens: the smaller set's total
        unverified, used = _take(trainable, u_tokens, budget)
        verified, v_used = _take(verified, v_tokens, used)  # whole rows: as close as they allow
        if not verified:
            verified, v_used = _take(verified_all, v_tokens, budget)
        base_passed = sum(v.passed for _, v in rollouts)
        log(
            f"data: {len(verified)} verified gold demos ({v_used} tokens); "
            f"{len(unverified)} unverified base rollouts ({used} tokens, {base_passed}/"
            f"{len(rollouts)} of them passed)"
        )

    def train(name: str, pairs: list[Any]) -> str:
        reused = trained(name)
        if reused is not None:
            figures["train"][name] = json.loads((work / name / "train.json").read_text())
            return str(reused)
        data = write_sft_rows(pairs, work / f"data-{name}")
        cfg = SFTConfig(
            data=str(data),
            output_dir=str(work / name),
            num_train_epochs=args.epochs,
            per_device_train_batch_size=1,
            gradient_accumulation_steps=1,
            learning_rate=args.lr,
            bf16="auto" if args.bf16 is None else args.bf16,
        )
        result = sft(cfg)
        gguf = export_gguf(result.model_dir, work / name / "model.f16.gguf")
        figures["train"][name] = {
            "rows": result.n_rows,
            "tokens": result.n_tokens,
            "steps": result.steps,
            "loss_first": result.losses[0] if result.losses else None,
            "loss_last": result.losses[-1] if result.losses else None,
            "seconds": result.seconds,
            "peak_rss_mb": result.peak_rss_mb,
        }
        (work / name / "train.json").write_text(json.dumps(figures["train"][name]))
        log(
            f"{name}: {result.n_rows} rows, {result.n_tokens} tokens, {result.steps} steps in "
            f"{result.seconds:.0f} s, loss {result.losses[:1]} -> {result.losses[-1:]}"
        )
        return str(gguf)

    for name, pairs in (("sft-verified", verified), ("sft-unverified", unverified)):
        policies[name] = train(name, pairs)

    # expert iteration (STaR / ReST, docs/methods.md §15): the tuned policy acts out new training
    # tasks; its verified tries join the demos and the base is trained again on the union
    demos, policy = list(verified_all), policies["sft-verified"]
    for rnd in range(1, args.expert_rounds + 1):
        new_tasks = asyncio.run(
            plan_eval_tasks(
                [clusters[c] for c in seen],
                args.train_per_cluster,
                sandbox_kind=sandbox,
                seed_base=1_000 + 1_000 * rnd,
            )
        )
        # a new task may repeat an eval task's tool path and constraints: it is left out, as
        # make_split leaves out eval tasks that repeat a training task
        banned = {task_key(t).signature for t in heldout + loco}
        new_tasks = [t for t in new_tasks if task_key(t).signature not in banned]
        check_no_leakage([task_key(t) for t in heldout + loco], [task_key(t) for t in new_tasks])
        tries = asyncio.run(
            _rollouts(policy, new_tasks, clusters, sandbox, budgets, distractors, f"bench-ei{rnd}")
        )
        kept = [(t, v) for t, v in tries if v.passed]
        figures["expert"].append({"round": rnd, "tasks": len(new_tasks), "verified": len(kept)})
        log(f"expert round {rnd}: {len(kept)} of {len(tries)} tries on new tasks verified")
        if not kept:
            break
        demos += kept
        train_keys += [task_key(t) for t in new_tasks]
        policy = policies[f"expert-{rnd}"] = train(f"expert-{rnd}", demos)

    table = []
    # the base model is evaluated as it is steered (a call required after the user) and free
    # as the tuned policies are (it then rarely calls at all)
    runs = [("base", "embedded", False), ("base (free)", "embedded", True)]
    runs += [(name, policy, True) for name, policy in policies.items()]
    splits = {"a_heldout_seeds": heldout, f"b_loco_{args.loco}": loco}
    tries_of: dict[tuple[str, str], list[Any]] = {}
    for name, policy, free in runs:
        row: dict[str, Any] = {"policy": name}
        for split, tasks in splits.items():
            tries = tries_of[name, split] = asyncio.run(
                _eval(policy, tasks, clusters, sandbox, budgets, args.samples, distractors, free)
            )
            s = summarize(tries, k=args.samples)
            row[split] = s.pass1.model_dump() if s.pass1 else None
            row[f"{split}_n"] = s.n_tries - s.n_excluded
            row[f"{split}_failures"] = _failures(tries)
            log(f"eval {name} on {split}: {row[split]}")
        table.append(row)
    figures["eval"] = table
    # each tuned policy against the steered base and SFT-verified against SFT-unverified,
    # paired by task: overlapping intervals do not settle "above base"
    pairs = [(name, "base") for name in policies]
    pairs.append(("sft-verified", "sft-unverified"))
    figures["compare"] = [
        {"a": a, "b": b, "split": split, **_compared(tries_of[a, split], tries_of[b, split])}
        for a, b in pairs
        for split in splits
    ]
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures["wall_s"] = time.perf_counter() - t0

    print()
    print(
        f"{'policy':16} {'(a) held-out seeds pass@1 [95% CI]':38} {'(b) LOCO pass@1 [95% CI]':32}"
    )
    for row in table:
        cells = []
        for key in ("a_heldout_seeds", f"b_loco_{args.loco}"):
            iv = row[key]
            n = row[f"{key}_n"]
            cells.append(
                "-"
                if iv is None
                else f"{iv['estimate']:.2f} [{iv['low']:.2f}, {iv['high']:.2f}] n={n}"
            )
        print(f"{row['policy']:16} {cells[0]:38} {cells[1]:32}")
    print("why the tries failed (failure class: count), per policy and split:")
    for row in table:
        for key in ("a_heldout_seeds", f"b_loco_{args.loco}"):
            shown = ", ".join(f"{k}: {v}" for k, v in row[f"{key}_failures"].items()) or "-"
            print(f"  {row['policy']:16} {key:20} {shown}")
    for ex in figures["expert"]:
        print(f"expert round {ex['round']}: {ex['verified']} of {ex['tasks']} new tasks verified")
    shown = "every tool" if distractors is None else f"needed + {distractors} nearest"
    print(f"tools listed: {shown} (training rows and evals alike)")
    print("paired by task (A - B, 95% paired bootstrap; one-sided sign test that A beats B):")
    for c in figures["compare"]:
        if c.get("n_tasks"):
            d = c["difference"]
            print(
                f"  {c['a']:>14} - {c['b']:<14} {c['split']:20} {d['estimate']:+.3f} "
                f"[{d['low']:+.3f}, {d['high']:+.3f}]  tasks {c['a_better']} won, "
                f"{c['b_better']} lost, {c['ties']} tied  p = {c['p_value']:.4f}"
            )
    for target, met in _targets(table, figures["compare"], args.loco):
        print(f"target {target}: {'met' if met else 'not met'}")
    print(f"wall {figures['wall_s']:.0f} s, peak RSS {figures['peak_rss_mb'] / 1024:.2f} GB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
