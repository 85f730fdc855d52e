"""The verifier against the hand-labelled audit set (docs/audit-rubric.md, bench/precision.py).

The figures below are floors: what this branch's planner admission (``planning.admission``,
applied to the set's stored blueprints) and verifier achieve on the fixture, so a change that
makes "passed" less right fails here. ``STORED_FLOOR`` holds the verifier alone, every
blueprint as it was planned: the control that shows what the admission checks add.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "audit"

# overall and per cluster: (precision of passed, recall of passed, precision of exported rows),
# measured on this fixture with this branch's planner admission and verifier
FLOORS: dict[str, tuple[float | None, float | None, float | None]] = {
    "calendar": (1.0, 1.0, 1.0),  # passed 17/100, true 17, exported 17, accepted 17
    "code": (1.0, 1.0, 1.0),  # passed 18/80, true 18, exported 18, accepted 18
    "memory": (1.0, 1.0, 1.0),  # passed 14/72, true 14, exported 14, accepted 14
    "shop": (1.0, 1.0, 1.0),  # passed 21/72, true 21, exported 21, accepted 21
    "sqlite": (1.0, 1.0, 1.0),  # passed 13/74, true 13, exported 13, accepted 13
    "time": (1.0, 1.0, 1.0),  # passed 15/76, true 15, exported 15, accepted 15
    "travel": (1.0, 1.0, 1.0),  # passed 27/116, true 27, exported 27, accepted 27
    "overall": (1.0, 1.0, 1.0),  # passed 125/590, true 125, exported 125, accepted 125
}
# the verifier alone, blueprints as stored: passed 165, true 125 (two round-1 reschedules
# were relabelled reject once the initial rows showed they move nothing)
STORED_FLOOR = (0.757, 1.0)
# round 4 was drawn and labelled after every check above except the list-of-names
# ``empty_read``: held out it scored 18 of 21 (86%). Round 5 was drawn after that fix: held
# out 21 of 21. The floors are what each scores now.
ROUND_FLOORS = {4: (1.0, 1.0), 5: (1.0, 1.0)}
# what today's planner refuses: a reason ``plan_blueprint`` records (docs/planning.md), or
# ``first_of_many``, an answer the planner no longer asks for
PLANNER_REASONS = {
    "two_users", "unrelated_reads", "noop_write", "empty_read", "mode_unrealised", "self_check",
    "first_of_many", "copy_over", "words_check",
}  # fmt: skip


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_precision", ROOT / "bench" / "precision.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_precision"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def items(bench):
    return bench.load_items(FIXTURE)


@pytest.fixture(scope="module")
def scored(bench, items):
    return bench.score_items(items)


@pytest.fixture(scope="module")
def groups(bench, scored):
    return bench.figures(scored)


def test_the_fixture_is_an_audit_set(items):
    """At least 200 labelled items from the four bundled clusters and three outside servers,
    both labels present, each with its origin and a reason; small enough to keep in git."""
    assert len(items) >= 200
    clusters = {i["cluster"] for i in items}
    assert {"shop", "travel", "calendar", "code"} <= clusters
    assert len(clusters - {"shop", "travel", "calendar", "code"}) >= 3
    assert {i["label"]["accept"] for i in items} == {True, False}
    assert all(i["label"]["reason"].strip() for i in items)
    origins = {i["origin"].split(":")[0] for i in items}
    assert {"rollout", "gold", "variant"} <= origins
    size = sum(p.stat().st_size for p in FIXTURE.iterdir())
    assert size < 4_000_000, f"fixture is {size} bytes"  # 5 rounds, 590 items: 3.3 MB


def test_labels_join_items_one_to_one(bench, tmp_path):
    """A missing or doubled label is refused: no item is scored unlabelled."""
    for name in ("items.jsonl", "blueprints.jsonl", "tools.jsonl"):
        (tmp_path / name).write_text((FIXTURE / name).read_text())
    labels = (FIXTURE / "labels.jsonl").read_text().splitlines()
    (tmp_path / "labels.jsonl").write_text("\n".join(labels[1:]))
    with pytest.raises(ValueError, match="without a label"):
        bench.load_items(tmp_path)
    (tmp_path / "labels.jsonl").write_text("\n".join([labels[0], *labels]))
    with pytest.raises(ValueError, match="labelled twice"):
        bench.load_items(tmp_path)


def test_the_control_could_fail(groups):
    """A verifier that passes everything scores the base rate, far below the precision
    target: the set holds enough bad items that precision measures something."""
    overall = groups["overall"]
    assert overall.base_rate is not None and overall.base_rate < 0.95
    assert overall.accepted >= 20 and overall.labelled - overall.accepted >= 20


def test_pass_all_control_scores_the_base_rate(bench, scored):
    """The figures come from the scored decisions: passing every item gives precision equal
    to the share of accepted items, and recall 1."""
    everything = [dataclasses.replace(s, passed=True, exported=True) for s in scored]
    overall = bench.figures(everything)["overall"]
    assert overall.recall == 1.0
    assert overall.precision == pytest.approx(overall.base_rate)


@pytest.mark.parametrize("key", sorted(FLOORS) or ["overall"])
def test_figures_hold_their_floor(groups, key):
    """Precision and recall of `passed`, and precision of exported rows, do not fall below
    what this branch's verifier achieves (None: nothing passed, so nothing to hold)."""
    if not FLOORS:
        pytest.fail("no floors recorded")
    got = groups[key]
    for name, floor in zip(("precision", "recall", "exported_precision"), FLOORS[key], strict=True):
        value = getattr(got, name)
        if floor is None:
            continue
        assert value is not None and value >= floor - 1e-9, (
            f"{key}: {name} {value} fell below its floor {floor}"
        )


