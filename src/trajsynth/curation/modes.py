"""Reasoning modes: digest embeddings and the frozen mode codebook (docs/methods.md §5.2).

Digests are embedded with all-MiniLM-L6-v2 (L2-normalised), each distinct text once, through
an optional cache keyed by :func:`~trajsynth.curation.digests.text_key`. k-means for K in
4..16 (seed 0) is fitted on >= 500 digests and the K with the best silhouette is frozen as
the codebook; a new digest takes the nearest centroid by cosine, or is ``unassigned`` below
0.5. Each mode is named by the majority rule label of its members plus its top TF-IDF terms.
With fewer digests the seven rule labels are the modes, and the codebook says why.
"""

from __future__ import annotations

import logging
import math
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from trajsynth.curation.digests import (
    EMBED_MAX_CHARS,
    digest_for_embedding,
    sanitize_text,
    text_key,
)
from trajsynth.curation.embeddings import Embedder
from trajsynth.schemas import (
    ModeAssignment,
    ModeCodebookRecord,
    ModeInfo,
    ReasoningMode,
    stable_hash,
)

__all__ = [
    "MIN_COSINE",
    "MIN_FIT",
    "REFIT_UNASSIGNED",
    "EmbeddedTexts",
    "ModeCodebook",
    "embed_digests",
    "embed_texts",
    "needs_refit",
    "unit_rows",
]

log = logging.getLogger(__name__)

MIN_FIT = 500
"""Digests needed before a k-means codebook is fitted (§5.2); fewer: rule labels."""
MIN_COSINE = 0.5
"""Below this cosine to every centroid a digest is ``unassigned`` (§5.2)."""
REFIT_UNASSIGNED = 0.10
"""Refit the codebook when more than this share of a round is unassigned (§5.2)."""

# --- embeddings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddedTexts:
    """Embeddings of a list of texts: a zero row (and its reason) for each one skipped."""

    vectors: np.ndarray
    ok: np.ndarray
    skipped: dict[int, str] = field(default_factory=dict)
    n_embedded: int = 0
    n_cached: int = 0
    n_truncated: int = 0


def embed_texts(
    texts: Sequence[str | bytes | None],
    embedder: Embedder,
    *,
    cache: MutableMapping[str, np.ndarray] | None = None,
    max_chars: int = EMBED_MAX_CHARS,
    batch_size: int = 512,
    dim: int = 384,
) -> EmbeddedTexts:
    """L2-normalised embeddings, each distinct text embedded once, in batches.

    Texts are cleaned (:func:`sanitize_text`) and cut to ``max_chars``; an empty text is
    skipped (zero row, reason ``"empty text"``). ``cache`` maps :func:`text_key` to a vector:
    hits are reused and new vectors are added to it (the store persists it). When the
    embedder rejects a batch, its texts are retried one by one and the ones it still rejects
    are skipped with the error as the reason.
    """
    n = len(texts)
    prepared: list[str | None] = []
    skipped: dict[int, str] = {}
    truncated = 0
    for i, raw in enumerate(texts):
        text = sanitize_text(raw).strip()
        if not text:
            prepared.append(None)
            skipped[i] = "empty text"
            continue
        if len(text) > max_chars:
            text = text[:max_chars]
            truncated += 1
        prepared.append(text)

    kept = {i: t for i, t in enumerate(prepared) if t is not None}
    keys = {i: text_key(t) for i, t in kept.items()}
    found: dict[str, np.ndarray] = {}
    n_cached = 0
    if cache is not None:
        for key in set(keys.values()):
            hit = cache.get(key)
            if hit is not None:
                found[key] = np.asarray(hit, dtype=np.float32)
                n_cached += 1
    todo: dict[str, str] = {}
    for i, key in keys.items():
        if key not in found and key not in todo:
            todo[key] = kept[i]
    failed: dict[str, str] = {}
    todo_keys = list(todo)
    for start in range(0, len(todo_keys), batch_size):
        batch = todo_keys[start : start + batch_size]
        for key, vec in zip(batch, _embed_batch([todo[k] for k in batch], embedder), strict=True):
            if isinstance(vec, str):
                failed[key] = vec
            else:
                found[key] = vec
                if cache is not None:
                    cache[key] = vec
    if found:
        dim = int(next(iter(found.values())).shape[-1])
    vectors = np.zeros((n, dim), dtype=np.float32)
    ok = np.zeros(n, dtype=bool)
    for i, key in keys.items():
        if key in found:
            vectors[i] = found[key]
            ok[i] = True
        else:
            skipped[i] = f"embedder rejected the text: {failed.get(key, 'unknown')}"
    if skipped:
        log.info("embedding: %d of %d texts skipped", len(skipped), n)
    return EmbeddedTexts(
        vectors=vectors,
        ok=ok,
        skipped=dict(sorted(skipped.items())),
        n_embedded=len(todo) - len(failed),
        n_cached=n_cached,
        n_truncated=truncated,
    )


