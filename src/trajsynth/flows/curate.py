"""Curate one round against the store: load a ``RoundInput``, call ``curation.round.run_round``,
write the rows it returns; and the §6 evolution over the stored outcomes (``next_weights``).

Rows are derived, so curating a round again with the same inputs and config reuses what is
stored (nothing is added), and with changed inputs (a resumed run added rollouts) replaces
the round's rows in one transaction.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import ValidationError

from trajsynth.curation.canon import call_key_memo
from trajsynth.curation.complexity import cac_tertiles, difficulty_of
from trajsynth.curation.embeddings import Embedder, embedding_model_id, gc_paused, stored_hash
from trajsynth.curation.evolution import next_round_weights
from trajsynth.curation.modes import ModeCodebook
from trajsynth.curation.round import RoundInput, RoundOutput, run_round
from trajsynth.schemas import (
    Blueprint,
    BlueprintAttempt,
    Cell,
    CellCatalog,
    CurationConfig,
    CurationReport,
    Difficulty,
    FailureClass,
    ModeCodebookRecord,
    ReasoningMode,
    RolloutOutcome,
    RoundWeights,
    RunConfig,
    ToolAccess,
    Trajectory,
    Verdict,
    content_id,
    stable_hash,
)
from trajsynth.store import Store
from trajsynth.store.rows import (
    ClusterRow,
    EmbeddingRow,
    EvolutionRow,
    MetricValueRow,
    ModeCodebookRow,
    RoundStatsRow,
    Row,
    RunRow,
    ScoreRow,
    SelectionRow,
    SignalRow,
    TaskTopologyRow,
    ToolRow,
    TrajectoryTopologyRow,
)

__all__ = ["curate_round", "embedding_model_id", "next_weights", "round_stats"]

log = logging.getLogger(__name__)


# --- loading ---------------------------------------------------------------------------------


def _load_round(store: Store, data: RoundInput) -> None:
    """Fill ``data`` with the round's trajectories, verdicts, blueprints, domains, access."""
    run_id, round = data.run_id, data.round
    skips: dict[str, str] = {}

    def unreadable(what: str, prefix: str = "") -> Any:
        def skip(key: str, exc: ValidationError) -> None:
            skips[f"{prefix}{key}"] = f"unreadable {what}: {exc.errors()[0]}"

        return skip

    # the tool schemas (deep JSON, the same for every rollout of a task) are validated once
    trajectories = store.read(
        Trajectory,
        run_id=run_id,
        round=round,
        shared=("tools",),
        on_error=unreadable("trajectory row"),
    )
    in_round = (
        "trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE run_id = ? AND round = ?)"
    )
    verdicts = {
        v.trajectory_id: v
        for v in store.read(
            Verdict, in_round, [run_id, round], on_error=unreadable("verdict", "verdict:")
        )
    }
    blueprints = {
        b.blueprint_id: b
        for b in store.read(
            Blueprint, run_id=run_id, on_error=unreadable("blueprint", "blueprint:")
        )
    }
    domains = {c.cluster_id: c.domain for c in store.read(ClusterRow) if c.domain}
    for bp in blueprints.values():
        if bp.domain and bp.cluster_id:
            domains.setdefault(bp.cluster_id, bp.domain)
    access: dict[str, dict[str, ToolAccess]] = defaultdict(dict)
    for tool in store.read(ToolRow):
        if tool.cluster_id and tool.name and tool.access in ("read", "write"):
            access[tool.cluster_id][tool.name] = ToolAccess(tool.access)
    data.trajectories, data.verdicts, data.blueprints = trajectories, verdicts, blueprints
    data.domains, data.access, data.skips = domains, dict(access), skips


def _input_hash(store: Store, run_id: str, round: int, config: CurationConfig) -> str:
    """What the round's curation depends on: its trajectories, their verdicts, the config.

    Read with one light query, so a round whose inputs did not change is recognised without
    parsing its trajectories.
    """
    rows = store.query(
        "SELECT t.trajectory_id, v.verdict_id, v.passed, v.excluded FROM trajectories t "
        "LEFT JOIN verdicts v USING (trajectory_id) WHERE t.run_id = ? AND t.round = ? "
        "ORDER BY t.trajectory_id, v.verdict_id",
        [run_id, round],
    )
    return stable_hash(
        {
            "rows": [
                [r["trajectory_id"], r["verdict_id"], r["passed"], r["excluded"]] for r in rows
            ],
            "c": config.config_hash(),
        }
    )


