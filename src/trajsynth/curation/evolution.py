"""Adaptive evolution: the next round's sampling weights (docs/methods.md §6; docs/design.md §9).

After each round the weights over the levels domain → cluster → path shape → target mode →
difficulty move toward options that are rare in the accepted data and options whose last-round
failures were informative, away from options whose blueprints keep failing validity checks.
At every level the same rule turns the options' statistics into probabilities::

    s_i = (n_i + 1)^(-alpha_a) · (1 + beta·f_i) · v_i^eta · (1 + delta·bin_i/(B-1))
    alpha_a = alpha0 · (1 + lambda·(1 - H_norm_a))
    q_i = s_i^(1/T) / sum_j s_j^(1/T)
    q   = water_fill_cap(q, cap = kappa/m)
    p_i = (1 - eps_floor)·q_i + eps_floor/m

Every option's new weight is stored with its statistics and its ``reason``: the factor with the
largest log-contribution. The contributions explain ``ln(m·p_i)``, the option's move away from
uniform (the no-information weight): each factor's log, centred over the level's options and
divided by ``T`` (what survives normalisation), then ``ln(q_capped/q)`` for the cap and
``ln(p/q_capped)`` for the floor. When every contribution is zero the reason is ``none``.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from trajsynth.curation.entropy import normalized_entropy
from trajsynth.schemas import (
    BlueprintAttempt,
    Cell,
    CellCatalog,
    Difficulty,
    DiversityReport,
    EvolutionParams,
    OptionStats,
    PathShape,
    ReasoningMode,
    RolloutOutcome,
    RoundWeights,
    WeightChange,
    WeightReason,
    counts_against_policy,
)

__all__ = [
    "LEVELS",
    "EvolutionParams",
    "informative_failure_rate",
    "level_alpha",
    "level_weights",
    "next_round_weights",
    "option_stats",
    "sample_cell",
    "weighted_draw",
    "should_stop",
    "validity_rate",
    "water_fill_cap",
]

log = logging.getLogger(__name__)

LEVELS = ("domain", "cluster", "path_shape", "target_mode", "difficulty")
"""The sampling levels, in drawing order (the names ``planning.cells.sample_cells`` reads)."""

_DIFFICULTY_ORDER = list(Difficulty)
_TINY = 1e-12


def informative_failure_rate(failures: int, rollouts: int) -> float:
    """``f_i``: informative failures / valid rollouts of the option; 0 without rollouts (§6).

    >>> informative_failure_rate(1, 10), informative_failure_rate(0, 0)
    (0.1, 0.0)
    """
    return failures / rollouts if rollouts > 0 else 0.0


def validity_rate(valid: int, attempted: int) -> float:
    """``v_i = (valid + 1) / (attempted + 2)``, Laplace-smoothed (§6).

    >>> validity_rate(8, 8), validity_rate(0, 0), validity_rate(0, 3)
    (0.9, 0.5, 0.2)
    """
    return (valid + 1) / (attempted + 2)


def level_alpha(h_norm: float, params: EvolutionParams) -> float:
    """``alpha_a = alpha0·(1 + lambda·(1 - H_norm_a))``: sharper on a concentrated axis (§6).

    >>> level_alpha(0.8, EvolutionParams())
    0.6
    """
    h = min(1.0, max(0.0, h_norm))
    return round(params.alpha0 * (1.0 + params.lam * (1.0 - h)), 15)


def water_fill_cap(q: Sequence[float] | np.ndarray, cap: float) -> np.ndarray:
    """Clip options above ``cap`` and give the removed mass to the unclipped ones in
    proportion, repeating until none exceeds the cap (§6). Skipped when ``cap < 1/m``, where
    no distribution could satisfy it.

    >>> [round(float(x), 5) for x in water_fill_cap([0.14469, 0.26694, 0.19643, 0.39194], 0.35)]
    [0.15467, 0.28535, 0.20998, 0.35]
    """
    out = np.asarray(q, dtype=float).copy()
    m = len(out)
    if m == 0 or cap * m < 1.0 - 1e-12:
        return out
    clipped = np.zeros(m, dtype=bool)
    for _ in range(m):
        over = (out > cap + _TINY) & ~clipped
        if not over.any():
            break
        excess = float((out[over] - cap).sum())
        out[over] = cap
        clipped |= over
        free = ~clipped
        if not free.any():
            break
        mass = float(out[free].sum())
        if mass > 0:
            out[free] += excess * out[free] / mass
        else:
            out[free] += excess / int(free.sum())
    return out


def _reason(contrib: Mapping[str, float]) -> WeightReason:
    name, value = max(contrib.items(), key=lambda kv: (abs(kv[1]), -_REASON_ORDER[kv[0]]))
    return WeightReason(name) if abs(value) > 1e-9 else WeightReason.NONE


_REASON_ORDER = {r.value: i for i, r in enumerate(WeightReason)}


def level_weights(
    options: Sequence[OptionStats],
    h_norm: float,
    params: EvolutionParams | None = None,
    *,
    level: str = "",
    parent: str | None = None,
    round: int = 0,
    p_old: Mapping[str, float] | None = None,
    n_bins: int | None = None,
) -> list[WeightChange]:
    """The §6 rule at one level: one :class:`WeightChange` per option, in the given order.

    ``h_norm`` is the normalized entropy of this level's axis in the accepted data. The
    difficulty tilt applies only at ``level="difficulty"`` (``B = n_bins``, default the
    number of options); elsewhere ``delta = 0``. ``p_old`` (option -> last weight, default
    uniform) is stored next to the new weight. No options: no rows.
    """
    params = params or EvolutionParams()
    m = len(options)
    if m == 0:
        return []
    alpha = level_alpha(h_norm, params)
    n = np.asarray([o.n for o in options], dtype=float)
    f = np.asarray([o.f for o in options], dtype=float)
    v = np.asarray([o.v for o in options], dtype=float)
    bins = np.asarray([o.bin for o in options], dtype=float)
    b = n_bins if n_bins is not None else m
    delta = params.delta if level == "difficulty" and b > 1 else 0.0
    logs = {
        WeightReason.RARITY.value: -alpha * np.log(n + 1.0),
        WeightReason.INFORMATIVE_FAILURE.value: np.log1p(params.beta * f),
        WeightReason.VALIDITY.value: params.eta * np.log(v),
        WeightReason.DIFFICULTY.value: np.log1p(delta * bins / max(b - 1, 1)),
    }
    log_s = sum(logs.values(), np.zeros(m))  # a zero array as the start keeps the type
    s = np.exp(log_s)
    z = log_s / params.temperature
    log_q = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
    q = np.exp(log_q)
    capped = water_fill_cap(q, params.kappa / m)
    p = (1.0 - params.eps_floor) * capped + params.eps_floor / m
    # logs of the capped weights; where q underflowed to 0 the cap moved nothing
    log_capped = np.where(capped > 0, np.log(np.maximum(capped, 1e-300)), log_q)
    changes = []
    for i, opt in enumerate(options):
        contrib = {
            name: float((arr[i] - arr.mean()) / params.temperature) for name, arr in logs.items()
        }
        contrib[WeightReason.CAP.value] = float(log_capped[i] - log_q[i])
        contrib[WeightReason.FLOOR.value] = (
            float(math.log(p[i]) - log_capped[i]) if p[i] > 0 else 0.0
        )
        old = p_old.get(opt.option, 1.0 / m) if p_old is not None else 1.0 / m
        changes.append(
            WeightChange(
                round=round,
                level=level,
                parent=parent,
                option=opt.option,
                n=opt.n,
                f=opt.f,
                v=opt.v,
                bin=opt.bin,
                h_norm=h_norm,
                alpha=alpha,
                s=float(s[i]),
                q=float(q[i]),
                q_capped=float(capped[i]),
                p_old=float(old),
                p_new=float(p[i]),
                reason=_reason(contrib),
                contributions=contrib,
            )
        )
    return changes


# --- statistics from the store's rows --------------------------------------------------------


def _mode_of(outcome: RolloutOutcome) -> str:
    return (outcome.mode or outcome.cell.target_mode).value


def _difficulty_of(outcome: RolloutOutcome) -> str:
    return (outcome.difficulty or outcome.cell.difficulty).value


def _keys(outcome: RolloutOutcome) -> dict[str, str]:
    return {
        "domain": outcome.domain,
        "cluster": outcome.cell.cluster_id,
        "path_shape": outcome.cell.path_shape.value,
        "target_mode": _mode_of(outcome),
        "difficulty": _difficulty_of(outcome),
    }


def _is_informative_failure(o: RolloutOutcome) -> bool:
    if o.passed or not _counts(o):
        return False
    mixed = o.task_pass_rate is not None and 0.0 < o.task_pass_rate < 1.0
    return mixed or (o.task_ebr is not None and o.task_ebr > 0.0)


def _counts(o: RolloutOutcome) -> bool:
    """A rollout counts toward ``f`` unless it ended in an infra or simulator failure."""
    return o.failure_class is None or counts_against_policy(o.failure_class)


def option_stats(
    catalog: CellCatalog,
    accepted: Sequence[RolloutOutcome],
    last_round: Sequence[RolloutOutcome],
    attempts: Sequence[BlueprintAttempt],
) -> dict[str, dict[str, OptionStats]]:
    """``n``, ``f``, ``v`` (and the difficulty bin) of every option at every level (§6).

    * ``n``: accepted trajectories of the option, all rounds (``accepted``; only those with
      ``accepted=True`` count). Mode and difficulty use the measured mode and CAC bin.
    * ``f``: last-round rollouts that failed with a policy failure (class ``tool``/``model``,
      or a failed verdict) from a task with pass rate in (0, 1) or EBR > 0, over last-round
      rollouts that were not ``infra``/``simulator``.
    * ``v``: ``(valid + 1)/(attempted + 2)`` over blueprint attempts, keyed by the cell the
      planner was asked for (target mode, target difficulty).
    """
    options = _level_options(catalog)
    n_count: dict[str, Counter[str]] = {lv: Counter() for lv in LEVELS}
    for o in accepted:
        if o.accepted:
            for lv, key in _keys(o).items():
                n_count[lv][key] += 1
    fails: dict[str, Counter[str]] = {lv: Counter() for lv in LEVELS}
    rolls: dict[str, Counter[str]] = {lv: Counter() for lv in LEVELS}
    for o in last_round:
        if not _counts(o):
            continue
        informative = _is_informative_failure(o)
        for lv, key in _keys(o).items():
            rolls[lv][key] += 1
            fails[lv][key] += informative
    valid: dict[str, Counter[str]] = {lv: Counter() for lv in LEVELS}
    tried: dict[str, Counter[str]] = {lv: Counter() for lv in LEVELS}
    for a in attempts:
        keys = {
            "domain": catalog.clusters.get(a.cluster_id, ""),
            "cluster": a.cluster_id,
            "path_shape": a.cell.path_shape.value,
            "target_mode": a.cell.target_mode.value,
            "difficulty": a.cell.difficulty.value,
        }
        for lv, key in keys.items():
            tried[lv][key] += 1
            valid[lv][key] += bool(a.accepted)
    out: dict[str, dict[str, OptionStats]] = {}
    for lv in LEVELS:
        out[lv] = {}
        for opt in options[lv]:
            out[lv][opt] = OptionStats(
                option=opt,
                n=n_count[lv][opt],
                f=informative_failure_rate(fails[lv][opt], rolls[lv][opt]),
                v=validity_rate(valid[lv][opt], tried[lv][opt]),
                bin=_DIFFICULTY_ORDER.index(Difficulty(opt)) if lv == "difficulty" else 0,
                failures=fails[lv][opt],
                rollouts=rolls[lv][opt],
                valid=valid[lv][opt],
                attempted=tried[lv][opt],
            )
    return out


def _level_options(catalog: CellCatalog) -> dict[str, list[str]]:
    with_clusters = set(catalog.clusters.values())
    return {
        "domain": [d for d in catalog.domains if d in with_clusters]
        + sorted(with_clusters - set(catalog.domains)),
        "cluster": sorted(catalog.clusters),
        "path_shape": [s.value for s in PathShape],
        "target_mode": [m.value for m in catalog.modes],
        "difficulty": [d.value for d in catalog.difficulties],
    }


def _axis_h_norm(
    catalog: CellCatalog, stats: Mapping[str, Mapping[str, OptionStats]]
) -> dict[str, float]:
    """H_norm of each axis in the accepted data over its declared support (§5.1, §1.1)."""
    k = {
        "domain": len(set(catalog.domains) | set(catalog.clusters.values())),
        "cluster": len(catalog.clusters),
        "path_shape": len(PathShape),
        "target_mode": len(catalog.modes),
        "difficulty": len(catalog.difficulties),
    }
    return {lv: normalized_entropy([s.n for s in stats[lv].values()], k[lv]) for lv in LEVELS}


def next_round_weights(
    accepted: Sequence[RolloutOutcome],
    last_round: Sequence[RolloutOutcome],
    attempts: Sequence[BlueprintAttempt],
    catalog: CellCatalog,
    params: EvolutionParams | None = None,
    *,
    round: int,
    previous: RoundWeights | None = None,
    h_norm: Mapping[str, float] | None = None,
) -> RoundWeights:
    """The next round's sampling weights over domain → cluster → shape → mode → difficulty (§6).

    ``accepted``: outcomes of every round (those with ``accepted=True`` are counted);
    ``last_round``: every rollout of the round just finished; ``attempts``: the blueprint
    attempts (validity). ``round`` is the round the weights are for. The cluster level is
    computed within each domain (its weights sum to 1 per domain, so the cap and floor act on
    the clusters a draw actually chooses among); the other levels are marginal over their
    catalog options, and :func:`sample_cell` renormalises over the feasible ones. ``h_norm``
    overrides an axis's normalized entropy (e.g. the codebook mode entropy of the diversity
    report for ``target_mode``); by default each axis's is computed from the accepted counts.
    """
    params = params or EvolutionParams()
    stats = option_stats(catalog, accepted, last_round, attempts)
    h = _axis_h_norm(catalog, stats)
    h.update({k: float(v) for k, v in (h_norm or {}).items() if k in h})
    old = previous.weights if previous is not None else {}
    weights: dict[str, dict[str, float]] = {}
    changes: list[WeightChange] = []
    for lv in LEVELS:
        groups: dict[str | None, list[OptionStats]] = {}
        if lv == "cluster":
            for cid, st in stats[lv].items():
                groups.setdefault(catalog.clusters[cid], []).append(st)
        else:
            groups[None] = list(stats[lv].values())
        weights[lv] = {}
        for parent, opts in groups.items():
            p_old = _old_within(old.get(lv), [o.option for o in opts])
            rows = level_weights(
                opts,
                h[lv],
                params,
                level=lv,
                parent=parent,
                round=round,
                p_old=p_old,
                n_bins=len(_DIFFICULTY_ORDER) if lv == "difficulty" else None,
            )
            changes.extend(rows)
            weights[lv].update({r.option: r.p_new for r in rows})
    for row in changes:
        if abs(row.p_new - row.p_old) > 0.05:
            log.info(
                "round %d %s/%s: %.3f -> %.3f (%s)",
                round, row.level, row.option, row.p_old, row.p_new, row.reason.value,
            )  # fmt: skip
    return RoundWeights(round=round, weights=weights, h_norm=h, changes=changes)


def _old_within(old: Mapping[str, float] | None, options: Sequence[str]) -> dict[str, float]:
    """Last round's weights of these options, renormalised over them (uniform when unknown)."""
    m = len(options)
    if not old:
        return {o: 1.0 / m for o in options}
    vals = {o: max(0.0, float(old.get(o, 0.0))) for o in options}
    total = sum(vals.values())
    return {o: v / total for o, v in vals.items()} if total > 0 else {o: 1.0 / m for o in options}


