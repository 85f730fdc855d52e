"""One round of curation as a plain function: ``run_round(RoundInput) -> RoundOutput``.

Signals, topology, diversity and selection of one round (docs/methods.md §5, §7, §8), with no
store: the flow (``flows/curate.py``) loads a ``RoundInput`` (the round's trajectories,
verdicts and blueprints, and what earlier rounds left), calls ``run_round`` and stores the
records it returns (``RoundOutput``), each as its table's row. Per trajectory they are its
``Signals`` (§7), its ``TrajectoryTopology`` and its ``Scores`` (mode, CAC, recovery,
efficiency, SFT score, duplicate; §5, §8); per task a ``TaskTopology`` with its quotient graph
(§8); one ``Selection`` per SFT and RL decision with its reason (§8); one ``MetricValue`` per
value of every metric registered in ``curation/metrics/``; the round's mode codebook (§5.2);
and the ``RoundStats``, the dataset's figures after the round (§5.4). Bad input never stops
the round: a trajectory whose signals cannot be computed gets no signals and a recorded
reason (so SFT never picks it), a text the embedder cannot take gets no embedding (its mode
is the rule label or ``unassigned``), an empty round gives zero figures and a note.

Decisions (docs/methods.md leaves them open):

- Accepted (§5.1) = verdict passed, not excluded, not a (near-)duplicate. Near-duplicates are
  looked for among the round's accepted candidates, within each cluster, ranked by the SFT
  score with novelty 1 (``w_rec·rec + w_eff·eff + w_novelty``).
- The mode codebook is per run: the latest k-means codebook of an earlier round is reused;
  none yet, a k-means codebook is fitted once ``mode_min_fit`` digests with embeddings exist
  in the round (else the seven rule labels are the modes); more than 10% of a round
  unassigned refits it (``v2``, ...). Cumulative figures relabel earlier rounds with the
  current codebook from their cached embeddings.
- Difficulty bins for evolution are the CAC tertiles of round-0 accepted data (§5.3).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypedDict

import networkx as nx
import numpy as np

from trajsynth.curation.complexity import cac
from trajsynth.curation.digests import (
    digest,
    digest_for_embedding,
    rule_mode,
    text_key,
)
from trajsynth.curation.diversity import diversity_fields, diversity_report, near_duplicates
from trajsynth.curation.embeddings import (
    Embedder,
    LazyEmbedder,
    StoredVector,
    VectorCache,
    VectorLookup,
    default_embedder,
    embedding_model_id,
    no_cache,
)
from trajsynth.curation.metrics import TaskFacts, TrajectoryFacts, compute_metrics
from trajsynth.curation.modes import ModeCodebook, embed_texts, needs_refit
from trajsynth.curation.select import select_rl, select_sft
from trajsynth.curation.signals import compute_signals
from trajsynth.curation.topology import (
    Step,
    build_quotient_graph,
    task_metrics,
    trajectory_metrics,
    trajectory_steps,
)
from trajsynth.schemas import (
    Blueprint,
    CACBreakdown,
    CurationConfig,
    CurationReport,
    DiversityReport,
    Domain,
    InputError,
    MetricValue,
    ModeAssignment,
    ModeCodebookRecord,
    PlannedCall,
    ReasoningMode,
    RoundStats,
    Scores,
    Selection,
    SelectionKind,
    Signals,
    TaskTopology,
    ToolAccess,
    Trajectory,
    TrajectoryTopology,
    Verdict,
)

__all__ = ["RoundInput", "RoundOutput", "TaskGraph", "graph_json", "run_round"]

log = logging.getLogger(__name__)


class _RunRound(TypedDict):
    """The two key fields every row of a round carries."""

    run_id: str
    round: int


# Exceptions a single bad record may raise inside a curation module; they skip that record.
_RECORD_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, InputError)


# --- graphs ----------------------------------------------------------------------------------


def graph_json(graph: nx.MultiDiGraph) -> dict[str, Any]:
    """A quotient graph as stored: nodes (id, kind, tool) and edges with their rollout ids."""
    nodes = [
        {"id": n, "kind": d.get("kind"), "tool": d.get("tool"), "step": d.get("step")}
        for n, d in graph.nodes(data=True)
    ]
    edges = [
        {
            "source": u,
            "target": v,
            "action": k,
            "rollouts": list(d.get("rollouts", [])),
            "count": d.get("count", 0),
            "error": bool(d.get("error")),
            "on_success": bool(d.get("on_success")),
        }
        for u, v, k, d in graph.edges(keys=True, data=True)
    ]
    return {"nodes": nodes, "edges": edges, "skipped": dict(graph.graph.get("skipped", {}))}


# --- the round -------------------------------------------------------------------------------


@dataclass
class _Timer:
    times: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - start


def _planned(bp: Blueprint | None) -> list[PlannedCall] | None:
    return list(bp.tool_path) if bp is not None else None


def _write_tools(access: Mapping[str, ToolAccess] | None) -> set[str] | None:
    if not access:
        return None
    return {name for name, a in access.items() if a is ToolAccess.WRITE}


@dataclass
class RoundInput:
    """What one round's curation reads: the round itself and what earlier rounds left."""

    run_id: str
    round: int
    config: CurationConfig
    input_hash: str
    trajectories: list[Trajectory] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    blueprints: dict[str, Blueprint] = field(default_factory=dict)
    domains: dict[str, str] = field(default_factory=dict)  # cluster_id -> domain
    access: dict[str, dict[str, ToolAccess]] = field(default_factory=dict)  # cluster -> tool
    skips: dict[str, str] = field(default_factory=dict)  # records that could not be read
    n_registered_clusters: int = 0
    prior_codebook: ModeCodebook | None = None  # the latest codebook of an earlier round
    n_codebook_versions: int = 0  # k-means versions fitted in earlier rounds
    # accepted trajectories of earlier rounds: trajectory_id, domain, cluster_id, cac, mode,
    # mode_codebook, rule_label, digest_key
    earlier_accepted: list[dict[str, Any]] = field(default_factory=list)
    earlier_duplicates: int = 0
    earlier_error_branch_ratios: list[float] = field(default_factory=list)
    cached_vectors: VectorLookup = no_cache
    embedder: Embedder | None = None  # None: all-MiniLM-L6-v2, loaded when a text needs it


