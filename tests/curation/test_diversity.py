"""Diversity (docs/methods.md §5): digests, rule labels, the mode codebook, CAC, near-duplicates,
the round report, and the embedding helpers' handling of bad text."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes.trajectories import call, make_trajectory

from trajsynth.curation.diversity import (
    DIGEST_TOKENS,
    ModeCodebook,
    action_key,
    cac,
    cac_tertiles,
    difficulty_of,
    digest,
    digest_for_embedding,
    diversity_fields,
    diversity_report,
    embed_digests,
    embed_texts,
    near_duplicates,
    needs_refit,
    rule_mode,
    sanitize_text,
    text_key,
)
from trajsynth.schemas import (
    CACWeights,
    Difficulty,
    LiteralArg,
    Message,
    MessageRole,
    ObsClass,
    PlannedCall,
    ReasoningMode,
    RefArg,
    Scores,
    SlotArg,
    Termination,
    ToolAccess,
    ToolCallRecord,
    Trajectory,
)

TOL = 1e-4
ACCESS = {
    "get_order": ToolAccess.READ,
    "get_item": ToolAccess.READ,
    "list_items": ToolAccess.READ,
    "cancel_order": ToolAccess.WRITE,
    "add_item": ToolAccess.WRITE,
}


def _record(tool: str, args: dict | None, obs: str, cls: ObsClass = ObsClass.OK, turn: int = 0):
    return ToolCallRecord(
        call_id=f"c-{tool}-{turn}",
        tool=tool,
        raw_arguments="{}" if args is None else str(args),
        arguments=args,
        observation=obs,
        obs_class=cls,
        turn=turn,
    )


def _bare(calls: list[ToolCallRecord], cluster: str = "travel-01", tid: str = "t") -> Trajectory:
    """A trajectory holding only call records (the CAC and duplicate tests need nothing else)."""
    return Trajectory(
        trajectory_id=tid,
        run_id="run",
        blueprint_id="bp",
        tree_id="tree",
        leaf_node_id="leaf",
        cluster_id=cluster,
        messages=[Message(role=MessageRole.USER, content="hi")],
        calls=calls,
        termination=Termination.USER_STOP,
    )


# --- CAC (§5.3) ------------------------------------------------------------------------------


def _flight_example() -> Trajectory:
    search = _record(
        "search_flights",
        {"origin": "SFO", "dest": "JFK", "date": "2025-03-14"},
        '{"flights": [{"id": "UA837", "depart": "08:05", "price": 312.5}]}',
        turn=0,
    )
    rules = _record(
        "get_fare_rules",
        {"flight_id": "UA837"},
        '{"fare_classes": [{"fare_class": "Y-FLEX", "refundable": true},'
        ' {"fare_class": "Y-BASIC", "refundable": false}]}',
        turn=1,
    )
    book = _record(
        "book_flight",
        {
            "flight_id": "UA837",
            "fare_class": "Y-FLEX",
            "passenger": {"name": "Mia Kim", "dob": "1990-04-02"},
        },
        '{"booking_id": "B-1", "status": "confirmed"}',
        turn=2,
    )
    return _bare([search, rules, book])


def test_cac_worked_example_5_3() -> None:
    # the fare class is chosen from the refund rules: book_flight is a branch node
    out = cac(_flight_example(), branch_tools={"book_flight"})
    s1, s2, s3 = out.steps
    assert (s1.leaves, s1.depth, s1.a, s1.g, s1.u, s1.b, s1.n) == (3, 1, 2.0, 0, 0, 0, 1)
    assert s1.c == pytest.approx(2.5, abs=TOL)
    assert (s2.a, s2.g, s2.u, s2.b, s2.n, s2.sources) == (1.0, 1, 1, 0, 1, [0])
    assert s2.c == pytest.approx(3.5, abs=TOL)
    assert (s3.leaves, s3.depth) == (4, 2)
    assert s3.a == pytest.approx(math.log2(5) + 1, abs=TOL)
    assert (s3.g, s3.u, s3.b, s3.n, s3.sources) == (2, 2, 1, 1, [0, 1])
    assert s3.c == pytest.approx(7.16096, abs=TOL)
    assert out.cac == pytest.approx(13.16096, abs=TOL)
    assert (out.n_steps, out.n_distinct_tools, out.max_dep_depth) == (3, 3, 2)
    assert (out.n_bound_args, out.n_conditional) == (3, 1)


def test_cac_and_mode_fill_the_scores_row() -> None:
    book = ModeCodebook.rules("embeddings off")
    (mode,) = book.assign(None, [ReasoningMode.EXPLORE_THEN_COMMIT])
    row = Scores(trajectory_id="t", **diversity_fields(cac(_flight_example()), mode))
    assert (row.mode, row.mode_codebook) == ("explore_then_commit", book.codebook_id)
    assert row.action_complexity == pytest.approx(13.16096 - 1.0, abs=TOL)  # no branch node given
    assert (row.n_steps, row.max_dep_depth, row.n_bound_args) == (3, 2, 3)


def test_cac_weights_scale_the_parts() -> None:
    out = cac(_flight_example(), CACWeights(w_a=0, w_g=0, w_u=0, w_b=0, w_n=0))
    assert out.cac == pytest.approx(3.0)


def test_cac_no_tool_calls_is_zero() -> None:
    out = cac(make_trajectory("q", ["Which order do you mean?"]))
    assert (out.cac, out.n_steps, out.max_dep_depth, out.steps) == (0.0, 0, 0, [])


def test_cac_conditional_after_error_and_repeat_is_not() -> None:
    t = _bare(
        [
            _record("get_order", {"order_id": "#W9"}, "Error: no such order", ObsClass.ERROR),
            _record("get_order", {"order_id": "#W9"}, "Error: no such order", ObsClass.ERROR),
            _record("get_order", {"order_id": "#W1"}, '{"status": "delivered"}'),
        ]
    )
    steps = cac(t).steps
    assert [s.b for s in steps] == [0, 0, 1]  # the identical retry is not conditional
    assert [s.n for s in steps] == [1, 0, 0]
    # error observations never feed data flow: "#W9" came from the user, not a result
    assert [s.g for s in steps] == [0, 0, 0]


def test_cac_small_values_match_only_in_identifier_args() -> None:
    t = _bare(
        [
            _record("find_user", {"email": "mia@example.com"}, '{"user_id": 7, "qty": 2}'),
            _record("list_orders", {"user_id": 7, "qty": 2}, "[]", ObsClass.EMPTY),
        ]
    )
    step = cac(t).steps[1]
    assert (step.g, step.u) == (1, 1)  # user_id=7 is bound, qty=2 is not


def test_cac_malformed_and_plain_text_observations() -> None:
    t = _bare(
        [
            _record("lookup", {"q": "mugs"}, "Found item SKU-4411 at 12.50 dollars."),
            _record("buy", None, "Error: bad json", ObsClass.ERROR),
            _record("buy", {"sku": "SKU-4411", "price": 12.5}, "ok"),
        ]
    )
    steps = cac(t).steps
    assert (steps[1].leaves, steps[1].depth, steps[1].a) == (0, 1, 0.0)
    assert (steps[2].g, steps[2].u, steps[2].b) == (1, 2, 1)


def test_cac_falls_back_to_planned_depth_when_values_were_transformed() -> None:
    planned = [
        PlannedCall(tool="search_flights", args={"origin": SlotArg(name="origin")}),
        PlannedCall(tool="get_fare_rules", args={"flight_id": RefArg(step=0, field="id")}),
        PlannedCall(
            tool="book_flight",
            args={"flight_id": RefArg(step=0, field="id"), "cls": RefArg(step=1, field="c")},
        ),
    ]
    t = _bare(
        [
            _record("search_flights", {"origin": "SFO"}, '{"flights": [{"id": "UA837"}]}'),
            _record("get_fare_rules", {"flight_id": "ua-837"}, '{"c": "Y"}'),  # transformed
            _record("book_flight", {"flight_id": "ua-837", "cls": "economy"}, "{}"),
        ]
    )
    steps = cac(t, planned=planned).steps
    assert [(s.g, s.g_from_plan) for s in steps] == [(0, False), (1, True), (2, True)]
    assert [s.g for s in cac(t).steps] == [0, 0, 0]
    assert LiteralArg(value=1).kind == "literal"


# --- digests and rule labels (§5.2) ----------------------------------------------------------


def test_digest_is_words_then_skeleton() -> None:
    t = make_trajectory(
        "d",
        [[call("get_order", {"order_id": "W1"}, {"status": "ok"})], [call("cancel_order", {})]],
        final="Your order W1 is cancelled.",
    )
    t = t.model_copy(
        update={
            "messages": [
                *t.messages[:2],
                Message(role=MessageRole.ASSISTANT, content="Let me look up  the order first."),
                *t.messages[2:],
            ]
        }
    )
    text = digest(t, ACCESS)
    words, skeleton = text.split("\n")
    assert words == "Let me look up the order first. | Your order W1 is cancelled."
    assert skeleton == "R:get_order W:cancel_order ANS"


def test_digest_truncates_to_512_tokens_and_marks_errors_and_questions() -> None:
    long = " ".join(f"w{i}" for i in range(2000)) + " " + "x" * 10_000
    t = make_trajectory(
        "d",
        ["Which order?", [call("get_order", {"order_id": "W9"}, "nope", error="NotFound")]],
        final=long,
    )
    words, skeleton = digest(t, ACCESS).split("\n")
    assert len(words.split()) == DIGEST_TOKENS
    assert skeleton == "ASK R:get_order! ANS"
    assert digest(_bare([])) == ""


def test_digest_for_embedding_keeps_the_skeleton() -> None:
    text = "word " * 1000 + "\nR:get_order W:cancel_order ANS"
    cut = digest_for_embedding(text, 200)
    assert len(cut) <= 200
    assert cut.endswith("\nR:get_order W:cancel_order ANS")
    assert digest_for_embedding("short\nR:x", 200) == "short\nR:x"


def _mode(turns, **kw) -> ReasoningMode:
    return rule_mode(make_trajectory("m", turns, **kw), ACCESS)


def test_rule_labels_each_rule() -> None:
    get = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "ok"})
    assert _mode(["Which order do you mean?", [get]]) is ReasoningMode.CLARIFY_FIRST
    assert (
        _mode([[call("get_order", {"order_id": "X"}, "no", error="NotFound")], [get]])
        is ReasoningMode.RECOVER_AFTER_ERROR
    )
    assert _mode([[call("run_python", {"code": "print(1)"}, "1")]]) is ReasoningMode.CODE_COMPUTE
    assert (
        _mode([[call("cancel_order", {"order_id": "W1"}, {"ok": True})], [get]])
        is ReasoningMode.VERIFY_AFTER_WRITE
    )
    reads = [[call("list_items", {"q": str(i)}, [{"id": i}])] for i in range(3)]
    assert (
        _mode([*reads, [call("add_item", {"item_id": "I1"}, {"ok": True})]])
        is ReasoningMode.EXPLORE_THEN_COMMIT
    )
    assert _mode(reads) is ReasoningMode.EXPLORE_THEN_COMMIT  # no write: reads before the answer
    assert (
        _mode([[get, call("get_item", {"item_id": "I1"}, {"id": "I1"})]])
        is ReasoningMode.PARALLEL_FANOUT
    )
    assert _mode([[get]]) is ReasoningMode.DIRECT_EXECUTE
    assert _mode([]) is ReasoningMode.DIRECT_EXECUTE


def test_rule_labels_first_match_wins() -> None:
    failing = call("get_order", {"order_id": "X"}, "no", error="NotFound")
    fixed = call("run_python", {"code": "print(2)"}, "2")
    # a question first beats everything; recovery beats the code tool
    assert _mode(["Which one?", [failing], [fixed]]) is ReasoningMode.CLARIFY_FIRST
    assert _mode([[failing], [fixed]]) is ReasoningMode.RECOVER_AFTER_ERROR
    # repeating the same failing call is not a recovery
    assert _mode([[failing], [failing]]) is ReasoningMode.DIRECT_EXECUTE


def test_verify_after_write_uses_ids_the_write_returned() -> None:
    create = call("add_item", {"name": "mug"}, {"item_id": "I-77", "ok": True})
    read = call("get_item", {"item_id": "I-77"}, {"id": "I-77"})
    other = call("get_item", {"item_id": "I-1"}, {"id": "I-1"})
    assert _mode([[create], [read]]) is ReasoningMode.VERIFY_AFTER_WRITE
    assert _mode([[create], [other]]) is ReasoningMode.DIRECT_EXECUTE


# --- the mode codebook (§5.2) ----------------------------------------------------------------

FAMILIES = [
    (ReasoningMode.CLARIFY_FIRST, "ask which order the customer means"),
    (ReasoningMode.RECOVER_AFTER_ERROR, "retry after the lookup failed"),
    (ReasoningMode.EXPLORE_THEN_COMMIT, "compare flights fares before booking"),
    (ReasoningMode.CODE_COMPUTE, "compute totals with python script"),
    (ReasoningMode.VERIFY_AFTER_WRITE, "confirm the refund was recorded"),
]


def _synthetic(n_per: int, seed: int = 0, dim: int = 384, noise: float = 0.02):
    rng = np.random.default_rng(seed)
    centers = np.linalg.qr(rng.normal(size=(dim, len(FAMILIES))))[0].T  # orthonormal
    x, labels, digests, fam = [], [], [], []
    for j, (label, words) in enumerate(FAMILIES):
        pts = centers[j] + noise * rng.normal(size=(n_per, dim))
        x.append(pts)
        # 80% of each family carries its own rule label, the rest a neighbour's
        for i in range(n_per):
            labels.append(label if i % 5 else FAMILIES[(j + 1) % len(FAMILIES)][0])
            digests.append(f"{words} step{i % 7}\nR:tool{j}")
            fam.append(j)
    return np.vstack(x).astype(np.float32), labels, digests, np.asarray(fam), centers


def test_codebook_fit_picks_k_by_silhouette_and_names_modes() -> None:
    x, labels, digests, fam, centers = _synthetic(120)
    book = ModeCodebook.fit(x, labels, digests, min_fit=500)
    assert book.kind == "kmeans" and book.k == len(FAMILIES)
    assert book.silhouette is not None and book.silhouette > 0.5
    assert book.centroids is not None
    assert np.allclose(np.linalg.norm(book.centroids, axis=1), 1.0, atol=1e-5)
    assert {m.label for m in book.modes} == {label for label, _ in FAMILIES}
    assert sorted(m.size for m in book.modes) == [120] * 5
    by_label = {m.label: m for m in book.modes}
    explore = by_label[ReasoningMode.EXPLORE_THEN_COMMIT]
    assert set(explore.terms) <= {"compare", "flights", "fares", "booking", "tool2"}
    assert explore.name.startswith("explore_then_commit: ")
    assert [m.mode_id for m in book.modes] == [f"m{j:02d}" for j in range(5)]

    got = book.assign(x, labels)
    # every member of a family lands in the one mode of that family
    for j in range(len(FAMILIES)):
        ids = {a.mode_id for a, f in zip(got, fam, strict=True) if f == j}
        assert len(ids) == 1
    assert all(a.cosine is not None and a.cosine > 0.9 for a in got)
    assert got[0].rule_label is ReasoningMode.CLARIFY_FIRST or got[0].rule_label is not None


def test_codebook_unassigned_below_min_cosine_and_without_embedding() -> None:
    x, labels, digests, _, centers = _synthetic(120)
    book = ModeCodebook.fit(x, labels, digests)
    rng = np.random.default_rng(5)
    far = rng.normal(size=(1, 384)).astype(np.float32)  # ~orthogonal to every centroid
    near = centers[2:3].astype(np.float32)
    zero = np.zeros((1, 384), dtype=np.float32)
    got = book.assign(np.vstack([near, far, zero]), [ReasoningMode.DIRECT_EXECUTE] * 3)
    assert got[0].mode_id is not None and got[0].label is ReasoningMode.EXPLORE_THEN_COMMIT
    assert got[1].mode_id is None and "< 0.5" in (got[1].reason or "")
    assert got[2].mode_id is None and got[2].reason == "no embedding"
    assert got[1].rule_label is ReasoningMode.DIRECT_EXECUTE
    assert needs_refit(got)  # 2 of 3 unassigned > 10%


def test_codebook_falls_back_to_rule_labels_with_few_digests() -> None:
    x, labels, digests, _, _ = _synthetic(20)  # 100 digests < 500
    book = ModeCodebook.fit(x, labels, digests)
    assert book.kind == "rules" and book.k == 7
    assert "100 digests" in (book.fallback_reason or "")
    got = book.assign(x, labels)
    assert [a.label for a in got] == labels
    assert all(a.mode_id == a.label.value for a in got)
    # configurable threshold: the same 100 digests fit a codebook with min_fit=50
    assert ModeCodebook.fit(x, labels, digests, min_fit=50).kind == "kmeans"


def test_codebook_degenerate_inputs_fall_back() -> None:
    x = np.tile(np.eye(384, dtype=np.float32)[:1], (600, 1))  # one distinct digest
    book = ModeCodebook.fit(x, [ReasoningMode.DIRECT_EXECUTE] * 600, [""] * 600)
    assert book.kind == "rules" and "no K" in (book.fallback_reason or "")
    empty = ModeCodebook.fit(np.zeros((0, 384)), [], [])
    assert empty.kind == "rules"
    assert empty.assign(None, []) == []


def test_codebook_round_trips_through_its_record() -> None:
    x, labels, digests, _, _ = _synthetic(120)
    book = ModeCodebook.fit(x, labels, digests)
    back = ModeCodebook.from_record(book.to_record())
    assert back.codebook_id == book.codebook_id
    assert [a.mode_id for a in back.assign(x, labels)] == [
        a.mode_id for a in book.assign(x, labels)
    ]
    assert ModeCodebook.fit(x, labels, digests).codebook_id == book.codebook_id  # deterministic


# --- near-duplicates (§5.4) ------------------------------------------------------------------


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_near_duplicates_keep_the_higher_score_within_a_cluster() -> None:
    get = [call("get_order", {"order_id": "W1"}, {"s": 1})]
    t1 = make_trajectory("t1", [get])
    t2 = make_trajectory("t2", [get])  # exact duplicate of t1
    t3 = make_trajectory("t3", [[call("get_item", {"item_id": "I1"}, {"s": 1})]])
    t4 = make_trajectory("t4", [[call("list_items", {}, [1])]])
    t5 = make_trajectory("t5", [get]).model_copy(update={"cluster_id": "bank"})
    rng = np.random.default_rng(0)
    e = _unit(rng.normal(size=384))
    close = _unit(e + 0.2 * _unit(rng.normal(size=384)))  # cosine ~0.98
    far = _unit(rng.normal(size=384))
    emb = np.vstack([e, e, close, far, e]).astype(np.float32)
    assert float(e @ close) >= 0.95
    marks = near_duplicates(
        [t1, t2, t3, t4, t5], emb, {"t1": 1.0, "t2": 2.5, "t3": 1.5, "t4": 0.0, "t5": 0.1}
    )
    got = {m.trajectory_id: (m.duplicate_of, m.kind) for m in marks}
    assert got == {"t1": ("t2", "exact"), "t3": ("t2", "near")}
    assert next(m for m in marks if m.trajectory_id == "t3").similarity == pytest.approx(
        float(e @ close), abs=1e-5
    )
    # without embeddings only exact duplicates are found
    exact_only = near_duplicates([t1, t2, t3, t4, t5], None, {"t1": 3.0})
    assert [(m.trajectory_id, m.duplicate_of) for m in exact_only] == [("t2", "t1")]
    assert near_duplicates([], None) == []


def test_action_key_includes_observation_classes() -> None:
    ok = make_trajectory("a", [[call("get_order", {"order_id": "W1"}, {"s": 1})]])
    err = make_trajectory("b", [[call("get_order", {"order_id": "W1"}, "x", error="E")]])
    same = make_trajectory("c", [[call("get_order", {"order_id": "W1"}, {"other": 2})]])
    assert action_key(ok) != action_key(err)
    assert action_key(ok) == action_key(same)
    # final answers and questions are actions too (§1.2): chit-chat is not all one duplicate
    hi = make_trajectory("h", [], final="Hello! How can I help?")
    hi2 = make_trajectory("i", [], final="  hello!   how can I help? ")
    bye = make_trajectory("j", [], final="Goodbye.")
    assert action_key(hi) == action_key(hi2)
    assert action_key(hi) != action_key(bye)
    asked = make_trajectory("k", ["Which order?"], final="Here is what I found.")
    assert action_key(asked) != action_key(make_trajectory("l", [], final="Here is what I found."))
    # call records no message names are still actions
    assert action_key(_bare([_record("x", {"a": 1}, "ok")])) != action_key(_bare([]))


def _greedy_reference(clusters, emb, scores, threshold):
    """Pairwise reference of the keep-the-best rule (slow, for the test only)."""
    order = sorted(range(len(clusters)), key=lambda i: (-scores[i], i))
    kept, dup = [], {}
    for i in order:
        leader = next(
            (k for k in kept if clusters[k] == clusters[i] and emb[k] @ emb[i] >= threshold), None
        )
        if leader is None:
            kept.append(i)
        else:
            dup[i] = leader
    return dup


def test_near_duplicates_match_a_pairwise_reference_at_scale() -> None:
    rng = np.random.default_rng(1)
    n, dim = 1500, 64
    base = rng.normal(size=(n, dim))
    # a third of the rows are noisy copies of earlier rows
    for i in range(n // 3, n, 3):
        base[i] = base[rng.integers(0, n // 3)] + 0.05 * rng.normal(size=dim)
    emb = (base / np.linalg.norm(base, axis=1, keepdims=True)).astype(np.float32)
    clusters = [f"c{i % 3}" for i in range(n)]
    scores = rng.random(n)
    trajs = [
        _bare([_record("t", {"i": i}, "ok")], cluster=clusters[i], tid=f"t{i:05d}")
        for i in range(n)
    ]
    marks = near_duplicates(
        trajs, emb, {t.trajectory_id: float(s) for t, s in zip(trajs, scores, strict=True)},
        block=128,
    )  # fmt: skip
    ref = _greedy_reference(clusters, emb, scores, 0.95)
    got = {int(m.trajectory_id[1:]): int(m.duplicate_of[1:]) for m in marks}
    assert got == ref
    assert len(got) > 50
    assert all(m.kind == "near" and m.similarity >= 0.95 for m in marks)


# --- the round report (§5.4) -----------------------------------------------------------------


def test_diversity_report_values() -> None:
    domains = ["retail"] * 50 + ["travel"] * 30 + ["finance"] * 20
    clusters = ["shop"] * 50 + ["air"] * 30 + ["bank"] * 20
    modes: list[str | None] = ["m0"] * 60 + ["m1"] * 30 + ["m2"] * 10
    report = diversity_report(
        round=2,
        domains=domains,
        clusters=clusters,
        modes=modes,
        cac_values=list(range(1, 101)),
        k_domains=3,
        k_clusters=6,
        k_modes=4,
        mode_codebook="modes_x",
        n_duplicates=25,
    )
    assert report.h_dom_norm == pytest.approx(0.93723, abs=TOL)
    assert report.h_mode_norm == pytest.approx(0.64773, abs=TOL)
    assert report.h_cluster_norm == pytest.approx(1.02965 / math.log(6), abs=TOL)
    assert (report.k_dom, report.k_cluster, report.k_mode) == (3, 6, 4)
    assert report.cac_mean == pytest.approx(50.5)
    assert report.cac_median == pytest.approx(50.5)
    assert report.cac_p90 == pytest.approx(90.1)
    assert report.duplicate_rate == pytest.approx(25 / 125)
    assert report.n == 100 and report.notes == []


def test_diversity_report_unassigned_and_empty_round() -> None:
    report = diversity_report(
        round=1,
        domains=["retail"] * 4,
        clusters=["shop"] * 4,
        modes=["m0", None, "m1", None],
        cac_values=[1.0, 2.0, 3.0, 4.0],
        k_clusters=1,
        k_modes=7,
    )
    assert (report.n_unassigned, report.unassigned_rate) == (2, 0.5)
    assert report.h_mode_norm == pytest.approx(math.log(2) / math.log(7))
    assert report.k_dom == 9  # the domain catalog
    empty = diversity_report(
        round=3, domains=[], clusters=[], modes=[], cac_values=[], k_clusters=4, k_modes=7
    )
    assert (empty.n, empty.h_dom_norm, empty.duplicate_rate, empty.cac_mean) == (0, 0.0, 0.0, None)
    assert empty.notes == ["empty round: no accepted trajectories"]


def test_difficulty_bins_from_cac_tertiles() -> None:
    edges = cac_tertiles([2.5, 13.2, 5.0, 8.0, 20.0, 3.1])
    assert edges is not None
    assert difficulty_of(2.5, edges) is Difficulty.EASY
    assert difficulty_of(20.0, edges) is Difficulty.HARD
    assert difficulty_of(7.0, None) is None
    assert cac_tertiles([]) is None


# --- embeddings of bad text ------------------------------------------------------------------


class CountingEmbedder:
    """A deterministic fake embedder that records what it was asked and refuses 'POISON'."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts):
        if any("POISON" in t for t in texts):
            raise RuntimeError("tokenizer exploded")
        self.seen.extend(texts)
        rows = []
        for t in texts:
            rng = np.random.default_rng(int(text_key(t)[:8], 16))
            rows.append(rng.normal(size=8))
        return np.asarray(rows) * 3.0  # not normalised: embed_texts must normalise


