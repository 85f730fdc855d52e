"""How often "passed" is right: the verifier against hand labels (docs/audit-rubric.md).

Every item of the audit set (``tests/fixtures/audit/``: stored trajectories with their
blueprints and end states, each labelled accept/reject by the rubric) is judged again with the
product's own verifier, ``curation.verify.verify`` on the stored end state (what the pipeline's
judge calls to decide ``passed``), and put through the export's row filter: SFT eligibility
(``curation.select.sft_eligibility``, on signals computed as curation computes them) and the
export's message and tool conversion (``export.rows``). Near-duplicate removal and the per-task
cap of SFT selection are left out: they choose among good rows, they do not judge one.

Printed per cluster and overall: items labelled, accepted by the labels, passed, true passes,
precision and recall of ``passed``, rows exported and their precision, each beside its target
(precision of passed >= 95%, of exported rows >= 98%, recall >= 80%), and the control: the
precision of a verifier that passes everything (the share of accepted items). A figure with
nothing to measure (no item passed) is "n/a" and misses its target.

    PYTHONPATH=src python bench/precision.py            # the table
    PYTHONPATH=src python bench/precision.py --show ID  # one item as a reviewer reads it
    PYTHONPATH=src python bench/precision.py --wrong    # the items where verifier and label differ
    PYTHONPATH=src python bench/precision.py --agreement LABELS  # a second reviewer's labels
    PYTHONPATH=src python bench/precision.py --render ITEMS  # a new round, for labelling
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from trajsynth.curation.select import sft_eligibility
from trajsynth.curation.signals import compute_signals
from trajsynth.curation.verify import verify
from trajsynth.export.report import ExportError
from trajsynth.export.rows import _check_tools, openai_messages
from trajsynth.planning.admission import Refusal, review_blueprint
from trajsynth.schemas import (
    Blueprint,
    Constraint,
    EnvState,
    FailureClass,
    Trajectory,
    TrajectoryTopology,
    Verdict,
)

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "audit"
TARGETS = {"precision": 0.95, "exported_precision": 0.98, "recall": 0.80}
_CONSTRAINTS = TypeAdapter(list[Constraint])
_EXCLUDED = (FailureClass.INFRA, FailureClass.SIMULATOR)


@dataclass(frozen=True)
class Scored:
    """One audit item: its label and what the product decides of it."""

    item_id: str
    cluster: str
    origin: str
    accept: bool
    reason: str
    passed: bool
    exported: bool
    why_not_exported: str | None
    refused: str | None = None  # why today's planner would not plan the item's blueprint
    round: int = 1  # the audit round the item was drawn and labelled in


def load_items(folder: Path = FIXTURE) -> list[dict[str, Any]]:
    """The items with their blueprints, tools, initial rows and labels joined back
    (``labels.jsonl``: id, accept, reason); every item must have exactly one label.

    ``initial_rows.jsonl`` (optional): per blueprint, the initial state's rows its gold writes
    name, read from the environment at the blueprint's seed (``bench/audit_set.py``)."""
    blueprints = {b["blueprint_id"]: b for b in _jsonl(folder / "blueprints.jsonl")}
    tools = {t["id"]: t["tools"] for t in _jsonl(folder / "tools.jsonl")}
    initial = folder / "initial_rows.jsonl"
    rows = {r["blueprint_id"]: r["rows"] for r in _jsonl(initial)} if initial.exists() else {}
    items = []
    for item in _jsonl(folder / "items.jsonl"):
        trajectory = {**item["trajectory"], "tools": tools[item["trajectory"]["tools"]]}
        bp_id = trajectory["blueprint_id"]
        blueprint = blueprints[bp_id]
        items.append(
            {
                **item,
                "trajectory": trajectory,
                "blueprint": blueprint,
                "initial_rows": rows.get(bp_id, []),
            }
        )
    labels: dict[str, dict[str, Any]] = {}
    for label in _jsonl(folder / "labels.jsonl"):
        if label:
            if label["id"] in labels:
                raise ValueError(f"item {label['id']} is labelled twice")
            labels[label["id"]] = label
    missing = [i["id"] for i in items if i["id"] not in labels]
    if missing:
        raise ValueError(f"{len(missing)} item(s) without a label, first {missing[0]}")
    extra = set(labels) - {i["id"] for i in items}
    if extra:
        raise ValueError(f"{len(extra)} label(s) without an item, first {sorted(extra)[0]}")
    return [{**i, "label": labels[i["id"]]} for i in items]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def judge_item(
    item: Mapping[str, Any], constraints: Sequence[Constraint] | None = None
) -> tuple[Trajectory, Verdict]:
    """The verifier's verdict on one item, from its stored end state, as the pipeline judges
    (against the blueprint's stored constraints unless ``constraints`` are given)."""
    trajectory = Trajectory.model_validate(item["trajectory"])
    if constraints is None:
        constraints = _CONSTRAINTS.validate_python(item["blueprint"]["constraints"])
    state = EnvState.model_validate(item["final_state"])
    return trajectory, verify(trajectory, list(constraints), state)