def _embed_batch(texts: list[str], embedder: Embedder) -> list[np.ndarray | str]:
    try:
        rows = np.asarray(embedder(texts), dtype=np.float32)
        if rows.shape[0] != len(texts):
            raise ValueError(f"embedder returned {rows.shape[0]} rows for {len(texts)} texts")
        return [_unit(r) for r in rows]
    except (ValueError, RuntimeError, TypeError, UnicodeError, IndexError) as exc:
        if len(texts) == 1:
            return [f"{type(exc).__name__}: {exc}"[:200]]
    return [item for text in texts for item in _embed_batch([text], embedder)]


def _unit(row: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(row))
    return row / norm if norm > 0 and math.isfinite(norm) else np.zeros_like(row)


def embed_digests(
    digests: Sequence[str],
    embedder: Embedder,
    *,
    cache: MutableMapping[str, np.ndarray] | None = None,
    max_chars: int = EMBED_MAX_CHARS,
    batch_size: int = 512,
) -> EmbeddedTexts:
    """Embed digests (§5.2), each cut by :func:`digest_for_embedding` so its skeleton stays."""
    cut = [digest_for_embedding(d or "", max_chars) for d in digests]
    return embed_texts(cut, embedder, cache=cache, max_chars=max_chars, batch_size=batch_size)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32); zero, NaN or infinite rows become zero rows.

    >>> unit_rows(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    good = np.isfinite(norms) & (norms > 0)
    return np.where(good, x / np.where(good, norms, 1.0), 0.0).astype(np.float32)


# --- the mode codebook (§5.2) ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ModeCodebook:
    """A frozen reasoning-mode codebook (docs/methods.md §5.2).

    ``kind="kmeans"``: unit centroids of k-means over digest embeddings (K in 4..16, the best
    silhouette, seed 0); a digest takes the nearest centroid by cosine, or is ``unassigned``
    below ``min_cosine``. ``kind="rules"``: too few digests (or embeddings off), so the seven
    rule labels are the modes (K = 7) and ``fallback_reason`` says why.
    """

    version: str
    kind: Literal["kmeans", "rules"]
    modes: tuple[ModeInfo, ...]
    centroids: np.ndarray | None = None
    min_cosine: float = MIN_COSINE
    silhouette: float | None = None
    n_fit: int = 0
    fallback_reason: str | None = None

    @property
    def k(self) -> int:
        """Size of the declared mode support (empty modes included), the K of H_mode_norm."""
        return len(self.modes)

    @property
    def codebook_id(self) -> str:
        """Content-derived id: version, modes and centroids (rounded to 6 decimals)."""
        cents = None if self.centroids is None else np.round(self.centroids, 6).tolist()
        data = {
            "version": self.version,
            "kind": self.kind,
            "modes": [m.model_dump(mode="json") for m in self.modes],
            "centroids": cents,
            "min_cosine": self.min_cosine,
        }
        return f"modes_{stable_hash(data, length=16)}"

    @classmethod
    def rules(cls, reason: str | None = None, *, version: str = "rules") -> ModeCodebook:
        """The rule-label codebook: one mode per ``ReasoningMode`` (K = 7)."""
        modes = tuple(
            ModeInfo(mode_id=m.value, name=m.value, label=m, terms=[]) for m in ReasoningMode
        )
        return cls(version=version, kind="rules", modes=modes, fallback_reason=reason)

    @classmethod
    def fit(
        cls,
        embeddings: np.ndarray,
        rule_labels: Sequence[ReasoningMode],
        digests: Sequence[str],
        *,
        version: str = "v1",
        min_fit: int = MIN_FIT,
        k_min: int = 4,
        k_max: int = 16,
        seed: int = 0,
        min_cosine: float = MIN_COSINE,
        max_fit: int = 5_000,
        silhouette_sample: int = 2_000,
        n_init: int = 1,
        n_terms: int = 3,
        threads: int | None = 1,
    ) -> ModeCodebook:
        """Fit and freeze the codebook on digest embeddings (docs/methods.md §5.2).

        Rows with no embedding (zero rows) are left out. With fewer than ``min_fit`` usable
        digests, or when no K in ``k_min..k_max`` can be fitted (too few distinct digests),
        the rule-label codebook is returned and its ``fallback_reason`` says why (also
        logged). Above ``max_fit`` rows a seeded sample is clustered; every row is then used
        to name the modes. The silhouette is estimated on ``silhouette_sample`` rows.
        ``threads`` caps the BLAS/OpenMP threads of the fit (None: the library default);
        the default 1 avoids OpenMP spin-waiting when the stage shares the CPU with
        rollout workers, which made fits 40x slower on a loaded 2-core machine.
        """
        x = unit_rows(embeddings)
        if len(rule_labels) != len(x) or len(digests) != len(x):
            raise ValueError("embeddings, rule_labels and digests must have the same length")
        usable = np.flatnonzero(np.linalg.norm(x, axis=1) > 0)
        if len(usable) < min_fit:
            reason = (
                f"{len(usable)} digests with embeddings < min_fit {min_fit}: "
                "rule labels are the modes"
            )
            log.warning("mode codebook: %s", reason)
            return cls.rules(reason, version=version)
        xs = x[usable]
        rng = np.random.default_rng(seed)
        fit_rows = xs
        if len(xs) > max_fit:
            fit_rows = xs[np.sort(rng.choice(len(xs), size=max_fit, replace=False))]
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=threads):
            best = _best_kmeans(fit_rows, k_min, k_max, seed, n_init, silhouette_sample)
        if best is None:
            reason = f"no K in {k_min}..{k_max} fits {len(fit_rows)} digests: rule labels"
            log.warning("mode codebook: %s", reason)
            return cls.rules(reason, version=version)
        centroids, score = best
        # Order modes by size (largest first) over all usable rows, then name them.
        members = np.argmax(xs @ centroids.T, axis=1)
        sizes = np.bincount(members, minlength=len(centroids))
        order = sorted(range(len(centroids)), key=lambda j: (-int(sizes[j]), j))
        centroids = centroids[order]
        remap = np.empty(len(order), dtype=int)
        remap[order] = np.arange(len(order))
        members = remap[members]
        catalog = list(ReasoningMode)
        usable_ids = [int(i) for i in usable]  # Python ints index the label and digest sequences
        label_idx = np.asarray([catalog.index(ReasoningMode(rule_labels[i])) for i in usable_ids])
        votes = np.bincount(
            members * len(catalog) + label_idx, minlength=len(order) * len(catalog)
        ).reshape(len(order), len(catalog))
        terms = _top_terms([digests[i] for i in usable_ids], members, len(order), n_terms)
        modes = []
        for j in range(len(order)):
            # majority rule label; ties go to the earlier label in ReasoningMode order
            label = catalog[int(np.argmax(votes[j]))] if votes[j].any() else catalog[-1]
            name = f"{label.value}: {' '.join(terms[j])}" if terms[j] else label.value
            modes.append(
                ModeInfo(
                    mode_id=f"m{j:02d}",
                    name=name,
                    label=label,
                    terms=terms[j],
                    size=int(votes[j].sum()),
                )
            )
        return cls(
            version=version,
            kind="kmeans",
            modes=tuple(modes),
            centroids=centroids.astype(np.float32),
            min_cosine=min_cosine,
            silhouette=score,
            n_fit=len(fit_rows),
        )

    def assign(
        self,
        embeddings: np.ndarray | None,
        rule_labels: Sequence[ReasoningMode],
    ) -> list[ModeAssignment]:
        """The mode of each digest (docs/methods.md §5.2).

        k-means codebook: the nearest centroid by cosine; ``unassigned`` (``mode_id`` None)
        when the best cosine is below ``min_cosine`` or the digest has no embedding. Rule
        codebook: the rule label. Each assignment also carries the rule label.
        """
        cid = self.codebook_id
        if self.kind == "rules" or self.centroids is None:
            return [
                ModeAssignment(
                    mode_id=ReasoningMode(lab).value,
                    name=ReasoningMode(lab).value,
                    label=ReasoningMode(lab),
                    rule_label=ReasoningMode(lab),
                    codebook=cid,
                )
                for lab in rule_labels
            ]
        if embeddings is None:
            raise ValueError("a k-means codebook needs embeddings to assign modes")
        x = unit_rows(embeddings)
        if len(x) != len(rule_labels):
            raise ValueError("embeddings and rule_labels must have the same length")
        has = np.linalg.norm(x, axis=1) > 0
        sims = x @ self.centroids.T if len(x) else np.zeros((0, self.k))
        best = np.argmax(sims, axis=1) if len(x) else np.zeros(0, dtype=int)
        cos = sims[np.arange(len(x)), best] if len(x) else np.zeros(0)
        out = []
        for i, lab in enumerate(rule_labels):
            rule = ReasoningMode(lab)
            if not has[i]:
                out.append(
                    ModeAssignment(
                        mode_id=None, rule_label=rule, codebook=cid, reason="no embedding"
                    )
                )
                continue
            c = float(cos[i])
            if c < self.min_cosine:
                out.append(
                    ModeAssignment(
                        mode_id=None,
                        rule_label=rule,
                        cosine=c,
                        codebook=cid,
                        reason=f"best cosine {c:.3f} < {self.min_cosine}",
                    )
                )
                continue
            mode = self.modes[int(best[i])]
            out.append(
                ModeAssignment(
                    mode_id=mode.mode_id,
                    name=mode.name,
                    label=mode.label,
                    rule_label=rule,
                    cosine=c,
                    codebook=cid,
                )
            )
        return out

    def to_record(self) -> ModeCodebookRecord:
        """The codebook as a storable record (centroids as lists of floats)."""
        return ModeCodebookRecord(
            codebook_id=self.codebook_id,
            version=self.version,
            kind=self.kind,
            modes=list(self.modes),
            centroids=None if self.centroids is None else self.centroids.tolist(),
            min_cosine=self.min_cosine,
            silhouette=self.silhouette,
            n_fit=self.n_fit,
            fallback_reason=self.fallback_reason,
        )

    @classmethod
    def from_record(cls, record: ModeCodebookRecord) -> ModeCodebook:
        """The frozen codebook back from its stored record."""
        cents = None
        if record.centroids is not None:
            cents = np.asarray(record.centroids, dtype=np.float32)
        return cls(
            version=record.version,
            kind=record.kind,
            modes=tuple(record.modes),
            centroids=cents,
            min_cosine=record.min_cosine,
            silhouette=record.silhouette,
            n_fit=record.n_fit,
            fallback_reason=record.fallback_reason,
        )