def _stored_report(store: Store, run_id: str, round: int, input_hash: str) -> RoundStatsRow | None:
    if not store.path.exists():
        return None
    rows = store.read(RoundStatsRow, round_key=f"{run_id}:{round}", input_hash=input_hash)
    return rows[0] if rows else None


def _vector_lookup(store: Store) -> Any:
    """``RoundInput.cached_vectors`` over the ``embeddings`` table."""

    def lookup(model_id: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        wanted = {stored_hash(model_id, k): k for k in set(keys)}
        if not wanted or not store.path.exists():
            return {}
        rows = store.read(
            EmbeddingRow, "text_hash IN (SELECT unnest(?::VARCHAR[]))", [list(wanted)],
            model=model_id,
        )  # fmt: skip
        return {wanted[r.text_hash]: np.asarray(r.vector, dtype=np.float32) for r in rows}

    return lookup


def _count(store: Store, sql: str, params: Sequence[Any] = ()) -> int:
    """The ``n`` of a one-row count query (0 without a row)."""
    rows = store.query(sql, params)
    return int(rows[0]["n"]) if rows else 0


def _load_history(store: Store, data: RoundInput) -> None:
    """What earlier rounds of the run left: codebook, accepted rows, duplicates, EBRs."""
    run_id, round = data.run_id, data.round
    data.n_registered_clusters = _count(store, "SELECT count(*) AS n FROM clusters")
    books = store.read(ModeCodebookRow, "round < ?", [round], run_id=run_id)
    books.sort(key=lambda b: -(b.round or 0))  # the latest round's; by id within a round
    data.n_codebook_versions = _count(
        store,
        "SELECT count(DISTINCT version) AS n FROM mode_codebooks "
        "WHERE run_id = ? AND round < ? AND kind = 'kmeans'",
        [run_id, round],
    )
    if books and books[0].record:
        record = ModeCodebookRecord.model_validate(books[0].record)
        data.prior_codebook = ModeCodebook.from_record(record)
    data.earlier_accepted = store.query(
        "SELECT s.trajectory_id, s.domain, t.cluster_id, s.action_complexity AS cac, s.mode, "
        "s.mode_codebook, s.rule_label, s.digest_key "
        "FROM scores s JOIN trajectories t USING (trajectory_id) "
        "WHERE s.run_id = ? AND s.round < ? AND s.accepted ORDER BY s.trajectory_id",
        [run_id, round],
    )
    data.earlier_duplicates = _count(
        store,
        "SELECT count(*) AS n FROM scores WHERE run_id = ? AND round < ? "
        "AND duplicate_of IS NOT NULL",
        [run_id, round],
    )
    data.earlier_error_branch_ratios = [
        float(t.error_branch_ratio or 0.0)
        for t in store.read(TaskTopologyRow, "round < ? AND n_rollouts > 0", [round], run_id=run_id)
    ]


def _rows(run_id: str, round: int, out: RoundOutput) -> list[Row]:
    """The round's records as the rows of their tables."""
    at = {"run_id": run_id, "round": round}
    graphs = out.task_graphs
    return [
        *(SignalRow.of(s, **at) for s in out.signals),
        *(TrajectoryTopologyRow.of(t, **at) for t in out.trajectory_topology),
        *(
            TaskTopologyRow.of(
                t,
                **at,
                cluster_id=graphs[t.task_id].cluster_id,
                in_rl_pool=t.task_id in out.rl_pool,
                graph=graphs[t.task_id].graph,
            )
            for t in out.task_topology
        ),
        *(ScoreRow.of(s) for s in out.scores),
        *(SelectionRow.of(s, run_id=run_id) for s in out.selections),
        *(ModeCodebookRow.of(b, **at, record=b.model_dump(mode="json")) for b in out.codebooks),
        *(
            EmbeddingRow(text_hash=v.text_hash, model=v.model, vector=v.vector)
            for v in out.embeddings
        ),  # fmt: skip
        *(MetricValueRow.of(v) for v in out.metric_values),
        RoundStatsRow.of(out.round_stats),
    ]


def _write(store: Store, run_id: str, round: int, rows: list[Row]) -> int:
    """Replace the round's derived rows with ``rows`` in one transaction."""
    in_round = "SELECT trajectory_id FROM trajectories WHERE run_id = ? AND round = ?"
    params = [run_id, round]
    tasks = "SELECT blueprint_id FROM blueprints WHERE run_id = ? AND round = ?"
    delete = [
        (f"DELETE FROM signals WHERE trajectory_id IN ({in_round})", params),
        (f"DELETE FROM trajectory_topology WHERE trajectory_id IN ({in_round})", params),
        (f"DELETE FROM scores WHERE trajectory_id IN ({in_round})", params),
        ("DELETE FROM task_topology WHERE run_id = ? AND round = ?", params),
        (f"DELETE FROM task_topology WHERE task_id IN ({tasks})", params),
        ("DELETE FROM selections WHERE run_id = ? AND round = ?", params),
        ("DELETE FROM metric_values WHERE run_id = ? AND round = ?", params),
        ("DELETE FROM mode_codebooks WHERE run_id = ? AND round = ?", params),
        ("DELETE FROM round_stats WHERE round_key = ?", [f"{run_id}:{round}"]),
    ]
    return store.write(rows, delete=delete)  # migrated by curate_round, one connection


def curate_round(
    store: Store,
    run_id: str,
    round: int,
    config: CurationConfig | None = None,
    *,
    embedder: Embedder | None = None,
) -> CurationReport:
    """Curate one round of a run and store every derived row (see ``curation.round``).

    ``embedder`` replaces all-MiniLM-L6-v2 (tests); it is loaded only when a text needs it.
    Returns the round's report; with unchanged inputs and config the stored one (``reused``).
    """
    cfg = config or CurationConfig()
    start = time.perf_counter()
    store.migrate()  # a store from before curation existed gets its tables
    with gc_paused(), call_key_memo():
        # the reads on one connection; embedding (seconds to minutes) runs after it is closed
        with store.session(read_only=True):
            ihash = _input_hash(store, run_id, round, cfg)
            stored = _stored_report(store, run_id, round, ihash)
            if stored is not None:
                curation = stored.curation if isinstance(stored.curation, dict) else {}
                report = CurationReport.model_validate(
                    {**curation, "reused": True, "rows_added": 0}
                )
                log.info("round %d of %s: inputs unchanged, stored curation kept", round, run_id)
                return report
            data = RoundInput(
                run_id=run_id,
                round=round,
                config=cfg,
                input_hash=ihash,
                cached_vectors=_vector_lookup(store),
                embedder=embedder,
            )
            _load_round(store, data)
            _load_history(store, data)
        load_s = time.perf_counter() - start
        out = run_round(data)
        start = time.perf_counter()
        added = _write(store, run_id, round, _rows(run_id, round, out))
    timings = {"load": load_s, **out.report.timings, "write": time.perf_counter() - start}
    report = out.report.model_copy(update={"rows_added": added, "timings": timings})
    log.info(
        "curated round %d of %s: %d trajectories, %d tasks, sft %d, rl %d (%.1f s)",
        round, run_id, report.n_trajectories, report.n_tasks,
        report.n_sft_selected, report.n_rl_selected, sum(timings.values()),
    )  # fmt: skip
    return report


# --- reading the figures ----------------------------------------------------------------------


def round_stats(store: Store, run_id: str) -> list[RoundStatsRow]:
    """The stored ``round_stats`` rows of a run, by round."""
    if not store.path.exists():
        return []
    return sorted(store.read(RoundStatsRow, run_id=run_id), key=lambda r: r.round or 0)


# --- evolution (§6) ---------------------------------------------------------------------------


def _run_config(store: Store, run_id: str) -> RunConfig | None:
    rows = store.read(RunRow, run_id=run_id)
    if not rows or not isinstance(rows[0].config, dict):
        return None
    try:
        return RunConfig.model_validate(rows[0].config)
    except ValidationError:
        return None


def _catalog(store: Store, run_id: str, config: RunConfig | None) -> CellCatalog:
    clusters = {c.cluster_id: c.domain for c in store.read(ClusterRow) if c.domain}
    for r in store.query(
        "SELECT DISTINCT cluster_id, domain FROM blueprints WHERE run_id = ?", [run_id]
    ):
        if r["domain"]:
            clusters.setdefault(r["cluster_id"], r["domain"])
    if config is not None and config.clusters:
        wanted = set(config.clusters)
        chosen = {c: d for c, d in clusters.items() if c in wanted}
        clusters = chosen or clusters
    return CellCatalog(clusters=clusters)


def _outcomes(store: Store, run_id: str, round: int) -> list[RolloutOutcome]:
    rows = store.query(
        "SELECT t.trajectory_id, t.round, t.cluster_id, t.failure_class, b.domain, b.cell, "
        "v.passed, v.excluded, s.accepted, s.mode_label, s.rule_label, s.action_complexity AS cac, "
        "tt.pass_rate AS task_p, tt.error_branch_ratio AS task_ebr "
        "FROM trajectories t "
        "LEFT JOIN blueprints b ON b.blueprint_id = t.blueprint_id "
        "LEFT JOIN verdicts v ON v.trajectory_id = t.trajectory_id "
        "LEFT JOIN scores s ON s.trajectory_id = t.trajectory_id "
        "LEFT JOIN task_topology tt ON tt.task_id = t.blueprint_id "
        "WHERE t.run_id = ? AND t.round <= ? ORDER BY t.trajectory_id",
        [run_id, round],
    )
    edges = cac_tertiles(
        [r["cac"] for r in rows if r["round"] == 0 and r["accepted"] and r["cac"] is not None]
    )
    out = []
    for r in rows:
        if not isinstance(r["cell"], dict):
            continue
        try:
            cell = Cell.model_validate(r["cell"])
            label = r["mode_label"] or r["rule_label"]
            mode = ReasoningMode(label) if label else None
            diff = difficulty_of(r["cac"], edges) if r["cac"] is not None else None
            fc = FailureClass(r["failure_class"]) if r["failure_class"] else None
        except (ValidationError, ValueError):
            continue
        out.append(
            RolloutOutcome(
                trajectory_id=r["trajectory_id"],
                round=r["round"],
                domain=r["domain"] or "",
                cell=cell,
                mode=mode,
                difficulty=diff if isinstance(diff, Difficulty) else None,
                accepted=bool(r["accepted"]),
                passed=bool(r["passed"]) and not r["excluded"],
                failure_class=fc,
                task_pass_rate=r["task_p"],
                task_ebr=r["task_ebr"],
            )
        )
    return out


def _attempts(store: Store, run_id: str, round: int) -> list[BlueprintAttempt]:
    """The run's planning attempts up to ``round``; one that no longer reads is left out."""
    return store.read(
        BlueprintAttempt, "round <= ?", [round], run_id=run_id, on_error=lambda key, exc: None
    )


def _previous_weights(store: Store, run_id: str, round: int) -> RoundWeights | None:
    rows = store.read(EvolutionRow, run_id=run_id, round=round)
    if not rows:
        return None
    weights: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        weights[r.level or ""][r.option or ""] = float(r.weight_new or 0.0)
    return RoundWeights(round=round, weights=dict(weights))


def next_weights(
    store: Store, run_id: str, round: int, config: CurationConfig | None = None
) -> RoundWeights | None:
    """The sampling weights for round ``round + 1`` from the outcomes of rounds <= ``round``
    (docs/methods.md §6), or None when evolution is off.

    ``config`` defaults to the run's stored ``RunConfig.curation`` (else the defaults).
    Every option's change is stored in ``evolution`` (``round`` = the round the weights are
    for) with its reason; computing them again replaces that round's rows. The returned
    ``weights`` is what ``planning.cells.sample_cells`` takes.
    """
    run_cfg = _run_config(store, run_id)
    cfg = config or (run_cfg.curation if run_cfg is not None else CurationConfig())
    if not cfg.evolution:
        return None
    catalog = _catalog(store, run_id, run_cfg)
    if not catalog.clusters:
        log.warning("evolution: no clusters known for %s; uniform sampling", run_id)
        return None
    outcomes = _outcomes(store, run_id, round)
    last = [o for o in outcomes if o.round == round]
    weights = next_round_weights(
        outcomes,
        last,
        _attempts(store, run_id, round),
        catalog,
        cfg.evolution_params,
        round=round + 1,
        previous=_previous_weights(store, run_id, round),
    )
    rows: list[Row] = []
    for change in weights.changes:
        key = {"run_id": run_id, "round": change.round, "level": change.level,
               "parent": change.parent, "option": change.option}  # fmt: skip
        rows.append(
            EvolutionRow(
                change_id=content_id("chg", key),
                run_id=run_id,
                round=change.round,
                level=change.level,
                parent=change.parent,
                option=change.option,
                n_accepted=change.n,
                failure_rate=change.f,
                validity=change.v,
                weight_old=change.p_old,
                weight_new=change.p_new,
                reason=change.reason.value,
                detail=change.model_dump(mode="json"),
            )
        )
    store.migrate()
    store.write(
        rows,
        delete=[("DELETE FROM evolution WHERE run_id = ? AND round = ?", [run_id, round + 1])],
    )
    return weights