def admitted_today(items: Sequence[Mapping[str, Any]]) -> dict[str, Blueprint | str]:
    """Each blueprint of the items as today's planner admits it (``planning.admission``): with
    the constraints it adds, or the reason it refuses. The planner's self-check (its gold
    demonstration must pass the verifier) is read from the blueprint's gold item where the
    set has one."""
    out: dict[str, Blueprint | str] = {}
    for item in items:
        bp_id = item["blueprint"]["blueprint_id"]
        if bp_id in out:
            continue
        blueprint = Blueprint.model_validate(item["blueprint"])
        reviewed = review_blueprint(
            blueprint, set(item.get("write_tools") or ()), item.get("initial_rows") or ()
        )
        out[bp_id] = reviewed.reason if isinstance(reviewed, Refusal) else reviewed
    for item in items:
        reviewed = out[item["blueprint"]["blueprint_id"]]
        if item["origin"] == "gold" and isinstance(reviewed, Blueprint):
            _, verdict = judge_item(item, reviewed.constraints)
            if not verdict.passed:
                out[reviewed.blueprint_id] = "self_check"
    return out


def export_refusal(
    trajectory: Trajectory, verdict: Verdict, write_tools: Iterable[str] | None
) -> str | None:
    """Why the export would not write this trajectory as an SFT row, or None if it would."""
    included = trajectory.failure_class not in _EXCLUDED and not verdict.excluded
    topo = TrajectoryTopology(
        trajectory_id=trajectory.trajectory_id,
        task_id=trajectory.blueprint_id,
        included=included,
        skip_reason=None if included else "infra or simulator",
    )
    signals = compute_signals(
        trajectory,
        verdict=verdict,
        write_tools=set(write_tools) if write_tools is not None else None,
    )
    reason = sft_eligibility(topo, verdict, signals, None)
    if reason is not None:
        return reason
    item = f"trajectory {trajectory.trajectory_id}"
    try:
        openai_messages([m.model_dump(mode="json") for m in trajectory.messages], item)
        _check_tools(trajectory.tools, item)
    except ExportError as exc:
        return f"export error: {exc}"
    return None


def score_items(items: Sequence[Mapping[str, Any]], *, today: bool = True) -> list[Scored]:
    """Each item judged as the product judges it: with ``today``, only when today's planner
    would plan its blueprint, against the constraints it would carry; without, against the
    blueprint as stored (the verifier alone, whatever planned the task)."""
    admitted = admitted_today(items) if today else {}
    out = []
    for item in items:
        reviewed = admitted.get(item["blueprint"]["blueprint_id"])
        refused = reviewed if isinstance(reviewed, str) else None
        constraints = reviewed.constraints if isinstance(reviewed, Blueprint) else None
        trajectory, verdict = judge_item(item, constraints)
        passed = refused is None and verdict.passed and not verdict.excluded
        refusal = export_refusal(trajectory, verdict, item.get("write_tools")) if passed else None
        out.append(
            Scored(
                item_id=item["id"],
                cluster=item["cluster"],
                origin=item["origin"],
                accept=bool(item["label"]["accept"]),
                reason=item["label"]["reason"],
                passed=passed,
                exported=passed and refusal is None,
                why_not_exported=refusal if passed else "verdict failed",
                refused=refused,
                round=int(item.get("round", 1)),
            )
        )
    return out


