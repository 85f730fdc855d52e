"""Dual selection from one pool: SFT trajectories and RL tasks (docs/methods.md §8, TopoCurate).

Both policies are registered with ``@policy(name)`` (docs/style.md §1) and return one ``Selection``
record per item considered, selected or not, each with its score and the reason for the
decision, so a dataset can say why every row is in it and why every other is not.

Decisions (docs/methods.md leaves them open):

- SFT eligibility is checked in this order, and the first failing check is the reason: in the
  topology (not infra/simulator), a verdict that passed (clean and correct) and is not
  excluded, a signals row with neither ``loop`` nor ``exhaustion``, no ``failure`` signal
  unless the verdict records a recovery (every failed call corrected by a later one), not a
  near-duplicate (``duplicates[id]`` names another trajectory). The verdict is the
  authority: a trajectory without one is never selected.
- RL counts a rollout a success only when its verdict passed, i.e. clean and correct: the
  task topology's pass rate is read from the same verdicts.
- Novelty compares (signature, reasoning mode) with the picks so far; with
  ``distinct_signatures`` (the default: "up to k_sft with distinct signatures") a repeated
  signature is never picked even when its mode differs. A candidate with novelty 0 is never
  picked. Ties go to the smaller trajectory id.
- ``max_total`` caps the SFT picks over all tasks after the per-task greedy: the picks with the
  highest score at pick time stay.
- RL keeps ``ceil(rl_fraction · |pool|)`` tasks of the pool (0 < p < 1 and at least
  ``min_rollouts`` valid rollouts), by ``rl_score``, then at most ``max_tasks``.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trajsynth.schemas import (
    Registry,
    RLSelectConfig,
    Selection,
    SelectionKind,
    SFTSelectConfig,
    Signals,
    TaskTopology,
    TrajectoryTopology,
    Verdict,
    content_id,
)

__all__ = [
    "get_policy",
    "novelty",
    "policy",
    "registered_policies",
    "select_rl",
    "select_sft",
    "sft_eligibility",
    "sft_score",
]

log = logging.getLogger(__name__)

Policy = Callable[..., list[Selection]]
POLICIES: Registry[Policy] = Registry("selection policy")


def policy(name: str) -> Callable[[Policy], Policy]:
    """Register a selection policy under ``name`` (docs/style.md §1)."""
    return POLICIES.register(name)


def registered_policies() -> list[str]:
    return POLICIES.names()


def get_policy(name: str) -> Policy:
    return POLICIES.get(name)


def _record(
    kind: SelectionKind,
    item_id: str,
    task_id: str,
    round: int,
    selected: bool,
    reason: str,
    config_hash: str,
    score: float | None = None,
    rank: int | None = None,
    components: Mapping[str, float] | None = None,
) -> Selection:
    key = {"kind": str(kind), "item_id": item_id, "round": round, "config_hash": config_hash}
    return Selection(
        selection_id=content_id("sel", key),
        kind=kind,
        item_id=item_id,
        task_id=task_id,
        round=round,
        selected=selected,
        score=score,
        rank=rank,
        reason=reason,
        components=dict(components or {}),
        config_hash=config_hash,
    )


# --- SFT ------------------------------------------------------------------------------------


def novelty(
    sig: str | None, mode: str | None, chosen: Iterable[tuple[str | None, str | None]]
) -> float:
    """``1`` if ``sig`` is not among the picks, ``0.5`` if it is but only with other reasoning
    modes, else ``0`` (docs/methods.md §8).

    >>> novelty("ABC", None, [("AEBC", None)]), novelty("ABC", "m2", [("ABC", "m1")])
    (1.0, 0.5)
    """
    same = [m for s, m in chosen if s == sig]
    if not same:
        return 1.0
    return 0.5 if mode not in same else 0.0


def sft_score(rec: bool, eff: float | None, nov: float, config: SFTSelectConfig) -> float:
    """``1.0·rec + 1.0·eff + 0.5·novelty`` with the config's weights (docs/methods.md §8).

    >>> sft_score(True, 1.0, 1.0, SFTSelectConfig())
    2.5
    """
    return config.w_rec * float(rec) + config.w_eff * float(eff or 0.0) + config.w_novelty * nov


def sft_eligibility(
    topo: TrajectoryTopology,
    verdict: Verdict | None,
    signals: Signals | None,
    duplicate_of: str | None,
) -> str | None:
    """Why a trajectory may not enter the SFT set, or ``None`` when it may (docs/methods.md §8)."""
    if not topo.included:
        return f"not in the topology: {topo.skip_reason}"
    if verdict is None:
        return "no verdict: unverified trajectories are never selected"
    if verdict.excluded:
        return "verdict excluded (infra or simulator)"
    if not verdict.passed:
        return "verdict failed"
    if signals is None:
        return "no signals row"
    if signals.loop:
        return f"loop signal ({signals.repetition_instances} repetition instances)"
    if signals.exhaustion:
        return "budget exhausted"
    if signals.failure and not verdict.recovered:
        # failed calls the verifier did not see corrected: whatever made them, the example
        # would teach them; a genuine recovery (curation.hygiene) is what SFT wants instead
        return f"failure signal without a recovery (failure rate {signals.failure_rate:.2f})"
    if duplicate_of and duplicate_of != topo.trajectory_id:
        return f"near-duplicate of {duplicate_of}"
    return None


@policy("sft")
def select_sft(
    topologies: Iterable[TrajectoryTopology],
    verdicts: Mapping[str, Verdict],
    signals: Mapping[str, Signals],
    *,
    duplicates: Mapping[str, str] | None = None,
    modes: Mapping[str, str | None] | None = None,
    round: int = 0,
    config: SFTSelectConfig | None = None,
) -> list[Selection]:
    """SFT selection (docs/methods.md §8): per task, greedy on ``sft_score`` up to ``k_sft``.

    ``verdicts`` and ``signals`` are keyed by trajectory id; ``duplicates`` maps a trajectory
    to the one it nearly duplicates (§5.4); ``modes`` gives each trajectory's reasoning mode
    (§5.2), used by novelty. Returns one record per trajectory, sorted by (task, selected
    first, rank, id). An empty input gives an empty list.
    """
    cfg = config or SFTSelectConfig()
    chash = cfg.config_hash()
    dups = duplicates or {}
    mode_of = modes or {}
    records: list[Selection] = []
    by_task: dict[str, list[TrajectoryTopology]] = defaultdict(list)
    for topo in topologies:
        reason = sft_eligibility(
            topo,
            verdicts.get(topo.trajectory_id),
            signals.get(topo.trajectory_id),
            dups.get(topo.trajectory_id),
        )
        if reason is None:
            by_task[topo.task_id].append(topo)
        else:
            records.append(
                _record(SelectionKind.SFT, topo.trajectory_id, topo.task_id, round, False,
                        reason, chash)
            )  # fmt: skip
    picks: list[tuple[float, Selection]] = []
    for task_id in sorted(by_task):
        picked, rejected = _greedy(by_task[task_id], mode_of, cfg, task_id, round, chash)
        picks.extend(picked)
        records.extend(rejected)
    if cfg.max_total is not None and len(picks) > cfg.max_total:
        picks.sort(key=lambda p: (-p[0], p[1].item_id))
        for _, rec in picks[cfg.max_total :]:
            records.append(
                rec.model_copy(
                    update={
                        "selected": False,
                        "reason": f"global SFT budget max_total={cfg.max_total} reached",
                    }
                )
            )
        picks = picks[: cfg.max_total]
    records.extend(rec for _, rec in picks)
    records.sort(key=lambda r: (r.task_id, not r.selected, r.rank or 0, r.item_id))
    log.info("sft selection: %d of %d picked", len(picks), len(records))
    return records


def _greedy(
    candidates: list[TrajectoryTopology],
    mode_of: Mapping[str, str | None],
    cfg: SFTSelectConfig,
    task_id: str,
    round: int,
    chash: str,
) -> tuple[list[tuple[float, Selection]], list[Selection]]:
    remaining = sorted(candidates, key=lambda t: t.trajectory_id)
    chosen: list[tuple[str | None, str | None]] = []
    picked: list[tuple[float, Selection]] = []

    def parts(t: TrajectoryTopology) -> dict[str, float]:
        nov = novelty(t.signature, mode_of.get(t.trajectory_id), chosen)
        return {"rec": float(t.recovered), "eff": float(t.efficiency or 0.0), "novelty": nov}

    def blocked(t: TrajectoryTopology, nov: float) -> bool:
        repeated = any(s == t.signature for s, _ in chosen)
        return nov <= 0.0 or (cfg.distinct_signatures and repeated)

    while remaining and len(picked) < cfg.k_sft:
        scored = []
        for t in remaining:
            comp = parts(t)
            if not blocked(t, comp["novelty"]):
                scored.append((sft_score(t.recovered, t.efficiency, comp["novelty"], cfg), t, comp))
        if not scored:
            break
        score, best, comp = min(scored, key=lambda x: (-x[0], x[1].trajectory_id))
        rank = len(picked) + 1
        reason = (
            f"pick {rank} of task: rec={int(best.recovered)}, eff={comp['eff']:.3g}, "
            f"novelty={comp['novelty']:g}"
        )
        picked.append(
            (score, _record(SelectionKind.SFT, best.trajectory_id, task_id, round, True, reason,
                            chash, score, rank, comp))
        )  # fmt: skip
        chosen.append((best.signature, mode_of.get(best.trajectory_id)))
        remaining.remove(best)
    rejected = []
    for t in remaining:
        comp = parts(t)
        score = sft_score(t.recovered, t.efficiency, comp["novelty"], cfg)
        if any(s == t.signature for s, _ in chosen) and (
            cfg.distinct_signatures or comp["novelty"] <= 0.0
        ):
            reason = "repeated signature: this strategy is already selected for the task"
        else:
            reason = f"per-task budget k_sft={cfg.k_sft} reached"
        rejected.append(
            _record(SelectionKind.SFT, t.trajectory_id, task_id, round, False, reason, chash,
                    score, None, comp)
        )  # fmt: skip
    return picked, rejected


# --- RL -------------------------------------------------------------------------------------


@policy("rl")
def select_rl(
    tasks: Iterable[TaskTopology],
    *,
    round: int = 0,
    config: RLSelectConfig | None = None,
) -> list[Selection]:
    """RL selection (docs/methods.md §8): the pool is tasks with ``0 < p < 1``, ranked by
    ``rl_score``; the top ``rl_fraction`` is kept. One record per task, sorted by rank then id.
    """
    cfg = config or RLSelectConfig()
    chash = cfg.config_hash()
    records: list[Selection] = []
    pool: list[TaskTopology] = []
    for task in tasks:
        reason = _rl_ineligible(task, cfg)
        if reason is None:
            pool.append(task)
        else:
            records.append(
                _record(SelectionKind.RL, task.task_id, task.task_id, round, False, reason, chash,
                        task.rl_score, None, _rl_parts(task))
            )  # fmt: skip
    pool.sort(key=lambda t: (-t.rl_score, t.task_id))
    n_keep = math.ceil(cfg.rl_fraction * len(pool) - 1e-9)
    if cfg.max_tasks is not None:
        n_keep = min(n_keep, cfg.max_tasks)
    ranked = []
    for i, task in enumerate(pool, start=1):
        keep = i <= n_keep
        if keep:
            reason = f"rank {i} of {len(pool)} in the pool (kept {n_keep})"
        elif cfg.max_tasks is not None and i <= math.ceil(cfg.rl_fraction * len(pool) - 1e-9):
            reason = f"RL budget max_tasks={cfg.max_tasks} reached"
        else:
            reason = f"rank {i} of {len(pool)}: below the top rl_fraction={cfg.rl_fraction:g}"
        ranked.append(
            _record(SelectionKind.RL, task.task_id, task.task_id, round, keep, reason, chash,
                    task.rl_score, i, _rl_parts(task))
        )  # fmt: skip
    log.info("rl selection: %d of %d tasks kept (pool %d)", n_keep, len(ranked) + len(records),
             len(pool))  # fmt: skip
    return ranked + sorted(records, key=lambda r: r.item_id)


def _rl_parts(task: TaskTopology) -> dict[str, float]:
    parts: dict[str, Any] = {
        "p": task.pass_rate,
        "ebr": task.error_branch_ratio,
        "h_strat_norm": task.strategy_entropy_norm,
        "n_succ_strat": float(task.n_success_strategies),
    }
    return {k: float(v) for k, v in parts.items() if v is not None}


def _rl_ineligible(task: TaskTopology, cfg: RLSelectConfig) -> str | None:
    if task.pass_rate is None or task.n_rollouts == 0:
        return "no valid rollout (all infra, simulator or unverified)"
    if task.n_rollouts < cfg.min_rollouts:
        return f"{task.n_rollouts} valid rollout(s), fewer than {cfg.min_rollouts}: no variance"
    if task.pass_rate >= 1.0:
        return "every rollout passed (p=1): no GRPO signal"
    if task.pass_rate <= 0.0:
        return "every rollout failed (p=0): no GRPO signal"
    return None
