"""Diversity over the whole dataset (docs/methods.md §5; docs/design.md §8).

* **Digests** (§5.2): the assistant's words, cut to 512 tokens, then the action skeleton
  (``R:search_flights R:get_fare_rules W:book_flight ANS``).
* **Reasoning modes** (§5.2): rule labels (first match wins) and a frozen k-means codebook
  over all-MiniLM-L6-v2 digest embeddings; each mode is named by the majority rule label of
  its members plus its top TF-IDF terms. With too few digests the rule labels are the modes.
* **Cumulative action complexity** (§5.3), summed over a trajectory's tool-call steps.
* **Near-duplicates** (§5.4): exact (same cluster, same canonical actions and observation
  classes) or cosine >= 0.95 between digest embeddings in the same cluster; the member with
  the higher SFT score is kept.
* **The per-round report** (§5.4): normalized domain, cluster and mode entropy (§5.1, §1.1),
  CAC mean/median/p90 and the duplicate rate.

Bad input never crashes: a trajectory with no tool calls has CAC 0 and an empty skeleton, an
empty round gives a report with ``n = 0`` and a note, and a text the embedder cannot take
(empty, huge, broken UTF-8) is cleaned, cut, or skipped with its reason.

The pieces live in ``curation.digests`` (digests, rule labels), ``curation.modes``
(embeddings, the codebook) and ``curation.complexity`` (CAC); this module holds
near-duplicates and the report and re-exports the rest, so ``curation.diversity`` is the one
import a caller needs.

Everything here is synchronous and vectorised: embeddings are computed once per distinct text
(a cache keyed by :func:`text_key` can be passed in), near-duplicates are found with matrix
products blocked by cluster, and the per-item loops never visit pairs one by one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TypedDict

import numpy as np

from trajsynth.curation.canon import call_key, canon_call, sha1_hex
from trajsynth.curation.complexity import cac, cac_tertiles, difficulty_of
from trajsynth.curation.digests import (
    CODE_TOOL_WORDS,
    DIGEST_TOKENS,
    EMBED_MAX_CHARS,
    action_skeleton,
    digest,
    digest_for_embedding,
    is_code_tool,
    rule_mode,
    sanitize_text,
    text_key,
    tool_access,
)
from trajsynth.curation.entropy import counts_of, entropy_stats
from trajsynth.curation.modes import (
    MIN_COSINE,
    MIN_FIT,
    REFIT_UNASSIGNED,
    EmbeddedTexts,
    ModeCodebook,
    embed_digests,
    embed_texts,
    needs_refit,
    unit_rows,
)
from trajsynth.schemas import (
    CACBreakdown,
    DiversityReport,
    Domain,
    DuplicateMark,
    MessageRole,
    ModeAssignment,
    ToolCallRecord,
    Trajectory,
)

__all__ = [
    "CODE_TOOL_WORDS",
    "DIGEST_TOKENS",
    "DUPLICATE_COSINE",
    "EMBED_MAX_CHARS",
    "MIN_COSINE",
    "MIN_FIT",
    "REFIT_UNASSIGNED",
    "DiversityFields",
    "EmbeddedTexts",
    "ModeCodebook",
    "action_key",
    "action_skeleton",
    "cac",
    "cac_tertiles",
    "difficulty_of",
    "digest",
    "digest_for_embedding",
    "diversity_fields",
    "diversity_report",
    "embed_digests",
    "embed_texts",
    "is_code_tool",
    "near_duplicates",
    "needs_refit",
    "rule_mode",
    "sanitize_text",
    "text_key",
    "tool_access",
]

DUPLICATE_COSINE = 0.95
"""Digest cosine at or above which two trajectories of one cluster are near-duplicates (§5.4)."""

# --- near-duplicates (§5.4) ------------------------------------------------------------------


def _call_action(call: ToolCallRecord) -> list[str]:
    return [*call_key(call), call.obs_class.value]


def _text_action(kind: str, text: str) -> list[str]:
    return [*canon_call(kind, {"text": " ".join(sanitize_text(text).split())}), "ok"]


def action_key(trajectory: Trajectory) -> str:
    """Exact-duplicate key: the canonical action sequence with its observation classes (§5.4).

    Actions follow §1.2: every tool call (canonical call plus observation class), and the
    assistant's text-only turns as ``ask_user`` (any but the last) or ``final_answer`` (the
    last), canonicalized by their text. So two trajectories with no tool calls are exact
    duplicates only when they say the same thing. Call records that no assistant message
    names (hand-built trajectories) are taken in order before the text actions.
    Trajectories with the same key in the same cluster are exact duplicates.
    """
    by_id = {c.call_id: c for c in trajectory.calls}
    assistant = [m for m in trajectory.messages if m.role is MessageRole.ASSISTANT]
    seq: list[list[str]] = []
    used: set[str] = set()
    for i, message in enumerate(assistant):
        if message.tool_calls:
            for tc in message.tool_calls:
                record = by_id.get(tc.id)
                if record is not None and tc.id not in used:
                    used.add(tc.id)
                    seq.append(_call_action(record))
        elif message.content and message.content.strip():
            kind = "final_answer" if i == len(assistant) - 1 else "ask_user"
            seq.append(_text_action(kind, message.content))
    leftover = [_call_action(c) for c in trajectory.calls if c.call_id not in used]
    seq = leftover + seq if not used else seq + leftover
    blob = json.dumps(seq, separators=(",", ":"), ensure_ascii=False)
    return sha1_hex(blob)


def near_duplicates(
    trajectories: Sequence[Trajectory],
    embeddings: np.ndarray | None,
    scores: Mapping[str, float | None] | None = None,
    *,
    threshold: float = DUPLICATE_COSINE,
    block: int = 1024,
) -> list[DuplicateMark]:
    """Exact and near duplicates within each cluster, keeping the higher score (§5.4).

    Within a cluster, trajectories are ranked by SFT score (``scores``; missing or None ranks
    last), ties by id. Walking that ranking, each trajectory not yet marked keeps its place and
    marks every lower-ranked unmarked one that is an exact duplicate (:func:`action_key`) or
    whose digest cosine is >= ``threshold``. Similarities come from matrix products over blocks
    of ``block`` rows; rows with no embedding (zero) only take part in exact matching, and with
    ``embeddings=None`` only exact duplicates are found. Returns one mark per duplicate.
    """
    n = len(trajectories)
    if n == 0:
        return []
    emb = None
    if embeddings is not None:
        emb = unit_rows(embeddings)
        if len(emb) != n:
            raise ValueError(f"{len(emb)} embedding rows for {n} trajectories")
    scores = scores or {}
    keys = [action_key(t) for t in trajectories]
    key_ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    by_cluster: dict[str, list[int]] = {}
    for i, traj in enumerate(trajectories):
        by_cluster.setdefault(traj.cluster_id, []).append(i)

    def rank(i: int) -> tuple[float, str]:
        s = scores.get(trajectories[i].trajectory_id)
        return (-(s if s is not None and math.isfinite(s) else -math.inf),
                trajectories[i].trajectory_id)  # fmt: skip

    marks: list[DuplicateMark] = []
    for cluster_id in sorted(by_cluster):
        idx = np.asarray(sorted(by_cluster[cluster_id], key=rank))
        m = len(idx)
        kid = np.asarray([key_ids[keys[i]] for i in idx])
        e = emb[idx] if emb is not None else None
        removed = np.zeros(m, dtype=bool)
        for start in range(0, m, block):
            stop = min(m, start + block)
            if removed[start:stop].all():
                continue
            sims = e[start:stop] @ e.T if e is not None else None
            for r in range(start, stop):
                if removed[r]:
                    continue
                rest = slice(r + 1, m)
                exact = kid[rest] == kid[r]
                near = sims[r - start, rest] >= threshold if sims is not None else False
                hit = ~removed[rest] & (exact | near)
                if not hit.any():
                    continue
                for j in np.flatnonzero(hit) + r + 1:
                    is_exact = bool(kid[j] == kid[r])
                    sim = 1.0 if sims is None else float(min(1.0, sims[r - start, j]))
                    marks.append(
                        DuplicateMark(
                            trajectory_id=trajectories[idx[j]].trajectory_id,
                            duplicate_of=trajectories[idx[r]].trajectory_id,
                            cluster_id=cluster_id,
                            kind="exact" if is_exact else "near",
                            similarity=1.0 if is_exact else sim,
                        )
                    )
                removed[rest] |= hit
    return marks


# --- the round report (§5.4) -----------------------------------------------------------------


def diversity_report(
    *,
    round: int,
    domains: Sequence[str | None],
    clusters: Sequence[str | None],
    modes: Sequence[str | None],
    cac_values: Sequence[float],
    k_domains: int = len(Domain),
    k_clusters: int,
    k_modes: int,
    mode_codebook: str | None = None,
    n_duplicates: int = 0,
    n_candidates: int | None = None,
) -> DiversityReport:
    """The per-round diversity row of docs/methods.md §5.4 over the accepted trajectories.

    ``domains``, ``clusters``, ``modes`` and ``cac_values`` hold one entry per accepted
    (verified, non-duplicate) trajectory; a ``None`` mode is ``unassigned`` and left out of
    the mode entropy. Entropies are normalized by the DECLARED supports ``k_domains`` (the
    domain catalog), ``k_clusters`` (clusters in the registry) and ``k_modes`` (the codebook's
    K, empty modes included), §1.1. The duplicate rate is ``n_duplicates / n_candidates``
    (default: accepted plus duplicates). An empty round gives zeros, no CAC statistics and a
    note.
    """
    notes: list[str] = []
    n = len(clusters)
    if not (len(domains) == len(modes) == n):
        raise ValueError("domains, clusters and modes must have one entry per trajectory")
    dom = entropy_stats(counts_of(domains), k_domains)
    clu = entropy_stats(counts_of(clusters), k_clusters)
    mode_counts = counts_of(modes)
    mod = entropy_stats(mode_counts, k_modes)
    unassigned = sum(m is None for m in modes)
    arr = np.asarray([v for v in cac_values if v is not None and math.isfinite(v)], dtype=float)
    if n == 0:
        notes.append("empty round: no accepted trajectories")
    if arr.size == 0 and n:
        notes.append("no CAC values")
    candidates = n + n_duplicates if n_candidates is None else n_candidates
    return DiversityReport(
        round=round,
        n=n,
        h_dom=dom.h,
        h_dom_norm=dom.h_norm,
        k_dom=dom.k,
        eff_dom=dom.effective,
        h_cluster=clu.h,
        h_cluster_norm=clu.h_norm,
        k_cluster=clu.k,
        eff_cluster=clu.effective,
        h_mode=mod.h,
        h_mode_norm=mod.h_norm,
        k_mode=mod.k,
        eff_mode=mod.effective,
        mode_codebook=mode_codebook,
        n_unassigned=unassigned,
        unassigned_rate=unassigned / n if n else 0.0,
        cac_mean=float(arr.mean()) if arr.size else None,
        cac_median=float(np.median(arr)) if arr.size else None,
        cac_p90=float(np.percentile(arr, 90)) if arr.size else None,
        n_duplicates=n_duplicates,
        duplicate_rate=n_duplicates / candidates if candidates > 0 else 0.0,
        notes=notes,
    )


class DiversityFields(TypedDict):
    """The per-trajectory diversity fields of ``schemas.Scores``, by name and type."""

    mode: str | None
    mode_codebook: str | None
    action_complexity: float
    n_steps: int
    n_distinct_tools: int
    max_dep_depth: int
    n_bound_args: int
    n_conditional: int


def diversity_fields(
    breakdown: CACBreakdown, assignment: ModeAssignment | None = None
) -> DiversityFields:
    """The per-trajectory fields §5.3 stores, named as in ``schemas.Scores``.

    ``mode`` is the assignment's ``mode_id`` (None when unassigned; names live in the stored
    codebook) and ``mode_codebook`` the codebook's id.

    >>> fields = diversity_fields(CACBreakdown())
    >>> fields["action_complexity"], fields["mode"]
    (0.0, None)
    """
    return {
        "mode": assignment.mode_id if assignment is not None else None,
        "mode_codebook": assignment.codebook if assignment is not None else None,
        "action_complexity": breakdown.cac,
        "n_steps": breakdown.n_steps,
        "n_distinct_tools": breakdown.n_distinct_tools,
        "max_dep_depth": breakdown.max_dep_depth,
        "n_bound_args": breakdown.n_bound_args,
        "n_conditional": breakdown.n_conditional,
    }