@dataclass
class Figures:
    """The audit figures of one group of items."""

    labelled: int = 0
    accepted: int = 0
    passed: int = 0
    true_passes: int = 0
    exported: int = 0
    true_exported: int = 0
    origins: dict[str, int] = field(default_factory=dict)

    @property
    def precision(self) -> float | None:
        return self.true_passes / self.passed if self.passed else None

    @property
    def recall(self) -> float | None:
        return self.true_passes / self.accepted if self.accepted else None

    @property
    def exported_precision(self) -> float | None:
        return self.true_exported / self.exported if self.exported else None

    @property
    def base_rate(self) -> float | None:
        """The precision of a verifier that passes everything: the control."""
        return self.accepted / self.labelled if self.labelled else None


def figures(scored: Iterable[Scored]) -> dict[str, Figures]:
    """Figures per cluster and under ``"overall"``."""
    groups: dict[str, Figures] = defaultdict(Figures)
    for s in scored:
        for key in (s.cluster, "overall"):
            f = groups[key]
            f.labelled += 1
            f.accepted += s.accept
            f.passed += s.passed
            f.true_passes += s.passed and s.accept
            f.exported += s.exported
            f.true_exported += s.exported and s.accept
            f.origins[s.origin.split(":")[0]] = f.origins.get(s.origin.split(":")[0], 0) + 1
    return dict(groups)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _mark(value: float | None, target: float) -> str:
    ok = value is not None and value >= target
    return f"{_pct(value)} [>={target:.0%} {'ok' if ok else 'MISS'}]"


def table(groups: Mapping[str, Figures]) -> str:
    head = (
        "cluster", "labelled", "accepted", "passed", "true passes", "precision", "recall",
        "exported", "exported precision", "pass-all control",
    )  # fmt: skip
    lines = [" | ".join(head)]
    order = sorted(k for k in groups if k != "overall") + ["overall"]
    for key in order:
        f = groups[key]
        lines.append(
            " | ".join(
                str(x)
                for x in (
                    key, f.labelled, f.accepted, f.passed, f.true_passes,
                    _mark(f.precision, TARGETS["precision"]),
                    _mark(f.recall, TARGETS["recall"]), f.exported,
                    _mark(f.exported_precision, TARGETS["exported_precision"]),
                    _pct(f.base_rate),
                )
            )
        )  # fmt: skip
    origins = groups["overall"].origins if "overall" in groups else {}
    lines.append("origins: " + ", ".join(f"{k} {v}" for k, v in sorted(origins.items())))
    return "\n".join(lines)


