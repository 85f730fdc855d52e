"""What a run's selection saw, for the "nothing to export" message.

An export that finds no selected item says why in one line: how many trajectories the run
(or round) has, how many passed verification, how many items curation considered and took
per kind, and the most frequent reasons it left items out (the ``selections.reason`` of
the rows with ``selected = false``).
"""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas import Record
from trajsynth.store import Store

__all__ = ["SelectionSeen", "newest_run", "selection_seen"]

TOP_REASONS = 3


class SelectionSeen(Record):
    """Counts behind an empty selection; ``line()`` is the message users read."""

    run_id: str
    round: int | None = None
    n_trajectories: int = 0
    n_verified: int = Field(default=0, description="trajectories whose verdict passed")
    considered: dict[str, int] = Field(default_factory=dict, description="per kind")
    selected: dict[str, int] = Field(default_factory=dict, description="per kind")
    reasons: list[tuple[str, int]] = Field(
        default_factory=list, description="most frequent reasons items were left, with counts"
    )

    def line(self) -> str:
        at = "" if self.round is None else f" round {self.round}"
        parts = [
            f"run {self.run_id!r}{at} saw {self.n_trajectories} trajectories, "
            f"{self.n_verified} verified"
        ]
        if not self.considered:
            parts.append("no curation decisions (no round of it was curated)")
        else:
            for kind in ("sft", "rl"):
                n = self.considered.get(kind, 0)
                parts.append(f"{kind}: {self.selected.get(kind, 0)} selected of {n} considered")
        if self.reasons:
            top = ", ".join(f"{reason!r} x{n}" for reason, n in self.reasons)
            parts.append(f"top reasons left out: {top}")
        return "; ".join(parts)


def newest_run(store: Store) -> str | None:
    """The newest run recorded, with trajectories or with curation decisions
    (``runs.created_at``)."""
    rows = store.query(
        "SELECT id FROM (SELECT run_id AS id FROM runs UNION SELECT run_id FROM trajectories "
        "UNION SELECT run_id FROM selections) ids LEFT JOIN runs r ON r.run_id = ids.id "
        "WHERE id IS NOT NULL ORDER BY r.created_at DESC NULLS LAST, id DESC LIMIT 1"
    )
    return str(rows[0]["id"]) if rows else None


def selection_seen(store: Store, run_id: str, round: int | None = None) -> SelectionSeen:
    """Count what ``run_id`` (one ``round``, or all) gave curation and what it kept."""
    where, params = ("", []) if round is None else (" AND t.round = ?", [round])
    traj = store.query(
        "SELECT count(DISTINCT t.trajectory_id) AS n, "
        "count(DISTINCT t.trajectory_id) FILTER (WHERE v.passed) AS verified "
        "FROM trajectories t LEFT JOIN verdicts v ON v.trajectory_id = t.trajectory_id "
        f"WHERE t.run_id = ?{where}",
        [run_id, *params],
    )[0]
    swhere = where.replace("t.round", "round")
    kinds = store.query(
        "SELECT kind, count(*) AS n, count(*) FILTER (WHERE selected) AS picked "
        f"FROM selections WHERE run_id = ?{swhere} GROUP BY kind",
        [run_id, *params],
    )
    reasons = store.query(
        "SELECT coalesce(reason, 'no reason recorded') AS reason, count(*) AS n "
        f"FROM selections WHERE run_id = ?{swhere} AND NOT coalesce(selected, false) "
        "GROUP BY 1 ORDER BY n DESC, reason LIMIT ?",
        [run_id, *params, TOP_REASONS],
    )
    return SelectionSeen(
        run_id=run_id,
        round=round,
        n_trajectories=int(traj["n"] or 0),
        n_verified=int(traj["verified"] or 0),
        considered={str(r["kind"]): int(r["n"]) for r in kinds},
        selected={str(r["kind"]): int(r["picked"]) for r in kinds},
        reasons=[(str(r["reason"]), int(r["n"])) for r in reasons],
    )