def test_embed_texts_dedupes_caches_and_skips_with_reasons() -> None:
    fake = CountingEmbedder()
    cache: dict[str, np.ndarray] = {}
    texts = ["alpha", "alpha", "", None, b"caf\xe9 \xff bytes", "x" * 50_000, "POISON", "beta"]
    out = embed_texts(texts, fake, cache=cache, max_chars=1000, batch_size=3)
    assert out.vectors.shape == (8, 8)
    assert out.ok.tolist() == [True, True, False, False, True, True, False, True]
    assert out.skipped[2] == "empty text" and out.skipped[3] == "empty text"
    assert "tokenizer exploded" in out.skipped[6]
    assert np.allclose(np.linalg.norm(out.vectors[out.ok], axis=1), 1.0)
    assert np.allclose(out.vectors[0], out.vectors[1])
    assert not out.vectors[2].any()
    assert fake.seen.count("alpha") == 1  # each distinct text once
    assert max(len(t) for t in fake.seen) == 1000 and out.n_truncated == 1
    assert all("\ufffd" in t for t in fake.seen if t.startswith("caf"))
    assert len(cache) == out.n_embedded == 4
    again = embed_texts(["beta", "alpha"], fake, cache=cache)
    assert again.n_cached == 2 and again.n_embedded == 0
    assert np.allclose(again.vectors[1], out.vectors[0])


