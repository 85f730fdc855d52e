"""Write hand-built rollouts into a store as the rollout flow would, and a fake embedder.

``write_round(store, trajectories, verdicts, round=0)`` stores the trajectories (moved to
``run_id``/``round``), their verdicts, one blueprint per task and the cluster, so that
``synth.curate.curate_round`` and ``synth stats`` read them like real data.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from trajsynth.schemas import Trajectory, Verdict
from trajsynth.store import Store

__all__ = ["RUN", "blueprint_row", "hash_embedder", "write_round"]

RUN = "run-1"


def blueprint_row(
    task_id: str,
    *,
    run_id: str = RUN,
    round: int = 0,
    cluster_id: str = "shop",
    domain: str = "retail",
    mode: str = "direct_execute",
    shape: str = "single",
    difficulty: str = "easy",
) -> dict:
    cell = {
        "cluster_id": cluster_id,
        "path_shape": shape,
        "target_mode": mode,
        "difficulty": difficulty,
    }
    return {
        "blueprint_id": task_id,
        "run_id": run_id,
        "round": round,
        "cluster_id": cluster_id,
        "domain": domain,
        "cell": cell,
        "difficulty": difficulty,
        "path_shape": shape,
        "target_mode": mode,
        "tool_path": [],
        "hidden_info": {},
        "goal": "check my order",
        "persona": "a customer",
        "seed": 0,
    }


def write_round(
    store: Store,
    trajectories: Sequence[Trajectory],
    verdicts: Mapping[str, Verdict],
    *,
    round: int = 0,
    run_id: str = RUN,
    domains: Mapping[str, str] | None = None,
    blueprints: Iterable[dict] | None = None,
) -> None:
    """Store trajectories (with ``run_id``/``round`` set), verdicts, blueprints, clusters."""
    domains = dict(domains or {"shop": "retail"})
    rows, tasks = [], {}
    for t in trajectories:
        t = t.model_copy(update={"run_id": run_id, "round": round})
        row = t.model_dump(mode="json")
        row.update(n_calls=len(t.calls), total_tokens=t.total_tokens)
        rows.append(row)
        tasks.setdefault(t.blueprint_id, t.cluster_id)
    bps = list(blueprints or [])
    have = {b["blueprint_id"] for b in bps}
    for task_id, cluster_id in tasks.items():
        if task_id not in have:
            bps.append(
                blueprint_row(
                    task_id,
                    run_id=run_id,
                    round=round,
                    cluster_id=cluster_id,
                    domain=domains.get(cluster_id, "retail"),
                )
            )
    clusters = [
        {"cluster_id": c, "domain": d, "description": "", "source": "test"}
        for c, d in domains.items()
    ]
    store.insert_bulk(
        {
            "trajectories": rows,
            "verdicts": list(verdicts.values()),
            "blueprints": bps,
            "clusters": clusters,
        }
    )


_WORD = re.compile(r"[a-z_]+")


def hash_embedder(dim: int = 32):
    """A deterministic bag-of-words embedder: equal word sets give equal unit vectors.

    It records every batch it was given in ``embed.calls`` so tests can count texts embedded.
    """

    def embed(texts: Sequence[str]) -> np.ndarray:
        embed.calls.append(list(texts))
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
                out[i, h % dim] += 1.0
            if not out[i].any():
                out[i, 0] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    embed.calls = []
    return embed