def test_the_verifier_alone_holds_its_floor(bench, items):
    """Every blueprint as stored, no admission: the control the table prints last."""
    stored = bench.figures(bench.score_items(items, today=False))["overall"]
    precision, recall = STORED_FLOOR
    assert stored.precision is not None and stored.precision >= precision - 1e-9
    assert stored.recall is not None and stored.recall >= recall - 1e-9


def test_refusals_are_the_planner_s_own_and_refuse_no_accepted_item(scored):
    """An item counts as refused only for a reason the planner records, and the admission
    checks refuse no item the labels accept (they would otherwise buy precision with recall)."""
    refused = [s for s in scored if s.refused]
    assert refused and {s.refused for s in refused} <= PLANNER_REASONS
    assert not [s.item_id for s in refused if s.accept]
    assert all(not s.passed for s in refused)


def test_each_round_is_labelled_and_scored(scored):
    """Rounds drawn after the checks they measure were written: each has accepted and
    rejected items, and its own figures."""
    rounds = {s.round for s in scored}
    assert {1, 2, 3, 4, 5} <= rounds
    for number in rounds:
        group = [s for s in scored if s.round == number]
        assert {s.accept for s in group} == {True, False}


@pytest.mark.parametrize("number", sorted(ROUND_FLOORS))
def test_each_round_holds_its_floor(bench, scored, number):
    """Precision and recall of `passed` on one round's items alone, so a later round's fix
    that costs an earlier round shows here."""
    got = bench.figures(s for s in scored if s.round == number)["overall"]
    precision, recall = ROUND_FLOORS[number]
    assert got.precision is not None and got.precision >= precision - 1e-9
    assert got.recall is not None and got.recall >= recall - 1e-9


def test_initial_rows_replay_what_the_review_needs(items):
    """Every writing bundled blueprint carries the initial rows its gold writes name (read at
    its seed, hash-checked); the round-2 reschedule's row shows the time it already had."""
    bundled = {"calendar", "shop", "travel", "code"}
    writing = {
        i["blueprint"]["blueprint_id"]
        for i in items
        if i["blueprint"]["n_writes"] and i["cluster"] in bundled
    }
    with_rows = {i["blueprint"]["blueprint_id"] for i in items if i["initial_rows"]}
    assert writing <= with_rows
    row = next(
        r for i in items if i["blueprint"]["blueprint_id"].startswith("bp_a3baceb4bb1")
        for r in i["initial_rows"] if r.get("event_id") == "EV1002" and "start_time" in r
    )  # fmt: skip
    assert (row["date"], row["start_time"]) == ("2025-06-02", "10:00")


def test_rescoring_is_a_function_of_the_fixture(bench, items, scored):
    """Scoring reads nothing but the fixture (no store, no server): twice gives the same
    decisions, and every item's verdict is for its own trajectory."""
    assert bench.score_items(items) == scored
    for item in items[:10]:
        trajectory, verdict = bench.judge_item(item)
        assert verdict.trajectory_id == trajectory.trajectory_id == item["id"]


def test_agreement_with_a_second_reviewer(bench, items):
    """The same labels agree fully (kappa 1); one flipped label shows as a disagreement and
    lowers kappa; labels of items outside the set are ignored."""
    sample = [{**i["label"], "id": i["id"]} for i in items[:40]]
    same = bench.agreement(items, sample)
    assert "agree 40 (100%)" in same and "kappa 1.00" in same
    flipped = [{**sample[0], "accept": not sample[0]["accept"]}, *sample[1:]]
    report = bench.agreement(items, [*flipped, {"id": "traj_nowhere", "accept": True}])
    assert "items 40: agree 39" in report and sample[0]["id"] in report
    assert "kappa 1.00" not in report


@pytest.mark.parametrize(
    ("name", "n"), [("second_reviewer_round3.jsonl", 56), ("second_reviewer_rounds45.jsonl", 112)]
)
def test_a_second_reviewer_agrees_with_the_labels(bench, items, name, n):
    """Rounds 3, 4 and 5 labelled again by a second reviewer who saw neither the labels nor
    any verdict (docs/audit-rubric.md): the labels are a measurement only while two reviewers
    agree."""
    second = bench._jsonl(FIXTURE / name)
    assert len(second) == n
    report = bench.agreement(items, second).splitlines()[0]
    assert f"items {n}:" in report  # every label is of an item in the set
    kappa = float(report.rsplit("kappa ", 1)[1])
    assert kappa >= 0.8, report


def test_the_rendering_for_labelling_shows_the_initial_rows_and_no_verdict(bench, items):
    """What a reviewer labels from: the goal, the calls, the initial rows the writes name
    (a "move" to the time the event already has shows), never the verdict or the label."""
    item = next(i for i in items if i["id"] == "traj_514ece193624d6d9c463c99f")
    text = bench.render(item)
    assert item["blueprint"]["goal"] in text
    assert "initial row:" in text and '"start_time": "10:00"' in text
    assert "passed" not in text.casefold() and item["label"]["reason"] not in text
