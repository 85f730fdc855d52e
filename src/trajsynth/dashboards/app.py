"""The trajsynth dashboard (a Streamlit script): ``synth dashboard`` runs it on loopback.

Run by hand: ``streamlit run src/trajsynth/dashboards/app.py -- --store runs/trajsynth.duckdb``.
Every figure comes from ``dashboards/queries.py`` (SQL aggregates, read-only, one connection per
query), cached for ``CACHE_TTL_S`` seconds, so the page reads while a run writes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from trajsynth.dashboards import queries
from trajsynth.dashboards.figures import PLOTLY_CONFIG, quotient_figure, tree_figure
from trajsynth.schemas import InputError
from trajsynth.store import Store
from trajsynth.store.summary import RunSummary

CACHE_TTL_S = 5.0
ALL_RUNS = "(all runs)"
ROUND_LABELS = {
    "domain_entropy": "domain entropy",
    "reasoning_mode_entropy": "reasoning-mode entropy",
    "action_complexity": "action complexity",
    "error_branch_ratio": "error branch ratio",
}


def _args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trajsynth-dashboard")
    parser.add_argument("--store", type=Path, default=Path("runs/trajsynth.duckdb"))
    return parser.parse_args(list(argv))


# --- cached reads: keyed by the store path and the arguments ---------------------------------
@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _tables(store_path: str) -> set[str]:
    return queries.available_tables(Store(store_path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _runs(store_path: str) -> list[dict[str, Any]]:
    if "runs" not in _tables(store_path):
        return []
    return queries.runs(Store(store_path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _page(store_path: str, run_id: str | None) -> dict[str, Any]:
    """All of the main page's figures: one read-only connection, one snapshot."""
    return queries.page(Store(store_path), run_id, _tables(store_path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _evals(store_path: str) -> list[dict[str, Any]]:
    return queries.evals(Store(store_path), _tables(store_path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _trees(store_path: str, task_id: str) -> list[dict[str, Any]]:
    return queries.trees_of_task(Store(store_path), task_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _tree(store_path: str, tree_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return queries.task_tree(Store(store_path), tree_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _summary(store_path: str, run_id: str) -> tuple[RunSummary, bool]:
    return queries.run_summary(Store(store_path), run_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _tree_trajectories(store_path: str, tree_id: str) -> list[dict[str, Any]]:
    return queries.trajectories_of_tree(Store(store_path), tree_id)


@st.cache_data(ttl=60.0, show_spinner=False)
def _quotient(store_path: str, task_id: str) -> tuple[Any, dict[str, Any]]:
    from trajsynth.dashboards.views import quotient_graph  # curation code, loaded on demand

    return quotient_graph(Store(store_path), task_id)


# --- formatting ----------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _num(x: float | int | None, digits: int = 3) -> str:
    if x is None:
        return "–"
    return f"{x:,}" if isinstance(x, int) else f"{x:,.{digits}f}"


def _table(rows: list[dict[str, Any]], columns: Mapping[str, Callable[[Any], str]]) -> None:
    frame = pd.DataFrame(
        [{name: fmt(row.get(name)) for name, fmt in columns.items()} for row in rows],
        columns=list(columns),
    )
    st.table(frame, hide_index=True)


def _bar(x: list[Any], y: list[float], text: list[str], title: str, y_title: str) -> go.Figure:
    fig = go.Figure(go.Bar(x=[str(v) for v in x], y=y, text=text, textposition="auto"))
    fig.update_layout(
        title=title, yaxis_title=y_title, height=320, margin={"l": 40, "r": 10, "t": 40, "b": 40}
    )
    return fig


# --- sections --------------------------------------------------------------------------------
def _runs_section(path: str) -> str | None:
    runs = _runs(path)
    st.header("Runs")
    if not runs:
        st.info("No runs in this store yet: start one with `synth run`.")
        return None
    _table(
        runs,
        {
            "run_id": str,
            "state": str,
            "created_at": lambda v: "" if v is None else str(v)[:19],
            "updated_at": lambda v: "" if v is None else str(v)[:19],
            "n_tasks": _num,
            "n_trajectories": _num,
            "n_judged": _num,
            "n_passed": _num,
            "pass_rate": _pct,
        },
    )
    choice = st.sidebar.selectbox("Run", [r["run_id"] for r in runs] + [ALL_RUNS], index=0)
    return None if choice == ALL_RUNS else choice


def _costs(path: str, run_id: str | None) -> tuple[float | None, float | None, float, bool]:
    """Tokens and seconds per passed trajectory and the wall time, from the run summary
    (``store.summary.summarize_run``, what ``synth run`` prints); all runs: their sums."""
    ids = [run_id] if run_id else [r["run_id"] for r in _runs(path)]
    summaries = [_summary(path, rid) for rid in ids]
    passed = sum(s.passed for s, _ in summaries)
    tokens = sum(sum(s.tokens_by_role.values()) for s, _ in summaries)
    wall = sum(s.wall_s for s, _ in summaries)
    final = all(f for _, f in summaries)
    if run_id:  # one run: the summary's own figures, untouched
        only = summaries[0][0]
        return only.tokens_per_verified, only.seconds_per_verified, only.wall_s, final
    return (tokens / passed if passed else None), (wall / passed if passed else None), wall, final


def _overview_section(path: str, run_id: str | None) -> None:
    o = _page(path, run_id)["overview"]
    st.header(f"Run {run_id}" if run_id else "All runs")
    tokens_pv, seconds_pv, wall_s, final = _costs(path, run_id)
    cols = st.columns(4)  # two rows of four: a label never cut short
    cols[0].metric("Trajectories", _num(o.get("n_trajectories")))
    cols[1].metric("Tasks", _num(o.get("n_tasks")))
    cols[2].metric(
        "Pass rate", _pct(o.get("pass_rate")),
        help="passed (clean and correct) over judged (counted by the verifier: infra and "
        "simulator failures left out)",
    )  # fmt: skip
    cols[3].metric("Excluded", _num(o.get("n_excluded")))
    cols = st.columns(4)
    cols[0].metric(
        "Tokens / passed", _num(tokens_pv, 0),
        help="LLM tokens of every role (llm_calls) per passed trajectory, as in the run summary",
    )  # fmt: skip
    cols[1].metric(
        "Seconds / passed", _num(seconds_pv, 2),
        help="the run's wall time per passed trajectory, as in the run summary",
    )  # fmt: skip
    cols[2].metric(
        "Wall time", f"{wall_s:,.1f} s" if wall_s < 1000 else f"{wall_s:,.0f} s",
        help="from the run summary" if final else "the run has not finished: time so far",
    )  # fmt: skip


def _label_positions(rows: Sequence[dict[str, Any]], cols: Sequence[str]) -> dict[str, list[str]]:
    """Per column, where each point's value label goes: above the highest point of its round
    among ``cols``, below the others, so two close values (1.099 and 1.040) do not print
    over each other."""
    positions: dict[str, list[str]] = {c: [] for c in cols}
    for r in rows:
        values = {c: v for c in cols if (v := r.get(c)) is not None}
        top = max(values, key=lambda c: values[c], default=None)
        for c in cols:
            positions[c].append("top center" if c == top else "bottom center")
    return positions


def _rounds_figure(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Entropies and the error ratio in one panel, action complexity (another scale) in
    its own below: on a shared twin axis their lines crossed and their labels overlapped."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4],
                        vertical_spacing=0.08)  # fmt: skip
    rounds = [r["round"] for r in rows]
    upper = [c for c in ROUND_LABELS if c != "action_complexity"]
    where = _label_positions(rows, upper) | {"action_complexity": ["top center"] * len(rows)}
    for col, label in ROUND_LABELS.items():
        values = [r.get(col) for r in rows]
        fig.add_trace(
            go.Scatter(
                x=rounds, y=values, name=label, mode="lines+markers+text",
                text=[_num(v) for v in values], textposition=where[col], cliponaxis=False,
            ),
            row=2 if col == "action_complexity" else 1, col=1,
        )  # fmt: skip
    fig.update_layout(
        height=460, legend={"orientation": "h", "y": -0.18},
        margin={"l": 60, "r": 30, "t": 30, "b": 40},
    )  # fmt: skip
    fig.update_xaxes(dtick=1, row=1, col=1)
    fig.update_xaxes(dtick=1, title_text="round", row=2, col=1)
    # curation computes entropies with scipy's natural log: nats, not bits
    fig.update_yaxes(title_text="entropy (nats), ratio", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="action complexity", rangemode="tozero", row=2, col=1)
    return fig


def _rounds_section(path: str, run_id: str | None) -> None:
    st.header("Diversity per round")
    rows = _page(path, run_id)["round_stats"]
    if not rows:
        st.info(
            "No round statistics yet: curation has not written `round_stats` for this run "
            "(the table is empty or missing)."
        )
        return
    st.plotly_chart(_rounds_figure(rows), key="round_chart")
    _table(
        rows,
        {"round": str, "n_trajectories": _num, "pass_rate": _pct}
        | dict.fromkeys(ROUND_LABELS, _num),
    )


def _distributions_section(path: str, run_id: str | None) -> None:
    st.header("Distributions and pass rates")
    clusters = _page(path, run_id)["by_cluster"]
    modes = _page(path, run_id)["by_mode"]
    left, right = st.columns(2)
    with left:
        left.plotly_chart(
            _bar(
                [r["cluster_id"] for r in clusters],
                [r["n_trajectories"] for r in clusters],
                [_pct(r["pass_rate"]) for r in clusters],
                "Trajectories by cluster (label: pass rate)",
                "trajectories",
            ),
            key="cluster_chart",
        )
    with right:
        right.plotly_chart(
            _bar(
                [r["mode"] for r in modes],
                [r["n_trajectories"] for r in modes],
                [_pct(r["pass_rate"]) for r in modes],
                "Trajectories by reasoning mode (label: pass rate)",
                "trajectories",
            ),
            key="mode_chart",
        )
    # the tables full width: in a half-width column the cluster table's last column was cut
    st.caption("by cluster")
    _table(
        clusters,
        {
            "cluster_id": str, "n_trajectories": _num, "n_judged": _num,
            "n_excluded": _num, "pass_rate": _pct, "mean_tokens": lambda v: _num(v, 0),
        },
    )  # fmt: skip
    st.caption("by reasoning mode")
    _table(
        modes,
        {"mode": str, "n_trajectories": _num, "n_judged": _num, "pass_rate": _pct},
    )


def _cost_section(path: str, run_id: str | None) -> None:
    st.header("Tokens and time")
    rounds = _page(path, run_id)["by_round"]
    roles = _page(path, run_id)["tokens_by_role"]
    left, right = st.columns(2)
    with left:
        st.subheader("By round")
        _table(
            rounds,
            {
                "round": str, "n_trajectories": _num, "pass_rate": _pct,
                "total_tokens": _num, "trajectory_s": lambda v: _num(v, 1),
            },
        )  # fmt: skip
        st.caption(
            "trajectory_s sums each trajectory's own seconds; rollouts overlap, so it is not "
            "the wall time (see the run's Wall time above)."
        )
    with right:
        st.subheader("LLM calls by role")
        if not roles:
            st.info("No LLM calls recorded for this run.")
            return
        fig = go.Figure(
            [
                go.Bar(name="prompt", x=[r["role"] for r in roles],
                       y=[r["prompt_tokens"] for r in roles]),
                go.Bar(name="completion", x=[r["role"] for r in roles],
                       y=[r["completion_tokens"] for r in roles]),
            ]
        )  # fmt: skip
        fig.update_layout(
            barmode="stack", height=280, yaxis_title="tokens",  # the unit: the bars had none
            margin={"l": 50, "r": 10, "t": 20, "b": 40},
        )  # fmt: skip
        st.plotly_chart(fig, key="role_chart")
        _table(
            roles,
            {
                "role": str, "calls": _num, "prompt_tokens": _num,
                "completion_tokens": _num, "latency_s": lambda v: _num(v, 1),
            },
        )  # fmt: skip


def _interval(est: float | None, low: float | None, high: float | None) -> str:
    return "–" if est is None else f"{est:.2f} [{low:.2f}, {high:.2f}]"


def _evals_section(path: str) -> None:
    """Held-out evals of policies (``synth eval``): of every run, not the chosen one."""
    rows = _evals(path)
    st.header("Held-out evals")
    if not rows:
        st.info("No evals yet: `synth eval --policy PATH --split heldout-seeds` stores one.")
        return
    for r in rows:
        r["pass@1 [95% CI]"] = _interval(r["pass1"], r["pass1_low"], r["pass1_high"])
        r["pass@k [95% CI]"] = _interval(r["passk"], r["passk_low"], r["passk_high"])
    _table(
        rows,
        {
            "policy": lambda v: str(v)[-48:], "model_id": lambda v: v or "–", "split": str,
            "k": str, "n_tasks": _num, "n_tries": _num, "n_excluded": _num,
            "pass@1 [95% CI]": str, "pass@k [95% CI]": str,
        },
    )  # fmt: skip
    st.caption(
        "pass@1: the mean of each task's pass rate; pass@k: the unbiased estimator; both "
        "with a bootstrap 95% interval over tasks. Excluded tries (infra, simulator) are in "
        "neither."
    )


def _link(label: str, **params: str) -> str:
    """A markdown link to this page with ``params`` as its query string."""
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
    return f"[{label}](?{query})"


def _md_table(rows: list[dict[str, Any]], columns: Mapping[str, Callable[[Any], str]]) -> None:
    """A markdown table (its cells may hold links, which ``st.table`` cannot)."""
    head = "| " + " | ".join(columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = [
        "| "
        + " | ".join(fmt(row.get(name)).replace("|", "\\|") for name, fmt in columns.items())
        + " |"
        for row in rows
    ]
    st.markdown("\n".join([head, rule, *body]))


def _outcome(row: dict[str, Any]) -> str:
    if row.get("excluded"):
        return "excluded"
    if row.get("passed") is None:
        return "unverified"
    return "pass" if row["passed"] else "fail"


def _task_section(path: str, run_id: str | None) -> None:
    st.header("Tasks")
    tasks = _page(path, run_id)["tasks"]
    if not tasks:
        st.info("No tasks with trajectories in this run.")
        return
    with st.expander(f"All {len(tasks)} tasks (links open a task)", expanded=False):
        _md_table(
            tasks,
            {
                "blueprint_id": lambda v: _link(str(v), task=str(v)),
                "cluster_id": str, "n_trajectories": _num, "n_passed": _num, "pass_rate": _pct,
            },
        )  # fmt: skip
    labels = {
        r["blueprint_id"]: f"{r['blueprint_id']} · {r['cluster_id']} · "
        f"{r['n_trajectories']} rollouts · pass {_pct(r['pass_rate'])}"
        for r in tasks
    }
    asked = st.query_params.get("task")
    index = list(labels).index(asked) if asked in labels else 0
    task_id = st.selectbox("Task", list(labels), index=index, format_func=labels.__getitem__)
    assert task_id is not None  # a selectbox with options and an index always has a choice
    trees = _trees(path, task_id)
    st.subheader("Rollout tree")
    if not trees:
        st.info("No rollout tree stored for this task.")
    else:
        tree_ids = [t["tree_id"] for t in trees]
        asked_tree = st.query_params.get("tree")
        tree_id = tree_ids[0]
        if len(trees) > 1:
            _md_table(
                trees,
                {
                    "tree_id": lambda v: _link(str(v), task=task_id, tree=str(v)),
                    "round": str, "n_nodes": _num, "n_leaves": _num,
                },
            )  # fmt: skip
            start = tree_ids.index(asked_tree) if asked_tree in tree_ids else 0
            chosen = st.selectbox("Tree", tree_ids, index=start)
            assert chosen is not None  # a selectbox with options and an index has a choice
            tree_id = chosen
        nodes, leaves = _tree(path, tree_id)
        st.caption(
            f"tree {tree_id}: {len(nodes)} nodes, {len(leaves)} leaves · drag to pan, wheel or "
            "box to zoom, double-click to reset · hover a node for its id, value and trajectory"
        )
        st.plotly_chart(
            tree_figure(nodes, leaves, title=f"rollout tree {tree_id}"),
            key="tree_chart", width="stretch", config=PLOTLY_CONFIG,
        )  # fmt: skip
        st.markdown("**Trajectories of this tree** (links open the transcript)")
        _md_table(
            [r | {"outcome": _outcome(r)} for r in _tree_trajectories(path, tree_id)],
            {
                "trajectory_id": lambda v: _link(str(v), trajectory=str(v)),
                "outcome": str, "termination": str, "failure_class": lambda v: v or "",
                "total_tokens": _num,
            },
        )  # fmt: skip
    st.subheader("Quotient graph")
    try:
        graph, metrics = _quotient(path, task_id)
    except InputError as exc:
        st.warning(str(exc))
        return
    st.plotly_chart(
        quotient_figure(graph, title=f"quotient graph of {task_id}"),
        key="quotient_chart", width="stretch", config=PLOTLY_CONFIG,
    )  # fmt: skip
    _table(
        [{"metric": k, "value": v} for k, v in metrics.items() if not isinstance(v, dict)],
        {"metric": str, "value": lambda v: _num(v) if isinstance(v, float) else str(v)},
    )


# --- the transcript page (?trajectory=ID) -----------------------------------------------------
def _transcript_page(path: str, trajectory_id: str) -> None:
    from trajsynth.dashboards.views import load_transcript  # curation code, loaded on demand

    st.markdown("[← back to the dashboard](?)")
    try:
        t = load_transcript(Store(path), trajectory_id)
    except InputError as exc:
        st.error(str(exc))
        return
    st.header(f"Trajectory {t.trajectory_id}")
    if t.passed is None:
        verdict = "not verified"
    elif t.excluded:
        verdict = f"excluded ({t.failure_class})"
    else:
        verdict = "PASSED" if t.passed else "FAILED"
    score = "" if t.score is None else f" · score {t.score:.2f}"
    st.markdown(
        f"**Verdict: {verdict}**{score} · cluster `{t.cluster_id}` · termination "
        f"`{t.termination}` · failure class `{t.failure_class or 'none'}`"
        + (f" ({t.failure_detail})" if t.failure_detail else "")
    )
    st.subheader("Turns")
    for e in t.entries:
        if e.kind == "call":
            st.markdown(f"**call** `{e.name}`")
            st.code(e.arguments or "", language="json")
        elif e.kind == "result":
            flag = " (error)" if e.error else ""
            folded = f" · {e.folded_lines} lines folded" if e.folded_lines else ""
            st.markdown(f"**result** of `{e.name or ''}`{flag}{folded}")
            st.code(e.text, language=None)
        else:
            st.markdown(f"**{e.kind}**")
            st.markdown(e.text or "_(empty)_")
    st.subheader("Verdict per constraint")
    if t.constraints:
        _table(
            [c.model_dump() for c in t.constraints],
            {"kind": str, "hard": lambda v: "hard" if v else "soft",
             "passed": lambda v: "pass" if v else "FAIL", "why": str},
        )  # fmt: skip
    else:
        st.info("No constraint results stored for this trajectory.")
    st.subheader("Signals fired")
    st.markdown(", ".join(f"`{s}`" for s in t.signals_fired) or "none")


def main(argv: Sequence[str] = ()) -> None:
    args = _args(argv)
    st.set_page_config(page_title="trajsynth", layout="wide")
    st.title("trajsynth")
    path = str(args.store)
    st.caption(f"store {path} · figures refresh every {CACHE_TTL_S:.0f} s")
    if st.sidebar.button("Refresh now"):
        st.cache_data.clear()
    if not Path(path).exists():
        st.error(f"No store at {path}: run `synth run` first, or pass `--store`.")
        return
    trajectory_id = st.query_params.get("trajectory")
    if trajectory_id:
        _transcript_page(path, trajectory_id)
        return
    run_id = _runs_section(path)
    if run_id is None and not _runs(path):
        return
    _overview_section(path, run_id)
    _rounds_section(path, run_id)
    _distributions_section(path, run_id)
    _cost_section(path, run_id)
    _evals_section(path)
    _task_section(path, run_id)


if __name__ == "__main__":
    main(sys.argv[1:])