def agreement(items: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> str:
    """How often a second reviewer's labels agree with the fixture's, and Cohen's kappa (the
    agreement beyond what two reviewers accepting at their own rates would reach by chance),
    with every disagreement listed."""
    first = {i["id"]: i["label"] for i in items}
    pairs = [(first[s["id"]], s) for s in second if s["id"] in first]
    n = len(pairs)
    if not n:
        return "no labelled item in common"
    agree = sum(bool(a["accept"]) == bool(b["accept"]) for a, b in pairs)
    p_first = sum(bool(a["accept"]) for a, _ in pairs) / n
    p_second = sum(bool(b["accept"]) for _, b in pairs) / n
    chance = p_first * p_second + (1 - p_first) * (1 - p_second)
    kappa = (agree / n - chance) / (1 - chance) if chance < 1 else 1.0
    lines = [
        f"items {n}: agree {agree} ({agree / n:.0%}), accepted by the fixture {p_first:.0%}, "
        f"by the second reviewer {p_second:.0%}, Cohen's kappa {kappa:.2f}"
    ]
    for a, b in pairs:
        if bool(a["accept"]) != bool(b["accept"]):
            lines.append(
                f"{b['id']}: fixture {'accept' if a['accept'] else 'reject'} ({a['reason']}) | "
                f"second {'accept' if b['accept'] else 'reject'} ({b['reason']})"
            )
    return "\n".join(lines)


def render(item: Mapping[str, Any], width: int = 260) -> str:
    """One item as a reviewer reads it: the goal, each message and call, the end state
    against the gold run's (no verdict, no signals)."""
    t, bp = item["trajectory"], item["blueprint"]
    out = [
        f"== {item['id']} [{item['cluster']}] origin={item['origin']} {item.get('note', '')}",
        f"goal: {bp['goal']}",
        f"hidden: {json.dumps(bp.get('hidden_info') or {})}",
        "answer values asked: "
        + json.dumps(
            [c.get("values") for c in bp["constraints"] if c["kind"] == "answer_contains"]
        ),
        "gold calls: "
        + "; ".join(f"{c['tool']}({json.dumps(c['arguments'])})" for c in bp["gold_run"]["calls"])[
            :width
        ],
        f"offered: {', '.join(sorted(x['function']['name'] for x in t['tools']))}"[:width],
    ]
    for row in (item.get("initial_rows") or [])[:6]:
        out.append(f"initial row: {json.dumps(row, sort_keys=True)}"[:width])
    for m in t["messages"][1:] if t["messages"][0]["role"] == "system" else t["messages"]:
        role = m["role"]
        text = (m.get("content") or "").replace("\n", " ")
        if m.get("tool_calls"):
            calls = "; ".join(
                f"{c['id']}:{c['function']['name']}({c['function']['arguments']})"
                for c in m["tool_calls"]
            )
            out.append(f"  {role}: {text[:80]} CALLS {calls}"[:width])
        else:
            out.append(f"  {role}: {text}"[:width])
    out.append(f"  end state vs gold: {json.dumps(item['vs_gold'])[:width]}")
    out.append(f"  checks: {item['final_state'].get('checks')}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    parser.add_argument("--show", default=None, help="render one item (id prefix)")
    parser.add_argument("--wrong", action="store_true", help="list verifier/label disagreements")
    parser.add_argument(
        "--agreement",
        type=Path,
        default=None,
        help="a second reviewer's labels (jsonl: id, accept, reason) of some items: agreement "
        "with the fixture's labels and Cohen's kappa",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="an item file as bench/audit_set.py writes it (a new round, not yet labelled): "
        "every item rendered for labelling, grouped by blueprint, with no verdict",
    )
    args = parser.parse_args()
    if args.render is not None:
        fresh = sorted(
            _jsonl(args.render),
            key=lambda i: (i["cluster"], i["trajectory"]["blueprint_id"], i["origin"] != "gold"),
        )
        print("\n\n".join(render(i) for i in fresh))
        return
    items = load_items(args.fixture)
    if args.agreement is not None:
        print(agreement(items, _jsonl(args.agreement)))
        return
    if args.show is not None:
        for item in items:
            if item["id"].startswith(args.show):
                print(render(item))
        return
    scored = score_items(items)
    print(
        f"audit set {args.fixture}: `passed` and exported SFT rows against labels, "
        "blueprints as today's planner admits them"
    )
    print(table(figures(scored)))
    refused = [s for s in scored if s.refused]
    if refused:
        print("\nrefused by today's planner: reason | blueprints | items | accepted by the labels")
        for reason in sorted({s.refused for s in refused if s.refused}):
            group = [s for s in refused if s.refused == reason]
            n_bp = len({i["blueprint"]["blueprint_id"] for i in items if i["id"] in
                        {s.item_id for s in group}})  # fmt: skip
            print(f"{reason} | {n_bp} | {len(group)} | {sum(s.accept for s in group)}")
    print("\nby round: round | labelled | accepted | passed | true passes | precision | recall")
    for number in sorted({s.round for s in scored}):
        f = figures(s for s in scored if s.round == number)["overall"]
        print(
            f"{number} | {f.labelled} | {f.accepted} | {f.passed} | {f.true_passes} | "
            f"{_pct(f.precision)} | {_pct(f.recall)}"
        )
    stored = figures(score_items(items, today=False))["overall"]
    print(
        f"\ncontrol, every blueprint as stored (the verifier alone): passed {stored.passed}, "
        f"true {stored.true_passes}, precision {_pct(stored.precision)}, "
        f"recall {_pct(stored.recall)}"
    )
    print("\nby origin: origin | labelled | accepted | passed | false passes | false fails")
    for origin in sorted({s.origin for s in scored}):
        group = [s for s in scored if s.origin == origin]
        print(
            " | ".join(
                str(x)
                for x in (
                    origin,
                    len(group),
                    sum(s.accept for s in group),
                    sum(s.passed for s in group),
                    sum(s.passed and not s.accept for s in group),
                    sum(s.accept and not s.passed for s in group),
                )
            )
        )
    if args.wrong:
        for s in scored:
            if s.passed != s.accept:
                kind = "false pass" if s.passed else "false fail"
                why = f" (refused: {s.refused})" if s.refused else ""
                print(f"{kind}{why}: {s.item_id} [{s.cluster} {s.origin}] label: {s.reason}")


if __name__ == "__main__":
    main()