# --- drawing a cell --------------------------------------------------------------------------


def weighted_draw(
    rng: random.Random, options: Sequence[str], weights: Sequence[float] | None
) -> str:
    """One option, drawn with probability proportional to its weight (one ``rng.random()``).

    Negative weights count as 0; no weights, or all 0, draw uniformly.

    >>> weighted_draw(random.Random(0), ["a", "b"], [0.0, 1.0])
    'b'
    """
    if not options:
        raise ValueError("no option to draw from")
    ws = [max(0.0, float(w)) for w in weights or ()]
    total = sum(ws)
    if total <= 0:
        ws, total = [1.0] * len(options), float(len(options))
    x = rng.random() * total
    for option, w in zip(options, ws, strict=True):
        x -= w
        if x < 0:
            return option
    return options[-1]


def _draw(rng: random.Random, options: Sequence[str], given: Mapping[str, float] | None) -> str:
    return weighted_draw(rng, options, [given.get(o, 0.0) for o in options] if given else None)


def sample_cell(
    weights: RoundWeights | Mapping[str, Mapping[str, float]] | None,
    rng: random.Random,
    catalog: CellCatalog,
    *,
    modes_for: Callable[[str, PathShape], Sequence[ReasoningMode]] | None = None,
    difficulties_for: Callable[[PathShape, ReasoningMode], Sequence[Difficulty]] | None = None,
) -> Cell:
    """Draw one cell level by level: domain → cluster → shape → mode → difficulty (§6).

    At each level only feasible options are candidates (domains with clusters, the domain's
    clusters, the cluster's shapes from ``catalog.shapes``, ``modes_for(cluster, shape)`` and
    ``difficulties_for(shape, mode)`` when given, e.g. the planner's ``allowed_modes`` and
    ``allowed_difficulties``), with the weights renormalised over them; a level without
    weights, or whose candidates all weigh 0, is uniform. Deterministic for a seeded ``rng``.
    """
    if not catalog.clusters:
        raise ValueError("the catalog has no clusters")
    w = weights.weights if isinstance(weights, RoundWeights) else (weights or {})
    present = set(catalog.clusters.values())
    domains = [d for d in catalog.domains if d in present] + sorted(present - set(catalog.domains))
    domain = _draw(rng, domains, w.get("domain"))
    members = sorted(c for c, d in catalog.clusters.items() if d == domain)
    cluster = _draw(rng, members, w.get("cluster"))
    shapes = [s.value for s in catalog.shapes.get(cluster, list(PathShape))] or [
        PathShape.SINGLE.value
    ]
    shape = PathShape(_draw(rng, shapes, w.get("path_shape")))
    modes = list(modes_for(cluster, shape)) if modes_for else list(catalog.modes)
    modes = [m for m in modes if m in catalog.modes] or [ReasoningMode.DIRECT_EXECUTE]
    mode = ReasoningMode(_draw(rng, [m.value for m in modes], w.get("target_mode")))
    bins = list(difficulties_for(shape, mode)) if difficulties_for else list(catalog.difficulties)
    bins = [b for b in bins if b in catalog.difficulties] or list(catalog.difficulties)
    difficulty = Difficulty(_draw(rng, [b.value for b in bins], w.get("difficulty")))
    return Cell(cluster_id=cluster, path_shape=shape, target_mode=mode, difficulty=difficulty)


