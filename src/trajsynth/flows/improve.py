"""Expert iteration (`synth improve`): synthesize, select, SFT, serve, synthesize again.

Round ``i`` builds a run (``synthesize``: the caller's way of running ``build_dataset``, with
its progress display) whose assistant is the policy trained after round ``i-1`` (round 0:
the run's own model). The run's curated SFT selection (verified trajectories only) is the
round's training data; when the policy passed almost nothing (fewer than ``min_verified``)
the verified gold demonstrations of the run's tasks are added (``planning.gold.gold_demos``,
``source = 'gold'`` in each row's metadata), so a policy that solves nothing still has
something to learn from (STaR's rationalization, with the planner's gold path). The next
policy is fine-tuned from the current one (ReST-style: the chain of ``models.parent`` is the
loop), written as a GGUF and served back. The last round only measures: it trains nothing.

Each round is an ``improve_rounds`` row (store/rows.py) linked to the run and to the
``models`` rows of the policy that acted and of the model trained on its data, with the
pass rate, the entropies of the accepted data and the tokens per verified trajectory.

Each round's run uses seed ``config.seed + round``: new tasks of the same clusters, so a
round's pass rate is the policy's on tasks it was not trained on. A round whose model row
and GGUF already exist (same parent, data and config) is not trained again, so a loop
stopped half-way resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trajsynth.export import EmptySelectionError, sft_rows
from trajsynth.flows.lineage import row_lineage
from trajsynth.flows.units import run_id_for
from trajsynth.schemas import (
    Blueprint,
    InputError,
    PolicyRef,
    RunConfig,
    SFTRow,
    Trajectory,
    Verdict,
    content_id,
)
from trajsynth.store import Store
from trajsynth.store.rows import ImproveRoundRow, ModelRow, RoundStatsRow
from trajsynth.store.summary import summarize_run
from trajsynth.training.sft import SFTConfig

__all__ = ["expert_iteration", "gold_rows", "loop_id", "round_rows", "write_rows"]

log = logging.getLogger(__name__)

Synthesize = Callable[[RunConfig], object]


def loop_id(config: RunConfig, rounds: int, sft: SFTConfig) -> str:
    """The same base config, rounds and SFT config is the same loop (its rows are replaced)."""
    return content_id(
        "loop", {"config": config.config_hash(), "rounds": rounds, "sft": sft.config_hash()}
    )


def round_rows(store: Store, run_id: str) -> list[SFTRow]:
    """The run's curated SFT selection: verified trajectories only ([] when none passed)."""
    try:
        return [r for r in sft_rows(store, run_id) if r.verdict]
    except EmptySelectionError:
        return []


def _run_blueprints(store: Store, run_id: str) -> list[Blueprint]:
    return store.read(Blueprint, run_id=run_id)


def _gold_row(trajectory: Trajectory, verdict: Verdict) -> SFTRow:
    return SFTRow(
        id=trajectory.trajectory_id,
        messages=trajectory.messages,
        tools=trajectory.tools,
        task_id=trajectory.blueprint_id,
        cluster_id=trajectory.cluster_id,
        score=verdict.score,
        verdict=verdict.passed,
        metadata={"run_id": trajectory.run_id, "round": trajectory.round, "source": "gold"},
    )


def gold_rows(store: Store, run_id: str, config: RunConfig) -> list[SFTRow]:
    """The verified gold demonstrations of the run's tasks (each replayed in a fresh
    environment and verified like a rollout; a replay that fails its checks is left out)."""
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.gold import gold_demos

    tasks = _run_blueprints(store, run_id)
    clusters = {c: get_cluster(c) for c in sorted({t.cluster_id for t in tasks})}
    pairs = asyncio.run(
        gold_demos(
            tasks,
            clusters,
            run_id=run_id,
            sandbox_kind=config.sandbox,
            distractors=config.llm.distractors,
        )
    )
    return [_gold_row(t, v) for t, v in pairs]


def write_rows(rows: Sequence[SFTRow], folder: Path) -> Path:
    """SFT rows as an export ``synth sft`` reads (Parquet, the tokenizer beside them)."""
    from trajsynth.export import EXPORT_FORMATS
    from trajsynth.llm.chat_template import TOKENIZER_DIR, save_tokenizer_files

    folder.mkdir(parents=True, exist_ok=True)
    EXPORT_FORMATS.get("parquet").write_sft(list(rows), folder)
    save_tokenizer_files(folder / TOKENIZER_DIR)
    return folder