@dataclass(frozen=True)
class TaskGraph:
    """A task's quotient graph as stored (``graph_json``), with its cluster."""

    cluster_id: str
    graph: dict[str, Any]


@dataclass
class RoundOutput:
    """The round's report and its records, each stored whole (run and round added where its
    table keeps them): per trajectory its signals, topology and scores; per task its
    topology, graph and whether the RL pool took it; every selection decision; the codebooks
    fitted this round; the vectors new to the store; every registered metric's values; the
    round's figures."""

    report: CurationReport
    signals: list[Signals]
    trajectory_topology: list[TrajectoryTopology]
    task_topology: list[TaskTopology]
    task_graphs: dict[str, TaskGraph]
    rl_pool: set[str]
    scores: list[Scores]
    selections: list[Selection]
    codebooks: list[ModeCodebookRecord]
    embeddings: list[StoredVector]
    metric_values: list[MetricValue]
    round_stats: RoundStats


def run_round(data: RoundInput) -> RoundOutput:
    """Curate one round (see the module docstring). ``report.timings`` holds the stages'
    seconds; ``report.rows_added`` is left for the caller that writes the rows.

    Each stage is a function of the input and what earlier stages returned; a record a stage
    cannot take is named in ``skips`` (record id -> why), which every stage adds to."""
    timer, skips = _Timer(), dict(data.skips)
    embedder = _EmbedderSlot(data.config, data.embedder)
    if not data.trajectories:
        skips["round"] = "empty round: no trajectories"
    with timer.stage("steps"):
        steps = _steps(data)
    with timer.stage("signals"):
        signals = _signals(data, steps, skips)
    with timer.stage("topology"):
        topology = _topology(data, steps, skips, embedder)
    with timer.stage("digests_cac"):
        digests = _digests_cac(data, skips)
    with timer.stage("embeddings"):
        embedded = _embed(data, digests, skips, embedder)
    with timer.stage("modes"):
        modes = _modes(data, digests, embedded)
    with timer.stage("duplicates"):
        duplicates = _duplicates(data, topology, embedded)
    with timer.stage("selection"):
        selections = _select(data, topology, signals, duplicates, modes)
    with timer.stage("metrics"):
        metric_values = _metrics(data, topology, signals, digests, skips)
    with timer.stage("report"):
        stages = _Stages(
            signals, topology, digests, embedded, modes, duplicates, selections, metric_values
        )
        out = _report_and_records(data, stages, skips)
    out.report = out.report.model_copy(update={"timings": dict(timer.times)})
    return out