def _best_kmeans(
    x: np.ndarray, k_min: int, k_max: int, seed: int, n_init: int, sample: int
) -> tuple[np.ndarray, float] | None:
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    n_distinct = len(np.unique(np.round(x, 5), axis=0))
    best: tuple[np.ndarray, float] | None = None
    for k in range(max(2, k_min), k_max + 1):
        if k >= n_distinct:  # k-means needs k distinct points, silhouette k <= n - 1
            break
        # sklearn is unannotated; pyright takes n_init's type from its default, "auto"
        km = KMeans(n_clusters=k, n_init=n_init, random_state=seed)  # pyright: ignore[reportArgumentType]
        labels = km.fit(x).labels_
        assert labels is not None  # fit sets labels_
        if len(np.unique(labels)) < 2:
            continue
        score = float(
            silhouette_score(
                x, labels, sample_size=min(len(x), sample) if len(x) > sample else None,
                random_state=seed,
            )
        )  # fmt: skip
        if best is None or score > best[1] + 1e-12:
            best = (unit_rows(km.cluster_centers_), score)
    return best


def _top_terms(texts: Sequence[str], members: np.ndarray, k: int, n_terms: int) -> list[list[str]]:
    """Top TF-IDF terms of each mode: the largest entries of its members' mean TF-IDF row."""
    from scipy import sparse
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

    stop = sorted(ENGLISH_STOP_WORDS | {"ans", "ask"})
    vec = TfidfVectorizer(
        stop_words=stop,
        token_pattern=r"(?u)\b[A-Za-z][A-Za-z0-9_]{2,}\b",
        sublinear_tf=True,
        max_features=20_000,
    )
    try:
        tfidf = vec.fit_transform(texts)
    except ValueError:  # empty vocabulary: no words at all
        return [[] for _ in range(k)]
    vocab = vec.get_feature_names_out()
    onehot = sparse.csr_matrix(
        (np.ones(len(members)), (members, np.arange(len(members)))), shape=(k, len(members))
    )
    sizes = np.maximum(np.asarray(onehot.sum(axis=1)).ravel(), 1)
    means = np.asarray((onehot @ tfidf).todense()) / sizes[:, None]
    out = []
    for row in means:
        top = [j for j in np.argsort(-row, kind="stable")[:n_terms] if row[j] > 0]
        out.append([str(vocab[j]) for j in top])
    return out


def needs_refit(assignments: Sequence[ModeAssignment], threshold: float = REFIT_UNASSIGNED) -> bool:
    """Whether more than ``threshold`` of a round is unassigned, so the codebook is refitted
    (``v2``) and everything relabelled (docs/methods.md §5.2). An empty round never refits.

    >>> a = ModeAssignment(mode_id=None, codebook="c")
    >>> b = ModeAssignment(mode_id="m00", codebook="c")
    >>> needs_refit([a] + [b] * 9), needs_refit([a, a] + [b] * 8), needs_refit([])
    (False, True, False)
    """
    if not assignments:
        return False
    unassigned = sum(a.mode_id is None for a in assignments)
    return unassigned / len(assignments) > threshold