def test_embed_digests_of_trajectories_with_nothing_to_say() -> None:
    fake = CountingEmbedder()
    out = embed_digests([digest(_bare([])), "hello\nR:get_order"], fake)
    assert out.ok.tolist() == [False, True]
    assert out.skipped == {0: "empty text"}


def test_sanitize_text_handles_surrogates_and_controls() -> None:
    assert sanitize_text("a\udce9b\x00c") == "a?b c"
    assert sanitize_text(b"\xff\xfe") == "\ufffd\ufffd"


# --- the real embedder ------------------------------------------------------------------------


@pytest.mark.slow
def test_real_embedder_digests_and_codebook() -> None:
    from trajsynth.curation.embeddings import load_embedder

    embed = load_embedder()
    get = [call("get_order", {"order_id": "W1"}, {"status": "shipped"})]
    cancel = [call("cancel_order", {"order_id": "W1"}, {"ok": True})]
    texts = {
        "status": make_trajectory("a", [get], final="Your order W1 has shipped and is on its way."),
        "status2": make_trajectory("b", [get], final="Order W1 has shipped; it is on the way."),
        "cancel": make_trajectory("c", [get, cancel], final="I cancelled order W1 for you."),
        "ask": make_trajectory("d", ["Which order do you mean?", get], final="Found it."),
    }
    digests = [digest(t, ACCESS) for t in texts.values()]
    out = embed_digests(digests + ["", "\udcff" * 3 + "ok"], embed)
    assert out.ok.tolist() == [True, True, True, True, False, True]
    v = out.vectors
    assert v.shape[1] == 384
    assert np.allclose(np.linalg.norm(v[out.ok], axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[3]  # paraphrases are closer than a different flow
    assert v[0] @ v[1] > 0.8
    # a small codebook over real embeddings: paraphrase families land together
    families = [
        "I looked up order {i} and it has shipped.\nR:get_order ANS",
        "Which order number do you mean, {i}?\nASK",
        "I cancelled order {i} and refunded the card.\nR:get_order W:cancel_order ANS",
        "I computed the total of {i} items with python.\nW:run_python ANS",
    ]
    docs = [f.format(i=f"#{k}") for f in families for k in range(15)]
    labels = [m for m in (ReasoningMode.DIRECT_EXECUTE, ReasoningMode.CLARIFY_FIRST,
                          ReasoningMode.VERIFY_AFTER_WRITE, ReasoningMode.CODE_COMPUTE)
              for _ in range(15)]  # fmt: skip
    emb = embed_digests(docs, embed).vectors
    book = ModeCodebook.fit(emb, labels, docs, min_fit=40, k_min=4, k_max=6)
    assert book.kind == "kmeans"
    got = book.assign(emb, labels)
    for j in range(4):
        fam = {a.mode_id for a in got[j * 15 : (j + 1) * 15]}
        assert len(fam) == 1 and None not in fam
    assert {m.label for m in book.modes} >= {
        ReasoningMode.CLARIFY_FIRST,
        ReasoningMode.CODE_COMPUTE,
    }
