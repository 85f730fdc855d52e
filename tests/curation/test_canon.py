"""State canonicalization (docs/methods.md §1.2)."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from trajsynth.curation.canon import (
    call_key,
    call_key_memo,
    canon_args,
    canon_call,
    canon_number,
    is_identifier,
    normalize_source,
    obs_class,
    obs_digest,
)
from trajsynth.schemas import ObsClass, ToolCallRecord, canonical_json

SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "steps": {"type": "array", "items": {"type": "string"}},
        "ref": {"type": "string", "format": "x-identifier"},
        "flag": {"type": "boolean"},
    },
    "required": ["order_id", "flag"],
}


def test_strings_casefolded_except_identifiers() -> None:
    out = canon_args(
        {"order_id": " #W1 ", "note": "  Arrived CRACKED ", "ref": "AbC", "flag": True}, SCHEMA
    )
    assert out == {"flag": True, "note": "arrived cracked", "order_id": " #W1 ", "ref": "AbC"}
    assert list(out) == sorted(out)


def test_null_optional_dropped_required_kept() -> None:
    assert canon_args({"order_id": "#W1", "note": None, "flag": None}, SCHEMA) == {
        "order_id": "#W1",
        "flag": None,
    }
    assert canon_args({"a": None, "b": 1}) == {"b": 1.0}


def test_numbers_six_significant_digits_but_not_ids() -> None:
    out = canon_args({"amount": 54.2000001, "qty": 2, "user_id": 1234567, "big": 1234567})
    assert out == {"amount": 54.2, "qty": 2.0, "user_id": 1234567, "big": 1234570.0}
    assert canon_number(10**400) == "1.00000e+400"  # no OverflowError on huge integers
    assert canon_args({"a": True}) == {"a": True}  # bools are not numbers


def test_unordered_arrays_sorted_ordered_kept() -> None:
    out = canon_args({"tags": ["b", "A", "c"], "steps": ["b", "A"]}, SCHEMA)
    assert out["tags"] == ["a", "b", "c"]
    assert out["steps"] == ["b", "a"]
    x = {"ids": ["b", "a"]}
    assert canon_args(x, {"properties": {"ids": {"x-unordered": True}}}) == {"ids": ["a", "b"]}


def test_volatile_keys_removed_at_any_depth() -> None:
    args = {"q": "x", "ts": 5, "inner": {"request_id": "r1", "v": 1}}
    assert canon_args(args, volatile=frozenset({"ts", "request_id"})) == {
        "inner": {"v": 1.0},
        "q": "x",
    }


def test_identifier_names() -> None:
    yes = ["id", "order_id", "orderId", "item_ids", "sku", "product_sku", "email", "promo_code"]
    no = ["paid", "valid", "note", "quantity", "identity"]
    assert all(is_identifier(n) for n in yes)
    assert not any(is_identifier(n) for n in no)
    # items of an identifier list keep their case
    assert canon_args({"item_ids": ["I9", "i3"]}) == {"item_ids": ["I9", "i3"]}


def test_canon_call_is_sha1_prefix_of_canonical_args() -> None:
    name, digest = canon_call("get_order", {"order_id": "#W1", "note": "A "})
    expected = hashlib.sha1(
        canonical_json({"note": "a", "order_id": "#W1"}).encode(), usedforsecurity=False
    ).hexdigest()[:16]
    assert (name, digest) == ("get_order", expected)
    # raw text of the same call gives the same key; different ids do not
    assert canon_call("get_order", '{"note":"a","order_id":"#W1"}') == (name, digest)
    assert canon_call("get_order", {"order_id": "#W2", "note": "a"})[1] != digest


def test_canon_call_malformed_never_raises() -> None:
    a = canon_call("add_to_cart", '{"sku": "M-1", "qty": ')
    b = canon_call("add_to_cart", None)
    c = canon_call("add_to_cart", "[1, 2]")
    assert len({a, b, c}) == 3
    assert all(len(x[1]) == 16 for x in (a, b, c))


def _record(raw: str) -> ToolCallRecord:
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    return ToolCallRecord(
        call_id="c", tool="get_order", raw_arguments=raw,
        arguments=parsed if isinstance(parsed, dict) else None,
    )  # fmt: skip


def test_call_key_is_canon_call_with_or_without_the_round_memo() -> None:
    raws = ['{"order_id": "#W1", "note": " A"}', '{"note": "a", "order_id": "#W1"}', '{"x": ']
    plain = [call_key(_record(r)) for r in raws]
    assert plain == [canon_call("get_order", r) for r in raws]
    assert plain[0] == plain[1] != plain[2]
    with call_key_memo():
        with call_key_memo():  # a nested block shares the outer memo
            assert [call_key(_record(r)) for r in raws] == plain
        assert [call_key(_record(r)) for r in raws] == plain
    assert call_key(_record(raws[2])) == plain[2]


def test_code_canonicalized_by_normalized_source() -> None:
    one = canon_call("python", {"code": "  x = 1\n\n  print(x)  \n"})
    two = canon_call("python", {"code": "x = 1\nprint(x)"})
    assert one == two
    assert normalize_source("if x:\n\ty = 1\n") == "if x:\n    y = 1"


def test_obs_class() -> None:
    assert obs_class('{"total": 3}') is ObsClass.OK
    assert obs_class("plain text") is ObsClass.OK
    for empty in (None, [], {}, "[]", "{}", "null", "  "):
        assert obs_class(empty) is ObsClass.EMPTY, empty
    assert obs_class('{"total": 3}', is_error=True) is ObsClass.ERROR
    assert obs_class(None, malformed=True) is ObsClass.ERROR
    assert obs_class("x", schema_invalid=True) is ObsClass.ERROR


def test_obs_digest_ignores_key_order_format_and_volatile() -> None:
    a = obs_digest({"b": 1, "a": [1, 2], "ts": "2024-01-01T00:00:00"}, frozenset({"ts"}))
    b = obs_digest('{"a": [1, 2], "b": 1}')
    assert a == b
    assert len(a) == 40
    assert obs_digest({"a": [2, 1]}) != obs_digest({"a": [1, 2]})  # results keep their order


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_scalars |= st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
keys = st.sampled_from(["order_id", "note", "tags", "steps", "ref", "flag", "amount", "x"])


@given(st.dictionaries(keys | st.text(max_size=6), json_values, max_size=6))
def test_canon_args_idempotent(args: dict) -> None:
    for schema in (None, SCHEMA):
        once = canon_args(args, schema)
        assert canon_args(once, schema) == once
        json.dumps(once)  # always JSON


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_canon_call_ignores_key_order(args: dict) -> None:
    reordered = dict(reversed(list(args.items())))
    assert canon_call("t", args) == canon_call("t", reordered)


def test_docstring_examples() -> None:
    import doctest

    from trajsynth.curation import canon

    assert doctest.testmod(canon).failed == 0