# --- the stages ------------------------------------------------------------------------------

Steps = dict[str, tuple[str, list[Step]]]
"""Each rollout's state keys (trajectory id -> (task id, steps)), computed once."""


@dataclass(frozen=True)
class _Topology:
    """Per task its metrics and stored graph (with its cluster), per rollout its path."""

    tasks: list[TaskTopology]
    graphs: dict[str, dict[str, Any]]
    trajectories: list[TrajectoryTopology]

    def by_trajectory(self) -> dict[str, TrajectoryTopology]:
        return {t.trajectory_id: t for t in self.trajectories}


@dataclass(frozen=True)
class _Digests:
    """Per trajectory its digest text, rule label and action complexity."""

    texts: dict[str, str]
    rules: dict[str, ReasoningMode]
    cacs: dict[str, CACBreakdown]


@dataclass(frozen=True)
class _Embedded:
    """The digests' vectors (None: embeddings off or nothing to embed) in trajectory order,
    each trajectory's cache key (None: not embedded), and the vectors new to the store."""

    vectors: np.ndarray | None = None
    digest_keys: dict[str, str | None] = field(default_factory=dict)
    n_embedded: int = 0
    n_cached: int = 0
    cache_rows: list[StoredVector] = field(default_factory=list)


@dataclass(frozen=True)
class _Modes:
    """The round's mode codebook, the codebooks fitted this round, each trajectory's mode."""

    codebook: ModeCodebook
    new_codebooks: list[ModeCodebook]
    assignments: dict[str, ModeAssignment]

    def mode_key(self, tid: str) -> str | None:
        a = self.assignments.get(tid)
        return a.mode_id if a is not None else None


@dataclass(frozen=True)
class _Stages:
    """What the stages returned, for the report and the rows."""

    signals: dict[str, Signals]
    topology: _Topology
    digests: _Digests
    embedded: _Embedded
    modes: _Modes
    duplicates: dict[str, str]
    selections: list[Selection]
    metric_values: list[MetricValue]


class _EmbedderSlot:
    """The round's embedder: the one given, else the configured one, loaded on first use
    (soft merging and embedding share it)."""

    def __init__(self, config: CurationConfig, given: Embedder | None) -> None:
        self._config, self._embedder = config, given

    def get(self, n_texts: int | None = None) -> Embedder:
        if self._embedder is None:
            self._embedder = default_embedder(self._config, n_texts)
        return self._embedder


def _access(data: RoundInput, t: Trajectory) -> dict[str, ToolAccess] | None:
    return data.access.get(t.cluster_id)


def _hidden_info(data: RoundInput, task_id: str) -> dict[str, Any] | None:
    bp = data.blueprints.get(task_id)
    return dict(bp.hidden_info) if bp is not None else None