def should_stop(
    report: DiversityReport,
    params: EvolutionParams | None = None,
    *,
    rounds_done: int,
    budget_spent: bool,
) -> tuple[bool, str]:
    """The §6 stop rule: normalized domain and mode entropy >= 0.9 / 0.8 and the round budget
    spent, or ``max_rounds`` reached. Returns (stop, why).

    >>> should_stop(DiversityReport(h_dom_norm=0.95, h_mode_norm=0.85), rounds_done=2,
    ...             budget_spent=True)
    (True, 'diversity reached: H_dom_norm 0.950 >= 0.9, H_mode_norm 0.850 >= 0.8')
    """
    params = params or EvolutionParams()
    if params.max_rounds is not None and rounds_done >= params.max_rounds:
        return True, f"max_rounds {params.max_rounds} reached"
    diverse = report.h_dom_norm >= params.stop_h_dom and report.h_mode_norm >= params.stop_h_mode
    if diverse and budget_spent:
        return True, (
            f"diversity reached: H_dom_norm {report.h_dom_norm:.3f} >= {params.stop_h_dom}, "
            f"H_mode_norm {report.h_mode_norm:.3f} >= {params.stop_h_mode}"
        )
    return False, (
        f"continue: H_dom_norm {report.h_dom_norm:.3f}, H_mode_norm {report.h_mode_norm:.3f}"
        f"{'' if budget_spent else ', round budget not spent'}"
    )
