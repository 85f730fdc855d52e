"""One round of curation as a plain function: ``run_round(RoundInput) -> RoundOutput``.

Signals, topology, diversity and selection of one round (docs/methods.md §5, §7, §8), with no
store: the flow (``flows/curate.py``) loads a ``RoundInput`` (the round's trajectories,
verdicts and blueprints, and what earlier rounds left), calls ``run_round`` and writes the
rows it returns. Per trajectory they are a ``signals`` row (§7), a ``trajectory_topology`` row
and a ``scores`` row (mode, CAC, recovery, efficiency, SFT score, duplicate; §5, §8); per task
a ``task_topology`` row with its quotient graph (§8); one ``selections`` row per SFT and RL
decision with its reason (§8); one ``metric_values`` row per value of every metric registered
in ``curation/metrics/``; the round's mode codebook (§5.2); and one ``round_stats`` row
with the dataset's figures after the round (§5.4). Bad input never stops the round: a
trajectory whose signals cannot be computed gets no signals row and a recorded reason (so SFT
never picks it), a text the embedder cannot take gets no embedding (its mode is the rule
label or ``unassigned``), an empty round gives zero figures and a note.

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
from pydantic import ValidationError

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
    CACBreakdown,
    CurationConfig,
    CurationReport,
    DiversityReport,
    Domain,
    InputError,
    MetricValue,
    ModeAssignment,
    PlannedCall,
    ReasoningMode,
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

__all__ = ["RoundInput", "RoundOutput", "graph_json", "run_round"]

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


def _planned(bp: Mapping[str, Any] | None) -> list[PlannedCall] | None:
    path = (bp or {}).get("tool_path")
    if not isinstance(path, list):
        return None
    try:
        return [PlannedCall.model_validate(p) for p in path]
    except ValidationError:
        return None


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
    blueprints: dict[str, dict[str, Any]] = field(default_factory=dict)
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


@dataclass
class RoundOutput:
    """The round's report and its rows, table -> rows (``signals``, ``trajectory_topology``,
    ``task_topology``, ``scores``, ``selections``, ``mode_codebooks``, ``embeddings`` (the
    new vectors only), ``metric_values`` (every registered metric), ``round_stats``)."""

    report: CurationReport
    rows: dict[str, list[dict[str, Any]]]


def run_round(data: RoundInput) -> RoundOutput:
    """Curate one round (see the module docstring). ``report.timings`` holds the stages'
    seconds; ``report.rows_added`` is left for the caller that writes the rows."""
    return _Curation(data).run()


class _Curation:
    """One round's curation: the stages in order, each filling the rows it owns."""

    def __init__(self, data: RoundInput) -> None:
        self.run_id, self.round, self.cfg = data.run_id, data.round, data.config
        self.data, self.timer, self.embedder = data, _Timer(), data.embedder
        self.skips = dict(data.skips)
        self.by_id = {t.trajectory_id: t for t in data.trajectories}
        self.steps: dict[str, tuple[str, list[Step]]] = {}
        self.signals: dict[str, Signals] = {}
        self.task_topos: list[TaskTopology] = []
        self.task_graphs: dict[str, dict[str, Any]] = {}
        self.traj_topos: list[TrajectoryTopology] = []
        self.digests: dict[str, str] = {}
        self.rules: dict[str, ReasoningMode] = {}
        self.cacs: dict[str, CACBreakdown] = {}
        self.vectors: np.ndarray | None = None
        self.digest_keys: dict[str, str | None] = {}
        self.n_embedded = 0
        self.n_cached = 0
        self.cache_rows: list[dict[str, Any]] = []
        self.codebook = ModeCodebook.rules("embeddings off")
        self.new_codebooks: list[ModeCodebook] = []
        self.assignments: dict[str, ModeAssignment] = {}
        self.duplicates: dict[str, str] = {}
        self.selections: list[Selection] = []
        self.metric_values: list[MetricValue] = []

    # stages -----------------------------------------------------------------------------

    def run(self) -> RoundOutput:
        if not self.data.trajectories:
            self.skips["round"] = "empty round: no trajectories"
        with self.timer.stage("steps"):
            self._steps()
        with self.timer.stage("signals"):
            self._signals()
        with self.timer.stage("topology"):
            self._topology()
        with self.timer.stage("digests_cac"):
            self._digests_cac()
        with self.timer.stage("embeddings"):
            self._embed()
        with self.timer.stage("modes"):
            self._modes()
        with self.timer.stage("duplicates"):
            self._duplicates()
        with self.timer.stage("selection"):
            self._select()
        with self.timer.stage("metrics"):
            self._metrics()
        with self.timer.stage("report"):
            report, rows = self._report_and_rows(self.data.input_hash)
        report = report.model_copy(update={"timings": dict(self.timer.times)})
        return RoundOutput(report=report, rows=rows)

    def _cluster_access(self, t: Trajectory) -> dict[str, ToolAccess] | None:
        return self.data.access.get(t.cluster_id)

    def _hidden_info(self, task_id: str) -> dict[str, Any] | None:
        bp = self.data.blueprints.get(task_id) or {}
        return bp.get("hidden_info") if isinstance(bp.get("hidden_info"), dict) else None

    def _steps(self) -> None:
        """The state keys of every rollout once, for signals and topology (§1.2)."""
        caches: dict[str, dict[tuple[str, str], tuple[str, str]]] = defaultdict(dict)
        for t in self.data.trajectories:
            # on a bad record, signals and topology recompute the steps and record why
            with suppress(*_RECORD_ERRORS):
                self.steps[t.trajectory_id] = trajectory_steps(
                    t,
                    write_tools=_write_tools(self._cluster_access(t)),
                    hidden_info=self._hidden_info(t.blueprint_id),
                    action_cache=caches[t.blueprint_id],  # one task: one set of tool schemas
                )

    def _signals(self) -> None:
        for t in self.data.trajectories:
            try:
                self.signals[t.trajectory_id] = compute_signals(
                    t,
                    verdict=self.data.verdicts.get(t.trajectory_id),
                    write_tools=_write_tools(self._cluster_access(t)),
                    steps=self.steps.get(t.trajectory_id),
                )
            except _RECORD_ERRORS as exc:
                self.skips[t.trajectory_id] = f"signals failed: {type(exc).__name__}: {exc}"[:300]

    def _topology(self) -> None:
        by_task: dict[str, list[Trajectory]] = defaultdict(list)
        for t in self.data.trajectories:
            by_task[t.blueprint_id].append(t)
        soft = self.cfg.soft_merge
        for task_id in sorted(by_task):
            group = by_task[task_id]
            hidden = self._hidden_info(task_id)
            try:
                graph = build_quotient_graph(
                    group,
                    self.data.verdicts,
                    task_id=task_id,
                    write_tools=_write_tools(self._cluster_access(group[0])),
                    hidden_info=hidden,
                    soft_merge=soft,
                    similarity_threshold=self.cfg.soft_merge_threshold,
                    embedder=self._get_embedder() if soft == "embedding" else None,
                    steps=self.steps,
                )
                task = task_metrics(graph)
                trajs = trajectory_metrics(graph)
            except _RECORD_ERRORS as exc:
                reason = f"topology failed: {type(exc).__name__}: {exc}"[:300]
                self.skips[task_id] = reason
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
                self.skips.setdefault(task_id, "one valid rollout: EBR and H_strat are 0")
            self.task_topos.append(task)
            self.task_graphs[task_id] = {
                "cluster_id": group[0].cluster_id,
                "graph": graph_json(graph) if graph is not None else None,
            }
            self.traj_topos.extend(trajs)

    def _digests_cac(self) -> None:
        for t in self.data.trajectories:
            access = self._cluster_access(t)
            tid = t.trajectory_id
            try:
                self.digests[tid] = digest(t, access)
                self.rules[tid] = rule_mode(t, access)
            except _RECORD_ERRORS as exc:
                self.digests[tid] = ""
                self.rules[tid] = ReasoningMode.DIRECT_EXECUTE
                self.skips.setdefault(tid, f"digest failed: {type(exc).__name__}: {exc}"[:300])
            try:
                self.cacs[tid] = cac(
                    t,
                    self.cfg.cac_weights,
                    planned=_planned(self.data.blueprints.get(t.blueprint_id)),
                )
            except _RECORD_ERRORS as exc:
                self.cacs[tid] = CACBreakdown()
                self.skips.setdefault(tid, f"CAC failed: {type(exc).__name__}: {exc}"[:300])

    def _get_embedder(self, n_texts: int | None = None) -> Embedder:
        if self.embedder is None:
            self.embedder = default_embedder(self.cfg, n_texts)
        return self.embedder

    def _embed(self) -> None:
        ids = [t.trajectory_id for t in self.data.trajectories]
        if not self.cfg.embeddings or not ids:
            return
        texts = [digest_for_embedding(self.digests[i], self.cfg.embed_max_chars) for i in ids]
        model_id = embedding_model_id(self.cfg)
        cleaned = [" ".join(x.split()) for x in texts]
        found = self.data.cached_vectors(model_id, [text_key(x) for x in cleaned if x])
        cache = VectorCache(model_id, found)
        new = len({x for x in cleaned if x}) - len(found)  # about what the model will read
        lazy = LazyEmbedder(lambda: self._get_embedder(new), self.cfg.embed_threads)
        out = embed_texts(
            cleaned,
            lazy,
            cache=cache,
            max_chars=self.cfg.embed_max_chars,
            # large chunks: the model sorts each by length, so less padding
            batch_size=max(self.cfg.embed_batch_size, 4096),
        )
        self.vectors = out.vectors
        for i, tid in enumerate(ids):
            if out.ok[i]:
                self.digest_keys[tid] = text_key(cleaned[i][: self.cfg.embed_max_chars])
            else:
                self.digest_keys[tid] = None
                self.skips.setdefault(tid, f"no embedding: {out.skipped.get(i, 'unknown')}")
        self.n_embedded, self.n_cached = out.n_embedded, out.n_cached
        self.cache_rows = cache.rows()

    def _fit(self, version: str) -> ModeCodebook:
        ids = [t.trajectory_id for t in self.data.trajectories]
        assert self.vectors is not None
        return ModeCodebook.fit(
            self.vectors,
            [self.rules[i] for i in ids],
            [self.digests[i] for i in ids],
            version=version,
            min_fit=self.cfg.mode_min_fit,
            min_cosine=self.cfg.mode_min_cosine,
            max_fit=self.cfg.mode_max_fit,
            silhouette_sample=min(2_000, self.cfg.mode_max_fit),
            threads=self.cfg.embed_threads or max(1, min(2, os.cpu_count() or 1)),
        )

    def _modes(self) -> None:
        ids = [t.trajectory_id for t in self.data.trajectories]
        labels = [self.rules[i] for i in ids]
        prior, n_versions = self.data.prior_codebook, self.data.n_codebook_versions
        if self.vectors is None:
            book = ModeCodebook.rules("embeddings off" if not self.cfg.embeddings else "no texts")
        elif prior is not None and prior.kind == "kmeans":
            book = prior
            if needs_refit(book.assign(self.vectors, labels)):
                refit = self._fit(f"v{n_versions + 1}")
                if refit.kind == "kmeans":
                    book = refit
                    self.new_codebooks.append(refit)
        else:
            book = self._fit("v1")
            self.new_codebooks.append(book)
        if not self.new_codebooks and (prior is None or prior.codebook_id != book.codebook_id):
            self.new_codebooks.append(book)
        self.codebook = book
        assigned = book.assign(self.vectors if book.kind == "kmeans" else None, labels)
        self.assignments = dict(zip(ids, assigned, strict=True))

    def _sft_prescore(self, topo: TrajectoryTopology) -> float:
        s = self.cfg.sft
        return (
            s.w_rec * float(topo.recovered) + s.w_eff * float(topo.efficiency or 0.0) + s.w_novelty
        )

    def _candidates(self) -> list[str]:
        out = []
        for tid in self.by_id:
            v = self.data.verdicts.get(tid)
            if v is not None and v.passed and not v.excluded:
                out.append(tid)
        return out

    def _duplicates(self) -> None:
        cands = self._candidates()
        if not cands:
            return
        topo = {t.trajectory_id: t for t in self.traj_topos}
        scores = {tid: self._sft_prescore(topo[tid]) for tid in cands if tid in topo}
        emb = None
        if self.vectors is not None:
            index = {t.trajectory_id: i for i, t in enumerate(self.data.trajectories)}
            emb = self.vectors[[index[tid] for tid in cands]]
        marks = near_duplicates(
            [self.by_id[tid] for tid in cands],
            emb,
            scores,
            threshold=self.cfg.duplicate_cosine,
        )
        self.duplicates = {m.trajectory_id: m.duplicate_of for m in marks}

    def _mode_key(self, tid: str) -> str | None:
        a = self.assignments.get(tid)
        return a.mode_id if a is not None else None

    def _select(self) -> None:
        sft = select_sft(
            self.traj_topos,
            self.data.verdicts,
            self.signals,
            duplicates=self.duplicates,
            modes={tid: self._mode_key(tid) for tid in self.by_id},
            round=self.round,
            config=self.cfg.sft,
        )
        rl = select_rl(self.task_topos, round=self.round, config=self.cfg.rl)
        self.selections = sft + rl

    def _metrics(self) -> None:
        """Every registered metric (``curation/metrics/``) of every trajectory and task."""
        topo = {t.trajectory_id: t for t in self.traj_topos}
        by_task: dict[str, list[Trajectory]] = defaultdict(list)
        for t in self.data.trajectories:
            by_task[t.blueprint_id].append(t)

        def skip(item_id: str, name: str, exc: Exception) -> None:
            why = f"metric {name} failed: {type(exc).__name__}: {exc}"[:300]
            self.skips.setdefault(item_id, why)

        self.metric_values = compute_metrics(
            [
                TrajectoryFacts(
                    trajectory=t,
                    verdict=self.data.verdicts.get(t.trajectory_id),
                    signals=self.signals.get(t.trajectory_id),
                    topology=topo.get(t.trajectory_id),
                    complexity=self.cacs.get(t.trajectory_id),
                )
                for t in self.data.trajectories
            ],
            [
                TaskFacts(topology=t, trajectories=by_task[t.task_id], verdicts=self.data.verdicts)
                for t in self.task_topos
            ],
            run_id=self.run_id,
            round=self.round,
            on_error=skip,
        )

    # report and rows ----------------------------------------------------------------------

    def _domain(self, t: Trajectory) -> str | None:
        bp = self.data.blueprints.get(t.blueprint_id) or {}
        return bp.get("domain") or self.data.domains.get(t.cluster_id)

    def _accepted(self, tid: str) -> bool:
        v = self.data.verdicts.get(tid)
        return v is not None and v.passed and not v.excluded and tid not in self.duplicates

    def _k_clusters(self) -> int:
        clusters = {t.cluster_id for t in self.data.trajectories}
        return max(self.data.n_registered_clusters, len(clusters))

    def _report_and_rows(self, ihash: str) -> tuple[CurationReport, dict[str, list[dict]]]:
        ts = self.data.trajectories
        accepted = [t for t in ts if self._accepted(t.trajectory_id)]
        k_clusters = self._k_clusters()
        k_domains = len({d.value for d in Domain} | set(self.data.domains.values()))
        round_report = diversity_report(
            round=self.round,
            domains=[self._domain(t) for t in accepted],
            clusters=[t.cluster_id for t in accepted],
            modes=[self._mode_key(t.trajectory_id) for t in accepted],
            cac_values=[self.cacs[t.trajectory_id].cac for t in accepted],
            k_domains=k_domains,
            k_clusters=k_clusters,
            k_modes=self.codebook.k,
            mode_codebook=self.codebook.codebook_id,
            n_duplicates=len(self.duplicates),
        )
        earlier = self._earlier_accepted()
        cumulative = diversity_report(
            round=self.round,
            domains=[e["domain"] for e in earlier] + [self._domain(t) for t in accepted],
            clusters=[e["cluster_id"] for e in earlier] + [t.cluster_id for t in accepted],
            modes=[e["mode"] for e in earlier]
            + [self._mode_key(t.trajectory_id) for t in accepted],
            cac_values=[e["cac"] for e in earlier]
            + [self.cacs[t.trajectory_id].cac for t in accepted],
            k_domains=k_domains,
            k_clusters=k_clusters,
            k_modes=self.codebook.k,
            mode_codebook=self.codebook.codebook_id,
            n_duplicates=len(self.duplicates) + self.data.earlier_duplicates,
        )
        ebr_values = [t.error_branch_ratio for t in self.task_topos if t.n_rollouts > 0]
        ebr_all = ebr_values + list(self.data.earlier_error_branch_ratios)
        verdicts = [self.data.verdicts.get(t.trajectory_id) for t in ts]
        counted = [v for v in verdicts if v is not None and not v.excluded]
        sft_sel = [s for s in self.selections if s.kind is SelectionKind.SFT and s.selected]
        rl_sel = [s for s in self.selections if s.kind is SelectionKind.RL and s.selected]
        report = CurationReport(
            run_id=self.run_id,
            round=self.round,
            input_hash=ihash,
            n_trajectories=len(ts),
            n_verified=sum(1 for v in counted if v.passed),
            n_accepted=len(accepted),
            n_tasks=len(self.task_topos),
            n_sft_selected=len(sft_sel),
            n_rl_selected=len(rl_sel),
            n_duplicates=len(self.duplicates),
            n_embedded=self.n_embedded,
            n_embed_cached=self.n_cached,
            mode_codebook=self.codebook.codebook_id,
            error_branch_ratio=float(np.mean(ebr_values)) if ebr_values else 0.0,
            diversity=round_report,
            cumulative=cumulative,
            skips=dict(sorted(self.skips.items())),
        )
        return report, self._rows(report, accepted, cumulative, ebr_all, counted)

    def _earlier_accepted(self) -> list[dict[str, Any]]:
        """Earlier rounds' accepted rows, their modes relabelled with this round's codebook."""
        rows = [dict(r) for r in self.data.earlier_accepted]
        book = self.codebook
        stale = [r for r in rows if r["mode_codebook"] != book.codebook_id]
        if stale and book.kind == "kmeans":
            found = self.data.cached_vectors(
                embedding_model_id(self.cfg), [r["digest_key"] for r in stale if r["digest_key"]]
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

    def _rows(
        self,
        report: CurationReport,
        accepted: list[Trajectory],
        cumulative: DiversityReport,
        ebr_all: list[float],
        counted: list[Verdict],
    ) -> dict[str, list[dict]]:
        base = _RunRound(run_id=self.run_id, round=self.round)
        topo_by = {t.trajectory_id: t for t in self.traj_topos}
        sft_score = {s.item_id: s.score for s in self.selections if s.kind is SelectionKind.SFT}
        accepted_ids = {t.trajectory_id for t in accepted}
        scores = []
        for t in self.data.trajectories:
            tid = t.trajectory_id
            a = self.assignments.get(tid)
            topo = topo_by.get(tid)
            breakdown = self.cacs.get(tid, CACBreakdown())
            scores.append(
                Scores(
                    **base,
                    trajectory_id=tid,
                    **diversity_fields(breakdown, a),
                    signature=topo.signature if topo else None,
                    recovered=bool(topo.recovered) if topo else False,
                    efficiency=topo.efficiency if topo else None,
                    sft_score=sft_score.get(tid),
                    duplicate_of=self.duplicates.get(tid),
                    mode_label=a.label.value if a and a.label else None,
                    mode_cosine=a.cosine if a else None,
                    mode_reason=a.reason if a else None,
                    rule_label=self.rules[tid].value if tid in self.rules else None,
                    accepted=tid in accepted_ids,
                    domain=self._domain(t),
                    digest_key=self.digest_keys.get(tid),
                ).model_dump(mode="json")
            )
        rl_pool = {
            s.item_id for s in self.selections if s.kind is SelectionKind.RL and s.rank is not None
        }
        task_rows = [
            {
                **base,
                **t.model_dump(mode="json"),
                "cluster_id": self.task_graphs[t.task_id]["cluster_id"],
                "in_rl_pool": t.task_id in rl_pool,
                "graph": self.task_graphs[t.task_id]["graph"],
            }
            for t in self.task_topos
        ]
        tasks_with = [t for t in self.task_topos if t.n_rollouts > 0]
        stats = {
            **base,
            "round_key": f"{self.run_id}:{self.round}",
            "input_hash": report.input_hash,
            "n_trajectories": report.n_trajectories,
            "n_verified": report.n_verified,
            "n_accepted": report.n_accepted,
            "pass_rate": report.n_verified / len(counted) if counted else None,
            "n_tasks": report.n_tasks,
            "domain_entropy": cumulative.h_dom,
            "domain_entropy_norm": cumulative.h_dom_norm,
            "cluster_entropy_norm": cumulative.h_cluster_norm,
            "reasoning_mode_entropy": cumulative.h_mode,
            "reasoning_mode_entropy_norm": cumulative.h_mode_norm,
            "action_complexity": cumulative.cac_mean,
            "error_branch_ratio": float(np.mean(ebr_all)) if ebr_all else 0.0,
            "strategic_heterogeneity": _mean([t.strategy_entropy_norm for t in tasks_with]),
            "n_success_strategies": _mean([float(t.n_success_strategies) for t in tasks_with]),
            "n_recovered": sum(1 for t in self.traj_topos if t.recovered),
            "n_duplicates": report.n_duplicates,
            "n_sft_selected": report.n_sft_selected,
            "n_rl_selected": report.n_rl_selected,
            "mode_codebook": report.mode_codebook,
            "skips": report.skips,
            "timings": None,
            "report": cumulative.model_dump(mode="json"),
            "curation": report.model_dump(mode="json", exclude={"timings"}),
            "round_report": report.diversity.model_dump(mode="json"),
        }
        codebooks = [
            {
                **base,
                "codebook_id": b.codebook_id,
                "version": b.version,
                "kind": b.kind,
                "n_fit": b.n_fit,
                "silhouette": b.silhouette,
                "fallback_reason": b.fallback_reason,
                "record": b.to_record().model_dump(mode="json"),
            }
            for b in self.new_codebooks
        ]
        return {
            "signals": [{**base, **s.model_dump(mode="json")} for s in self.signals.values()],
            "trajectory_topology": [{**base, **t.model_dump(mode="json")} for t in self.traj_topos],
            "task_topology": task_rows,
            "scores": scores,
            "selections": [
                {"run_id": self.run_id, **s.model_dump(mode="json")} for s in self.selections
            ],  # fmt: skip
            "mode_codebooks": codebooks,
            "embeddings": self.cache_rows,
            "metric_values": [v.model_dump(mode="json") for v in self.metric_values],
            "round_stats": [stats],
        }


def _mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(sum(vals) / len(vals)) if vals else None