def _by_task(trajectories: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_task[t.blueprint_id].append(t)
    return by_task


def _steps(data: RoundInput) -> Steps:
    """The state keys of every rollout once, for signals and topology (§1.2)."""
    steps: Steps = {}
    caches: dict[str, dict[tuple[str, str], tuple[str, str]]] = defaultdict(dict)
    for t in data.trajectories:
        # on a bad record, signals and topology recompute the steps and record why
        with suppress(*_RECORD_ERRORS):
            steps[t.trajectory_id] = trajectory_steps(
                t,
                write_tools=_write_tools(_access(data, t)),
                hidden_info=_hidden_info(data, t.blueprint_id),
                action_cache=caches[t.blueprint_id],  # one task: one set of tool schemas
            )
    return steps


def _signals(data: RoundInput, steps: Steps, skips: dict[str, str]) -> dict[str, Signals]:
    signals: dict[str, Signals] = {}
    for t in data.trajectories:
        try:
            signals[t.trajectory_id] = compute_signals(
                t,
                verdict=data.verdicts.get(t.trajectory_id),
                write_tools=_write_tools(_access(data, t)),
                steps=steps.get(t.trajectory_id),
            )
        except _RECORD_ERRORS as exc:
            skips[t.trajectory_id] = f"signals failed: {type(exc).__name__}: {exc}"[:300]
    return signals


def _topology(
    data: RoundInput, steps: Steps, skips: dict[str, str], embedder: _EmbedderSlot
) -> _Topology:
    cfg = data.config
    tasks: list[TaskTopology] = []
    graphs: dict[str, dict[str, Any]] = {}
    paths: list[TrajectoryTopology] = []
    by_task = _by_task(data.trajectories)
    for task_id in sorted(by_task):
        group = by_task[task_id]
        try:
            graph = build_quotient_graph(
                group,
                data.verdicts,
                task_id=task_id,
                write_tools=_write_tools(_access(data, group[0])),
                hidden_info=_hidden_info(data, task_id),
                soft_merge=cfg.soft_merge,
                similarity_threshold=cfg.soft_merge_threshold,
                embedder=embedder.get() if cfg.soft_merge == "embedding" else None,
                steps=steps,
            )
            task = task_metrics(graph)
            trajs = trajectory_metrics(graph)
        except _RECORD_ERRORS as exc:
            reason = f"topology failed: {type(exc).__name__}: {exc}"[:300]
            skips[task_id] = reason
            task = TaskTopology(task_id=task_id, n_excluded=len(group))
            trajs = [
                TrajectoryTopology(
                    trajectory_id=t.trajectory_id, task_id=task_id, included=False,
                    skip_reason=reason,
                )
                for t in group
            ]  # fmt: skip
            graph = None
        if task.n_rollouts == 1:
            skips.setdefault(task_id, "one valid rollout: EBR and H_strat are 0")
        tasks.append(task)
        graphs[task_id] = {
            "cluster_id": group[0].cluster_id,
            "graph": graph_json(graph) if graph is not None else None,
        }
        paths.extend(trajs)
    return _Topology(tasks, graphs, paths)


def _digests_cac(data: RoundInput, skips: dict[str, str]) -> _Digests:
    texts: dict[str, str] = {}
    rules: dict[str, ReasoningMode] = {}
    cacs: dict[str, CACBreakdown] = {}
    for t in data.trajectories:
        access = _access(data, t)
        tid = t.trajectory_id
        try:
            texts[tid] = digest(t, access)
            rules[tid] = rule_mode(t, access)
        except _RECORD_ERRORS as exc:
            texts[tid] = ""
            rules[tid] = ReasoningMode.DIRECT_EXECUTE
            skips.setdefault(tid, f"digest failed: {type(exc).__name__}: {exc}"[:300])
        try:
            cacs[tid] = cac(
                t, data.config.cac_weights, planned=_planned(data.blueprints.get(t.blueprint_id))
            )
        except _RECORD_ERRORS as exc:
            cacs[tid] = CACBreakdown()
            skips.setdefault(tid, f"CAC failed: {type(exc).__name__}: {exc}"[:300])
    return _Digests(texts, rules, cacs)


def _embed(
    data: RoundInput, digests: _Digests, skips: dict[str, str], embedder: _EmbedderSlot
) -> _Embedded:
    cfg = data.config
    ids = [t.trajectory_id for t in data.trajectories]
    if not cfg.embeddings or not ids:
        return _Embedded()
    texts = [digest_for_embedding(digests.texts[i], cfg.embed_max_chars) for i in ids]
    model_id = embedding_model_id(cfg)
    cleaned = [" ".join(x.split()) for x in texts]
    found = data.cached_vectors(model_id, [text_key(x) for x in cleaned if x])
    cache = VectorCache(model_id, found)
    new = len({x for x in cleaned if x}) - len(found)  # about what the model will read
    lazy = LazyEmbedder(lambda: embedder.get(new), cfg.embed_threads)
    out = embed_texts(
        cleaned,
        lazy,
        cache=cache,
        max_chars=cfg.embed_max_chars,
        # large chunks: the model sorts each by length, so less padding
        batch_size=max(cfg.embed_batch_size, 4096),
    )
    digest_keys: dict[str, str | None] = {}
    for i, tid in enumerate(ids):
        if out.ok[i]:
            digest_keys[tid] = text_key(cleaned[i][: cfg.embed_max_chars])
        else:
            digest_keys[tid] = None
            skips.setdefault(tid, f"no embedding: {out.skipped.get(i, 'unknown')}")
    return _Embedded(out.vectors, digest_keys, out.n_embedded, out.n_cached, cache.rows())


def _fit(data: RoundInput, digests: _Digests, vectors: np.ndarray, version: str) -> ModeCodebook:
    cfg = data.config
    ids = [t.trajectory_id for t in data.trajectories]
    return ModeCodebook.fit(
        vectors,
        [digests.rules[i] for i in ids],
        [digests.texts[i] for i in ids],
        version=version,
        min_fit=cfg.mode_min_fit,
        min_cosine=cfg.mode_min_cosine,
        max_fit=cfg.mode_max_fit,
        silhouette_sample=min(2_000, cfg.mode_max_fit),
        threads=cfg.embed_threads or max(1, min(2, os.cpu_count() or 1)),
    )


def _modes(data: RoundInput, digests: _Digests, embedded: _Embedded) -> _Modes:
    ids = [t.trajectory_id for t in data.trajectories]
    labels = [digests.rules[i] for i in ids]
    prior, n_versions = data.prior_codebook, data.n_codebook_versions
    vectors = embedded.vectors
    new_codebooks: list[ModeCodebook] = []
    if vectors is None:
        book = ModeCodebook.rules("embeddings off" if not data.config.embeddings else "no texts")
    elif prior is not None and prior.kind == "kmeans":
        book = prior
        if needs_refit(book.assign(vectors, labels)):
            refit = _fit(data, digests, vectors, f"v{n_versions + 1}")
            if refit.kind == "kmeans":
                book = refit
                new_codebooks.append(refit)
    else:
        book = _fit(data, digests, vectors, "v1")
        new_codebooks.append(book)
    if not new_codebooks and (prior is None or prior.codebook_id != book.codebook_id):
        new_codebooks.append(book)
    assigned = book.assign(vectors if book.kind == "kmeans" else None, labels)
    return _Modes(book, new_codebooks, dict(zip(ids, assigned, strict=True)))


def _sft_prescore(config: CurationConfig, topo: TrajectoryTopology) -> float:
    s = config.sft
    return s.w_rec * float(topo.recovered) + s.w_eff * float(topo.efficiency or 0.0) + s.w_novelty


def _duplicates(data: RoundInput, topology: _Topology, embedded: _Embedded) -> dict[str, str]:
    """Near-duplicates among the round's passed candidates: duplicate id -> the one kept."""
    by_id = {t.trajectory_id: t for t in data.trajectories}
    cands = [
        tid
        for tid in by_id
        if (v := data.verdicts.get(tid)) is not None and v.passed and not v.excluded
    ]
    if not cands:
        return {}
    topo = topology.by_trajectory()
    scores = {tid: _sft_prescore(data.config, topo[tid]) for tid in cands if tid in topo}
    emb = None
    if embedded.vectors is not None:
        index = {t.trajectory_id: i for i, t in enumerate(data.trajectories)}
        emb = embedded.vectors[[index[tid] for tid in cands]]
    marks = near_duplicates(
        [by_id[tid] for tid in cands], emb, scores, threshold=data.config.duplicate_cosine
    )
    return {m.trajectory_id: m.duplicate_of for m in marks}


def _select(
    data: RoundInput,
    topology: _Topology,
    signals: dict[str, Signals],
    duplicates: dict[str, str],
    modes: _Modes,
) -> list[Selection]:
    sft = select_sft(
        topology.trajectories,
        data.verdicts,
        signals,
        duplicates=duplicates,
        modes={t.trajectory_id: modes.mode_key(t.trajectory_id) for t in data.trajectories},
        round=data.round,
        config=data.config.sft,
    )
    return sft + select_rl(topology.tasks, round=data.round, config=data.config.rl)


def _metrics(
    data: RoundInput,
    topology: _Topology,
    signals: dict[str, Signals],
    digests: _Digests,
    skips: dict[str, str],
) -> list[MetricValue]:
    """Every registered metric (``curation/metrics/``) of every trajectory and task."""
    topo = topology.by_trajectory()
    by_task = _by_task(data.trajectories)

    def skip(item_id: str, name: str, exc: Exception) -> None:
        skips.setdefault(item_id, f"metric {name} failed: {type(exc).__name__}: {exc}"[:300])

    return compute_metrics(
        [
            TrajectoryFacts(
                trajectory=t,
                verdict=data.verdicts.get(t.trajectory_id),
                signals=signals.get(t.trajectory_id),
                topology=topo.get(t.trajectory_id),
                complexity=digests.cacs.get(t.trajectory_id),
            )
            for t in data.trajectories
        ],
        [
            TaskFacts(topology=t, trajectories=by_task[t.task_id], verdicts=data.verdicts)
            for t in topology.tasks
        ],
        run_id=data.run_id,
        round=data.round,
        on_error=skip,
    )


# --- report and rows -------------------------------------------------------------------------


def _domain(data: RoundInput, t: Trajectory) -> str | None:
    bp = data.blueprints.get(t.blueprint_id)
    return (bp.domain if bp is not None else None) or data.domains.get(t.cluster_id)


def _report_and_records(data: RoundInput, st: _Stages, skips: dict[str, str]) -> RoundOutput:
    ts = data.trajectories
    accepted = [
        t
        for t in ts
        if (v := data.verdicts.get(t.trajectory_id)) is not None
        and v.passed
        and not v.excluded
        and t.trajectory_id not in st.duplicates
    ]
    k_clusters = max(data.n_registered_clusters, len({t.cluster_id for t in ts}))
    k_domains = len({d.value for d in Domain} | set(data.domains.values()))
    book = st.modes.codebook
    round_report = diversity_report(
        round=data.round,
        domains=[_domain(data, t) for t in accepted],
        clusters=[t.cluster_id for t in accepted],
        modes=[st.modes.mode_key(t.trajectory_id) for t in accepted],
        cac_values=[st.digests.cacs[t.trajectory_id].cac for t in accepted],
        k_domains=k_domains,
        k_clusters=k_clusters,
        k_modes=book.k,
        mode_codebook=book.codebook_id,
        n_duplicates=len(st.duplicates),
    )
    earlier = _earlier_accepted(data, book)
    cumulative = diversity_report(
        round=data.round,
        domains=[e["domain"] for e in earlier] + [_domain(data, t) for t in accepted],
        clusters=[e["cluster_id"] for e in earlier] + [t.cluster_id for t in accepted],
        modes=[e["mode"] for e in earlier] + [st.modes.mode_key(t.trajectory_id) for t in accepted],
        cac_values=[e["cac"] for e in earlier]
        + [st.digests.cacs[t.trajectory_id].cac for t in accepted],
        k_domains=k_domains,
        k_clusters=k_clusters,
        k_modes=book.k,
        mode_codebook=book.codebook_id,
        n_duplicates=len(st.duplicates) + data.earlier_duplicates,
    )
    ebr_values = [t.error_branch_ratio for t in st.topology.tasks if t.n_rollouts > 0]
    ebr_all = ebr_values + list(data.earlier_error_branch_ratios)
    verdicts = [data.verdicts.get(t.trajectory_id) for t in ts]
    counted = [v for v in verdicts if v is not None and not v.excluded]
    sft_sel = [s for s in st.selections if s.kind is SelectionKind.SFT and s.selected]
    rl_sel = [s for s in st.selections if s.kind is SelectionKind.RL and s.selected]
    report = CurationReport(
        run_id=data.run_id,
        round=data.round,
        input_hash=data.input_hash,
        n_trajectories=len(ts),
        n_verified=sum(1 for v in counted if v.passed),
        n_accepted=len(accepted),
        n_tasks=len(st.topology.tasks),
        n_sft_selected=len(sft_sel),
        n_rl_selected=len(rl_sel),
        n_duplicates=len(st.duplicates),
        n_embedded=st.embedded.n_embedded,
        n_embed_cached=st.embedded.n_cached,
        mode_codebook=book.codebook_id,
        error_branch_ratio=float(np.mean(ebr_values)) if ebr_values else 0.0,
        diversity=round_report,
        cumulative=cumulative,
        skips=dict(sorted(skips.items())),
    )
    return _records(data, st, report, accepted, cumulative, ebr_all, counted)


def _earlier_accepted(data: RoundInput, book: ModeCodebook) -> list[dict[str, Any]]:
    """Earlier rounds' accepted rows, their modes relabelled with this round's codebook."""
    rows = [dict(r) for r in data.earlier_accepted]
    stale = [r for r in rows if r["mode_codebook"] != book.codebook_id]
    if stale and book.kind == "kmeans":
        found = data.cached_vectors(
            embedding_model_id(data.config), [r["digest_key"] for r in stale if r["digest_key"]]
        )
        assert book.centroids is not None  # a k-means codebook always has its centroids
        vecs = np.zeros((len(stale), book.centroids.shape[1]), dtype=np.float32)
        for i, r in enumerate(stale):
            if r["digest_key"] in found:
                vecs[i] = found[r["digest_key"]]
        labels = [ReasoningMode(r["rule_label"] or "direct_execute") for r in stale]
        for r, a in zip(stale, book.assign(vecs, labels), strict=True):
            r["mode"] = a.mode_id
    elif stale:
        for r in stale:
            r["mode"] = r["rule_label"]
    return rows


def _records(
    data: RoundInput,
    st: _Stages,
    report: CurationReport,
    accepted: list[Trajectory],
    cumulative: DiversityReport,
    ebr_all: list[float],
    counted: list[Verdict],
) -> RoundOutput:
    base = _RunRound(run_id=data.run_id, round=data.round)
    topo_by = st.topology.by_trajectory()
    sft_score = {s.item_id: s.score for s in st.selections if s.kind is SelectionKind.SFT}
    accepted_ids = {t.trajectory_id for t in accepted}
    scores = []
    for t in data.trajectories:
        tid = t.trajectory_id
        a = st.modes.assignments.get(tid)
        topo = topo_by.get(tid)
        breakdown = st.digests.cacs.get(tid, CACBreakdown())
        scores.append(
            Scores(
                **base,
                trajectory_id=tid,
                **diversity_fields(breakdown, a),
                signature=topo.signature if topo else None,
                recovered=bool(topo.recovered) if topo else False,
                efficiency=topo.efficiency if topo else None,
                sft_score=sft_score.get(tid),
                duplicate_of=st.duplicates.get(tid),
                mode_label=a.label.value if a and a.label else None,
                mode_cosine=a.cosine if a else None,
                mode_reason=a.reason if a else None,
                rule_label=st.digests.rules[tid].value if tid in st.digests.rules else None,
                accepted=tid in accepted_ids,
                domain=_domain(data, t),
                digest_key=st.embedded.digest_keys.get(tid),
            )
        )
    rl_pool = {
        s.item_id for s in st.selections if s.kind is SelectionKind.RL and s.rank is not None
    }
    graphs = st.topology.graphs
    tasks_with = [t for t in st.topology.tasks if t.n_rollouts > 0]
    stats = RoundStats(
        **base,
        round_key=f"{data.run_id}:{data.round}",
        input_hash=report.input_hash,
        n_trajectories=report.n_trajectories,
        n_verified=report.n_verified,
        n_accepted=report.n_accepted,
        pass_rate=report.n_verified / len(counted) if counted else None,
        n_tasks=report.n_tasks,
        domain_entropy=cumulative.h_dom,
        domain_entropy_norm=cumulative.h_dom_norm,
        cluster_entropy_norm=cumulative.h_cluster_norm,
        reasoning_mode_entropy=cumulative.h_mode,
        reasoning_mode_entropy_norm=cumulative.h_mode_norm,
        action_complexity=cumulative.cac_mean,
        error_branch_ratio=float(np.mean(ebr_all)) if ebr_all else 0.0,
        strategic_heterogeneity=_mean([t.strategy_entropy_norm for t in tasks_with]),
        n_success_strategies=_mean([float(t.n_success_strategies) for t in tasks_with]),
        n_recovered=sum(1 for t in st.topology.trajectories if t.recovered),
        n_duplicates=report.n_duplicates,
        n_sft_selected=report.n_sft_selected,
        n_rl_selected=report.n_rl_selected,
        mode_codebook=report.mode_codebook,
        skips=report.skips,
        timings=None,
        report=cumulative,
        curation=report.model_dump(mode="json", exclude={"timings"}),
        round_report=report.diversity,
    )
    return RoundOutput(
        report=report,
        signals=list(st.signals.values()),
        trajectory_topology=list(st.topology.trajectories),
        task_topology=list(st.topology.tasks),
        task_graphs={
            t.task_id: TaskGraph(graphs[t.task_id]["cluster_id"], graphs[t.task_id]["graph"])
            for t in st.topology.tasks
        },
        rl_pool=rl_pool,
        scores=scores,
        selections=list(st.selections),
        codebooks=[b.to_record() for b in st.modes.new_codebooks],
        embeddings=list(st.embedded.cache_rows),
        metric_values=list(st.metric_values),
        round_stats=stats,
    )


def _mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(sum(vals) / len(vals)) if vals else None