def _trained_model(
    store: Store, rows: Sequence[SFTRow], folder: Path, sft: SFTConfig, run_id: str
) -> dict[str, Any]:
    """Fine-tune ``sft.model`` on ``rows``, write its GGUF, record its ``models`` row; a
    model with the same parent, data and config already trained is reused."""
    from trajsynth.training.records import data_hash, model_row
    from trajsynth.training.serve import export_gguf
    from trajsynth.training.sft import load_sft_dataset
    from trajsynth.training.sft import sft as run_sft

    data = write_rows(rows, folder / "data")
    cfg = sft.model_copy(update={"data": str(data), "output_dir": str(folder / "sft")})
    method = "sft-lora" if cfg.lora.enabled else "sft-full"
    data_rows = load_sft_dataset(
        data, max_rows=cfg.max_rows, extra_columns=("task_id", "run_id")
    ).to_list()
    config = cfg.model_dump(mode="json")
    expected = model_row(path="", parent=cfg.model, method=method, run_ids=[run_id],
                         data=data_hash(data_rows), n_rows=0, n_tokens=0, config=config,
                         metrics={})  # fmt: skip
    done = store.read(ModelRow, model_id=expected["model_id"])
    if done and done[0].gguf_path and Path(done[0].gguf_path).is_file():
        log.info("round data already trained: reusing %s", expected["model_id"])
        return done[0].model_dump()
    result = run_sft(cfg)
    gguf = export_gguf(result.model_dir, Path(cfg.output_dir) / "model.f16.gguf")
    lineage = row_lineage(store, data_rows)
    row = model_row(
        path=result.model_dir,
        parent=cfg.model,
        method=method,
        run_ids=[run_id],
        data=data_hash(data_rows),
        n_rows=result.n_rows,
        n_tokens=result.n_tokens,
        config=config,
        metrics=result.model_dump(mode="json"),
        gguf_path=str(gguf),
        lineage=[k.model_dump(mode="json") for k in lineage.keys],
        unresolved=lineage.unresolved,
    )
    store.write([ModelRow.model_validate(row)])
    return row


def _round_row(
    store: Store,
    *,
    loop: str,
    round_index: int,
    run_id: str,
    policy: PolicyRef | None,
    trained: str | None,
    n_rollout: int,
    n_gold: int,
) -> dict[str, Any]:
    summary = summarize_run(store, run_id, wall_s=0.0)
    stats = max(store.read(RoundStatsRow, run_id=run_id), key=lambda r: r.round or 0, default=None)
    return {
        "improve_key": f"{loop}:{round_index}",
        "loop_id": loop,
        "round": round_index,
        "run_id": run_id,
        "policy": policy.path if policy else "embedded",
        "policy_model_id": policy.model_id if policy else None,
        "trained_model_id": trained,
        "n_trajectories": summary.trajectories,
        "n_passed": summary.passed,
        "n_counted": summary.counted,
        "pass_rate": summary.pass_rate,
        "domain_entropy": stats.domain_entropy if stats else None,
        "reasoning_mode_entropy": stats.reasoning_mode_entropy if stats else None,
        "tokens_per_verified": summary.tokens_per_verified,
        "n_rollout_rows": n_rollout,
        "n_gold_rows": n_gold,
        "created_at": datetime.now(UTC).replace(tzinfo=None),
    }


def expert_iteration(
    config: RunConfig,
    *,
    store: Store,
    rounds: int,
    sft: SFTConfig,
    work_dir: Path,
    synthesize: Synthesize,
    min_verified: int = 2,
    gold: bool = True,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """``rounds`` rounds of synthesize -> select -> SFT -> serve (see the module doc);
    returns the ``improve_rounds`` rows, each stored as soon as its round ends.

    ``synthesize(config)`` builds the run of ``config`` into ``store`` (curated).
    ``sft.model`` is the first policy's base ('embedded': the bundled SmolLM2 GGUF)."""
    if rounds < 1:
        raise InputError(f"--rounds {rounds}: at least 1")
    store.migrate()  # the loop's tables exist before its first run writes anything
    loop = loop_id(config, rounds, sft)
    policy = config.policy
    base = policy.path if policy else sft.model
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        cfg = config.model_copy(update={"seed": config.seed + r, "policy": policy})
        synthesize(cfg)
        run_id = run_id_for(cfg)
        rows = round_rows(store, run_id)
        n_rollout, n_gold, trained = len(rows), 0, None
        if r < rounds - 1:  # the last round measures the last policy; nothing to train after
            if n_rollout < min_verified and gold:
                golden = gold_rows(store, run_id, cfg)
                rows, n_gold = [*rows, *golden], len(golden)
            if not rows:
                raise InputError(
                    f"round {r}: run {run_id} has no verified trajectory and no gold "
                    "demonstration to train on (more --tasks, or leave --no-gold out)"
                )
            model = _trained_model(
                store, rows, work_dir / f"round-{r}", sft.model_copy(update={"model": base}), run_id
            )
            trained, base = model["model_id"], model["path"]
            policy = PolicyRef(
                path=str(Path(model["path"]).resolve()),
                gguf=str(Path(model["gguf_path"]).resolve()),
                model_id=trained,
            )
        row = _round_row(
            store,
            loop=loop,
            round_index=r,
            run_id=run_id,
            policy=cfg.policy,
            trained=trained,
            n_rollout=n_rollout,
            n_gold=n_gold,
        )
        store.write([ImproveRoundRow.model_validate(row)])
        out.append(row)
        if on_round is not None:
            on_round(row)
    return out
