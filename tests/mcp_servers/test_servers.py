"""The bundled clusters as real MCP servers: each starts as a subprocess over stdio (the SDK's
``stdio_client`` + ``ClientSession``) and lists its tools; every tool is called, errors included,
and state changes are checked both through later calls and in the canonical state dump.

The every-tool tests talk to the same server object in this process (the SDK's in-memory
``Client``): the tools, their validation and errors are the server's own, and the stdio start
(about 1 s of CPU per server) is tested once per server by the listing tests."""

from __future__ import annotations

import csv
import importlib
import importlib.metadata
import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent, Tool

from trajsynth.mcp_servers.registry import ENTRY_POINT_GROUP
from trajsynth.mcp_servers.servers._backend import SEED_ENV, WORKDIR_ENV
from trajsynth.mcp_servers.servers._state import NoStateError, dump_state
from trajsynth.schemas import BundledCluster, EnvState

# the bundled clusters, read where the registry reads them: trajsynth's entry points
SPECS: dict[str, BundledCluster] = {
    ep.name: ep.load()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    if ep.dist is not None and ep.dist.name == "trajsynth"
}
BUNDLED = tuple(sorted(SPECS))

READS = {
    "shop": {"find_user_by_email", "get_user", "search_products", "get_product", "view_cart",
             "list_orders", "get_order", "get_refunds"},
    "travel": {"find_user", "find_airports", "search_flights", "get_flight", "get_fare_rules",
               "get_seat_map", "list_bookings", "get_booking"},
    "calendar": {"find_user", "list_events", "get_event", "check_availability", "list_messages",
                 "read_message"},
    "code": {"read_file", "list_files", "run_tests"},
}  # fmt: skip


class Conn:
    """A stdio session plus bookkeeping: which tools were called."""

    def __init__(
        self, session: ClientSession | Client, tools: list[Tool], workdir: Path, name: str
    ):
        self.session = session
        self.tools = {t.name: t for t in tools}
        self.workdir = workdir
        self.name = name
        self.called: set[str] = set()

    async def raw(self, tool: str, **args: Any) -> CallToolResult:
        self.called.add(tool)
        return await self.session.call_tool(tool, args)

    async def ok(self, tool: str, **args: Any) -> Any:
        result = await self.raw(tool, **args)
        assert not result.is_error, _text(result)
        assert result.structured_content is not None
        return result.structured_content

    async def err(self, tool: str, **args: Any) -> str:
        result = await self.raw(tool, **args)
        assert result.is_error, f"{tool} should have failed: {result.structured_content}"
        return _text(result)

    def state(self) -> dict[str, Any]:
        return dump_state(self.name, self.workdir)

    def assert_all_called(self) -> None:
        assert self.called == set(self.tools), set(self.tools) - self.called


def _text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


@asynccontextmanager
async def serve_in_process(name: str, workdir: Path, seed: int) -> AsyncIterator[Conn]:
    """Bundled server ``name``'s MCP server object, connected in memory. The server reads its
    work directory and seed from the environment on every call (as it does in a sandbox), so
    they are set for the session and put back after."""
    saved = {k: os.environ.get(k) for k in (WORKDIR_ENV, SEED_ENV)}
    os.environ[WORKDIR_ENV], os.environ[SEED_ENV] = str(workdir), str(seed)
    try:
        module = importlib.import_module(SPECS[name].server_module)
        module.STORE.ensure()  # what the server's main() does before it serves
        async with Client(module.server, read_timeout_seconds=60) as client:
            listed = await client.list_tools()
            yield Conn(client, listed.tools, workdir, name)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@asynccontextmanager
async def serve(name: str, workdir: Path, seed: int) -> AsyncIterator[Conn]:
    """Start bundled server ``name`` as a subprocess over stdio, as the environment does."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", SPECS[name].module],
        env={"TRAJSYNTH_WORKDIR": str(workdir), "TRAJSYNTH_SEED": str(seed)},
    )
    with (workdir.parent / f"{name}-server.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=60) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
            yield Conn(session, listed.tools, workdir, name)


def _rows(state: dict[str, Any], table: str, **match: Any) -> list[dict[str, Any]]:
    return [r for r in state["tables"][table] if all(r[k] == v for k, v in match.items())]


def _row(state: dict[str, Any], table: str, **match: Any) -> dict[str, Any]:
    rows = _rows(state, table, **match)
    assert len(rows) == 1, (table, match, rows)
    return rows[0]


def _workdir(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    return workdir


# ---------------------------------------------------------------- listing and metadata


@pytest.mark.slow
@pytest.mark.parametrize("name", BUNDLED)
async def test_tools_are_listed_with_tags_and_schemas(name: str, tmp_path: Path) -> None:
    async with serve(name, _workdir(tmp_path), seed=0) as conn:
        tools = list(conn.tools.values())
    assert len(tools) >= 6
    for tool in tools:
        assert tool.description, tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        for pname, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{pname} has no description"
    reads = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
    assert reads == READS[name]
    writes = [t for t in tools if t.name not in reads]
    assert writes and all(t.annotations and t.annotations.destructive_hint is not None
                          for t in writes)  # fmt: skip


def test_the_four_bundled_clusters_are_entry_points() -> None:
    assert BUNDLED == ("calendar", "code", "shop", "travel")


@pytest.mark.parametrize("name", BUNDLED)
async def test_cluster_declaration_is_consistent(name: str) -> None:
    spec = SPECS[name]
    assert spec.cluster_id == name
    assert spec.description and spec.facts.persona
    module = importlib.import_module(spec.server_module)
    assert module.STORE.name == name  # the state dump finds `<name>.sqlite` by the folder name
    assert module.STORE.seed_file == Path(module.__file__).with_name("seed.json")
    tools = {t.name: t for t in await module.server.list_tools()}
    for edge in spec.declared_edges:
        assert edge.source in tools
        assert edge.in_param in tools[edge.target].input_schema["properties"]


# ---------------------------------------------------------------- seeding and state dumps


@pytest.mark.parametrize("name", BUNDLED)
def test_seed_determines_the_initial_state(name: str, tmp_path: Path) -> None:
    a = dump_state(name, tmp_path / "a", init=True, seed=7)
    b = dump_state(name, tmp_path / "b", init=True, seed=7)
    c = dump_state(name, tmp_path / "c", init=True, seed=8)
    EnvState.model_validate(a)
    assert a == b
    assert a["state_hash"] != c["state_hash"]
    data = {k: v for k, v in a["tables"].items() if k != "meta"}
    assert data != {k: v for k, v in c["tables"].items() if k != "meta"}
    assert _row(a, "meta", key="seed")["value"] == "7"


def test_missing_state_is_an_error_without_init(tmp_path: Path) -> None:
    with pytest.raises(NoStateError, match="no shop state"):
        dump_state("shop", tmp_path)


@pytest.mark.slow
def test_state_cli_prints_canonical_envstate(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "trajsynth.mcp_servers.servers._state", "travel"]
    env = {"TRAJSYNTH_WORKDIR": str(tmp_path), "TRAJSYNTH_SEED": "5", "PATH": "/usr/bin:/bin"}
    missing = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 3 and "no travel state" in missing.stderr
    init = subprocess.run([*argv, "--init"], capture_output=True, text=True, env=env, timeout=60)
    assert init.returncode == 0, init.stderr
    state = EnvState.model_validate_json(init.stdout)
    assert state.model_dump(exclude={"checks", "readable"}) == dump_state("travel", tmp_path)
    assert state == EnvState.model_validate(dump_state("travel", tmp_path / "x", init=True, seed=5))
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert again.stdout == init.stdout


def test_dumping_state_loads_no_server(tmp_path: Path) -> None:
    """The environment dumps state after every rollout: it must not pay for importing mcp.
    Seeding a state (``--init``) imports the cluster's ``state`` module alone, not its server."""
    for name in BUNDLED:
        dump_state(name, tmp_path / name, init=True, seed=1)
    probe = (
        "import sys\n"
        "from trajsynth.mcp_servers.servers._state import dump_state\n"
        f"for name in {BUNDLED!r}:\n"
        f"    dump_state(name, {str(tmp_path)!r} + '/' + name)\n"
        f"    dump_state(name, {str(tmp_path)!r} + '/fresh-' + name, init=True)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pydantic')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
async def test_server_seeds_the_same_state_as_the_cli(tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    async with serve("calendar", workdir, seed=12) as conn:
        await conn.ok("get_event", event_id="EV1001")
        served = conn.state()
    assert served == dump_state("calendar", tmp_path / "cli", init=True, seed=12)


# ---------------------------------------------------------------- shop


async def test_shop_every_tool_and_its_failures(tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    async with serve_in_process("shop", workdir, seed=7) as conn:
        s0 = conn.state()
        mia = await conn.ok("find_user_by_email", email="Mia.K@example.com")
        assert mia["user_id"] == "mia_kim_1042"
        assert mia["default_payment_method_id"] == "credit_card_4242"
        assert "no user with email 'nobody@example.com'" in await conn.err(
            "find_user_by_email", email="nobody@example.com"
        )
        user = await conn.ok("get_user", user_id="mia_kim_1042")
        gift = next(p for p in user["payment_methods"] if p["kind"] == "gift_card")
        assert (
            gift["balance"]
            == _row(s0, "payment_methods", payment_method_id="gift_card_1042")["balance"]
        )
        assert "user 'ghost' not found" in await conn.err("get_user", user_id="ghost")

        mugs = await conn.ok("search_products", query="ceramic mug")
        assert [p["product_id"] for p in mugs["products"]] == ["P104", "P105"]
        kitchen = await conn.ok("search_products", query="", category="kitchen", max_price=40)
        assert {p["product_id"] for p in kitchen["products"]} == {"P102", "P104", "P105"}
        red = await conn.ok("get_product", product_id="mug-red")
        assert red["product_id"] == "P104"
        assert red["stock"] == _row(s0, "products", product_id="P104")["stock"]
        assert "product 'P999' not found" in await conn.err("get_product", product_id="P999")

        # cart: stock limits, adding, removing
        cart = await conn.ok("add_to_cart", user_id="mia_kim_1042", product_id="P104", quantity=2)
        assert cart["total"] == 24.0 and cart["items"][0]["quantity"] == 2
        assert "insufficient stock" in await conn.err(
            "add_to_cart", user_id="mia_kim_1042", product_id="P104", quantity=red["stock"]
        )
        assert "insufficient stock for LED Camping Lantern" in await conn.err(
            "add_to_cart", user_id="mia_kim_1042", product_id="P112"
        )
        await conn.ok("add_to_cart", user_id="mia_kim_1042", product_id="P106")
        await conn.ok("add_to_cart", user_id="mia_kim_1042", product_id="P113")
        cart = await conn.ok("remove_from_cart", user_id="mia_kim_1042", product_id="P113")
        assert [i["product_id"] for i in cart["items"]] == ["P104", "P106"]
        assert "is not in the cart" in await conn.err(
            "remove_from_cart", user_id="mia_kim_1042", product_id="P113"
        )
        cart = await conn.ok("view_cart", user_id="mia_kim_1042")
        assert cart["total"] == 223.0

        # a gift card cannot pay more than its balance; the failed call changes nothing
        before = conn.state()
        msg = await conn.err(
            "place_order", user_id="mia_kim_1042", payment_method_id="gift_card_1042"
        )
        assert (
            f"insufficient funds: gift card gift_card_1042 has a balance of {gift['balance']:.2f}"
            in msg
        )
        assert conn.state() == before
        assert "does not belong to user" in await conn.err(
            "place_order", user_id="mia_kim_1042", payment_method_id="paypal_2231"
        )
        order = await conn.ok(
            "place_order", user_id="mia_kim_1042", payment_method_id="credit_card_4242"
        )
        assert order["order_id"] == "#W1010" and order["status"] == "pending"
        assert order["total"] == 223.0
        assert [i["item_id"] for i in order["items"]] == ["I1010-1", "I1010-2"]
        assert (await conn.ok("view_cart", user_id="mia_kim_1042"))["items"] == []
        assert "cart of 'mia_kim_1042' is empty" in await conn.err(
            "place_order", user_id="mia_kim_1042", payment_method_id="credit_card_4242"
        )
        s1 = conn.state()
        assert _row(s1, "products", product_id="P104")["stock"] == red["stock"] - 2
        assert _row(s1, "orders", order_id="#W1010")["total"] == 223.0
        assert _rows(s1, "cart_items", user_id="mia_kim_1042") == []

        pending = await conn.ok("list_orders", user_id="mia_kim_1042", status="pending")
        assert [o["order_id"] for o in pending["orders"]] == ["#W1010", "#W1002"]
        got = await conn.ok("get_order", order_id="W1010")
        assert got == order
        assert "order #W9999 not found" in await conn.err("get_order", order_id="#W9999")

        # cancel: only pending/processing; restocks and refunds
        cancelled = await conn.ok("cancel_order", order_id="#W1010", reason="ordered by mistake")
        assert cancelled["status"] == "cancelled"
        assert {i["status"] for i in cancelled["items"]} == {"cancelled"}
        assert (
            "order #W1010 is cancelled; only pending or processing orders can be cancelled"
            in await conn.err("cancel_order", order_id="#W1010", reason="other")
        )
        assert "order #W1001 is delivered" in await conn.err(
            "cancel_order", order_id="#W1001", reason="other"
        )

        # returns: only delivered orders, each line once, refund to a method of the owner
        refund = await conn.ok(
            "return_items",
            order_id="#W1001",
            item_ids=["I1001-1"],
            payment_method_id="gift_card_1042",
        )
        assert refund["amount"] == 79.99 and refund["payment_method_id"] == "gift_card_1042"
        assert "has already been returned" in await conn.err(
            "return_items", order_id="#W1001", item_ids=["I1001-1"]
        )
        assert "item 'I1002-1' is not part of order #W1001" in await conn.err(
            "return_items", order_id="#W1001", item_ids=["I1002-1"]
        )
        assert "order #W1002 is pending; only delivered orders can be returned" in await conn.err(
            "return_items", order_id="#W1002", item_ids=["I1002-1"]
        )
        assert "does not belong to user" in await conn.err(
            "return_items", order_id="#W1001", item_ids=["I1001-2"], payment_method_id="paypal_2231"
        )
        user = await conn.ok("get_user", user_id="mia_kim_1042")
        new_gift = next(p for p in user["payment_methods"] if p["kind"] == "gift_card")
        assert new_gift["balance"] == round(gift["balance"] + 79.99, 2)

        refunds = await conn.ok("get_refunds", order_id="#W1001")
        assert [r["item_ids"] for r in refunds["refunds"]] == [["I1001-1"]]
        mine = await conn.ok("get_refunds", user_id="mia_kim_1042")
        assert [(r["order_id"], r["amount"]) for r in mine["refunds"]] == [
            ("#W1010", 223.0),
            ("#W1001", 79.99),
        ]
        assert "give a user_id or an order_id" in await conn.err("get_refunds")
        conn.assert_all_called()

        s2 = conn.state()
        assert _row(s2, "products", product_id="P104")["stock"] == red["stock"]
        assert _row(s2, "order_items", item_id="I1001-1")["status"] == "returned"
        assert _row(s2, "orders", order_id="#W1010")["cancel_reason"] == "ordered by mistake"
        assert all("created_at" not in r for r in s2["tables"]["refunds"])
        assert len({s0["state_hash"], s1["state_hash"], s2["state_hash"]}) == 3


async def test_shop_bad_arguments_are_tool_errors(tmp_path: Path) -> None:
    async with serve_in_process("shop", _workdir(tmp_path), seed=1) as conn:
        msg = await conn.err("add_to_cart", user_id="mia_kim_1042", product_id="P104", quantity=0)
        assert "quantity must be at least 1" in msg
        msg = await conn.err("cancel_order", order_id="#W1002", reason="bored")
        assert "Error executing tool cancel_order" in msg and "reason" in msg


# ---------------------------------------------------------------- travel


async def test_travel_every_tool_and_its_failures(tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    async with serve_in_process("travel", workdir, seed=11) as conn:
        s0 = conn.state()
        ben = await conn.ok("find_user", email="ben.carter@example.com")
        assert ben["user_id"] == "ben_carter_2314"
        gift = next(p for p in ben["payment_methods"] if p["kind"] == "gift_card")
        assert "no user with email" in await conn.err("find_user", email="x@example.com")

        airports = await conn.ok("find_airports", query="new york")
        assert [a["code"] for a in airports["airports"]] == ["JFK"]

        found = await conn.ok(
            "search_flights", origin="San Francisco", destination="JFK", date="2025-06-12"
        )
        assert [f["flight_id"] for f in found["flights"]] == ["TS101-2025-06-12"]
        flight = found["flights"][0]
        free_econ = [
            r["seat"]
            for r in _rows(s0, "seats", flight_id="TS101-2025-06-12", cabin="economy")
            if r["status"] == "available"
        ]
        assert flight["seats_left"] == len(free_econ)
        assert "unknown airport or city 'Atlantis'" in await conn.err(
            "search_flights", origin="Atlantis", destination="JFK", date="2025-06-12"
        )
        assert "date must be YYYY-MM-DD" in await conn.err(
            "search_flights", origin="SFO", destination="JFK", date="June 12"
        )

        full = await conn.ok("get_flight", flight_id="TS450-2025-06-11")
        assert full["economy_seats_left"] == 0
        assert "flight 'TS999-2025-06-11' not found" in await conn.err(
            "get_flight", flight_id="TS999-2025-06-11"
        )
        rules = await conn.ok("get_fare_rules", flight_id="TS101-2025-06-12", cabin="economy")
        by_basis = {f["fare_basis"]: f for f in rules["fares"]}
        assert set(by_basis) == {"basic", "standard", "flex"}
        assert not by_basis["basic"]["refundable"] and by_basis["flex"]["cancel_fee"] == 0
        assert flight["lowest_fare"] == by_basis["basic"]["price"]
        seat_map = await conn.ok("get_seat_map", flight_id="TS101-2025-06-12")
        assert seat_map["available_seats"] == sorted(free_econ, key=lambda s: (int(s[:-1]), s[-1]))

        # booking failures: sold out, gift card balance, taken seat
        assert "no economy seats left on flight TS450-2025-06-11" in await conn.err(
            "book_flight", user_id=ben["user_id"], flight_id="TS450-2025-06-11",
            fare_basis="basic", payment_method_id="credit_card_2314",
        )  # fmt: skip
        assert gift["balance"] < by_basis["flex"]["price"]
        assert "insufficient funds: gift card gift_card_2314" in await conn.err(
            "book_flight", user_id=ben["user_id"], flight_id="TS101-2025-06-12",
            fare_basis="flex", payment_method_id="gift_card_2314",
        )  # fmt: skip
        taken = next(
            r["seat"]
            for r in _rows(s0, "seats", flight_id="TS101-2025-06-12", cabin="economy")
            if r["status"] == "occupied"
        )
        assert f"seat {taken} on flight TS101-2025-06-12 is already taken" in await conn.err(
            "book_flight", user_id=ben["user_id"], flight_id="TS101-2025-06-12",
            fare_basis="standard", payment_method_id="credit_card_2314", seat=taken,
        )  # fmt: skip
        assert "flight TS331-2025-06-12 is cancelled" in await conn.err(
            "book_flight", user_id=ben["user_id"], flight_id="TS331-2025-06-12",
            fare_basis="standard", payment_method_id="credit_card_2314",
        )  # fmt: skip
        seat = seat_map["available_seats"][-1]
        booking = await conn.ok(
            "book_flight", user_id=ben["user_id"], flight_id="TS101-2025-06-12",
            fare_basis="standard", payment_method_id="credit_card_2314", seat=seat,
        )  # fmt: skip
        assert booking["booking_id"] == "BK1007" and booking["seat"] == seat
        assert booking["price_paid"] == by_basis["standard"]["price"]
        assert "already holds booking BK1007" in await conn.err(
            "book_flight", user_id=ben["user_id"], flight_id="TS101-2025-06-12",
            fare_basis="flex", payment_method_id="credit_card_2314",
        )  # fmt: skip
        s1 = conn.state()
        assert _row(s1, "seats", flight_id="TS101-2025-06-12", seat=seat) == {
            "flight_id": "TS101-2025-06-12", "seat": seat, "cabin": "economy",
            "status": "occupied", "booking_id": "BK1007",
        }  # fmt: skip
        assert _row(s1, "payments", booking_id="BK1007")["amount"] == booking["price_paid"]

        mine = await conn.ok("list_bookings", user_id=ben["user_id"])
        assert [b["booking_id"] for b in mine["bookings"]] == ["BK1002", "BK1007"]
        assert await conn.ok("get_booking", booking_id="bk1007") == booking
        assert "booking 'BK0000' not found" in await conn.err("get_booking", booking_id="BK0000")

        # seats: free seats only, same cabin, not on basic fares
        new_seat = (await conn.ok("get_seat_map", flight_id="TS101-2025-06-12"))["available_seats"][
            0
        ]
        moved = await conn.ok("change_seat", booking_id="BK1007", seat=new_seat)
        assert moved["seat"] == new_seat
        assert f"seat {taken} on flight TS101-2025-06-12 is already taken" in await conn.err(
            "change_seat", booking_id="BK1007", seat=taken
        )
        assert "is in business" in await conn.err("change_seat", booking_id="BK1007", seat="1A")
        assert "basic fares allow no seat change" in await conn.err(
            "change_seat", booking_id="BK1002", seat="10A"
        )
        s2 = conn.state()
        assert _row(s2, "seats", flight_id="TS101-2025-06-12", seat=seat)["status"] == "available"
        assert _row(s2, "seats", flight_id="TS101-2025-06-12", seat=new_seat)["booking_id"] == (
            "BK1007"
        )

        # cancellation follows the fare rules
        cancelled = await conn.ok("cancel_booking", booking_id="BK1007")
        assert cancelled["refund_amount"] == round(booking["price_paid"] - 75.0, 2)
        assert "booking BK1007 is already cancelled" in await conn.err(
            "cancel_booking", booking_id="BK1007"
        )
        assert "non-refundable basic fare" in await conn.err("cancel_booking", booking_id="BK1002")
        assert "has already departed" in await conn.err("cancel_booking", booking_id="BK1004")
        airline_cancelled = await conn.ok("cancel_booking", booking_id="BK1005")
        assert (
            airline_cancelled["refund_amount"]
            == _row(s0, "bookings", booking_id="BK1005")["price_paid"]
        )
        conn.assert_all_called()

        s3 = conn.state()
        assert _row(s3, "bookings", booking_id="BK1007")["status"] == "cancelled"
        assert _rows(s3, "seats", booking_id="BK1007") == []
        refunds = [p for p in s3["tables"]["payments"] if p["kind"] == "refund"]
        assert [(p["booking_id"], p["amount"]) for p in refunds] == [
            ("BK1007", -cancelled["refund_amount"]),
            ("BK1005", -airline_cancelled["refund_amount"]),
        ]


# ---------------------------------------------------------------- calendar and email


async def test_calendar_every_tool_and_its_failures(tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    async with serve_in_process("calendar", workdir, seed=5) as conn:
        s0 = conn.state()
        people = await conn.ok("find_user", query="priya")
        assert [u["user_id"] for u in people["users"]] == ["priya_nair"]
        assert "no user matches 'zed'" in await conn.err("find_user", query="zed")

        day = await conn.ok("list_events", user_id="priya_nair", date="2025-06-02")
        assert [e["event_id"] for e in day["events"]] == ["EV1001", "EV1002", "EV1003"]
        assert day["events"][0]["my_response"] == "organizer"
        review = await conn.ok("get_event", event_id="EV1003")
        assert {a["user_id"]: a["response"] for a in review["attendees"]} == {
            r["user_id"]: r["response"] for r in _rows(s0, "attendees", event_id="EV1003")
        }
        assert "event 'EV0001' not found" in await conn.err("get_event", event_id="EV0001")

        busy = await conn.ok(
            "check_availability", user_id="priya_nair", date="2025-06-02",
            start_time="10:15", end_time="10:45",
        )  # fmt: skip
        assert not busy["available"] and [c["event_id"] for c in busy["conflicts"]] == ["EV1002"]

        # creating: no clashes, nothing in the past, end after start
        assert "conflicting booking: priya_nair is busy" in await conn.err(
            "create_event", organizer_id="priya_nair", title="Budget", date="2025-06-02",
            start_time="10:15", end_time="11:00",
        )  # fmt: skip
        assert "is in the past" in await conn.err(
            "create_event", organizer_id="priya_nair", title="Budget", date="2025-06-01",
            start_time="10:00", end_time="11:00",
        )  # fmt: skip
        assert "end time 10:00 is not after start time 11:00" in await conn.err(
            "create_event", organizer_id="priya_nair", title="Budget", date="2025-06-03",
            start_time="11:00", end_time="10:00",
        )  # fmt: skip
        event = await conn.ok(
            "create_event", organizer_id="priya_nair", title="Budget review", date="2025-06-02",
            start_time="11:00", end_time="11:30", location="Huddle 1",
        )  # fmt: skip
        assert event["event_id"] == "EV1014" and event["attendees"] == []
        assert (await conn.ok(
            "check_availability", user_id="priya_nair", date="2025-06-02",
            start_time="11:15", end_time="11:45",
        ))["conflicts"][0]["event_id"] == "EV1014"  # fmt: skip

        # invitations send messages; replies are checked for clashes
        invited = await conn.ok("invite_attendee", event_id="EV1014", user_id="marco_bianchi")
        assert invited["attendees"] == [
            {"user_id": "marco_bianchi", "name": "Marco Bianchi", "response": "pending"}
        ]
        assert "already invited" in await conn.err(
            "invite_attendee", event_id="EV1014", user_id="marco_bianchi"
        )
        assert "event EV1012 is cancelled" in await conn.err(
            "invite_attendee", event_id="EV1012", user_id="marco_bianchi"
        )
        inbox = await conn.ok("list_messages", user_id="marco_bianchi", unread_only=True)
        invitation = inbox["messages"][0]
        assert invitation["subject"] == "Invitation: Budget review"
        assert invitation["from_email"] == "priya.nair@acme.io" and not invitation["read"]
        accepted = await conn.ok(
            "respond_to_invitation", event_id="EV1014", user_id="marco_bianchi", response="accepted"
        )
        assert accepted["attendees"][0]["response"] == "accepted"
        assert "overlaps EV1013 'Focus time' 15:30-17:00" in await conn.err(
            "respond_to_invitation", event_id="EV1009", user_id="yuki_tanaka", response="accepted"
        )
        assert "grace_liu is not invited to event EV1002" in await conn.err(
            "respond_to_invitation", event_id="EV1002", user_id="grace_liu", response="declined"
        )

        # organizer-only changes
        assert "only the organizer (priya_nair) can reschedule EV1014" in await conn.err(
            "reschedule_event", event_id="EV1014", user_id="marco_bianchi", date="2025-06-02",
            start_time="12:00", end_time="12:30",
        )  # fmt: skip
        moved = await conn.ok(
            "reschedule_event", event_id="EV1014", user_id="priya_nair", date="2025-06-02",
            start_time="11:30", end_time="12:00",
        )  # fmt: skip
        assert moved["start_time"] == "11:30" and moved["attendees"][0]["response"] == "pending"
        assert "only the organizer" in await conn.err(
            "cancel_event", event_id="EV1014", user_id="marco_bianchi"
        )
        gone = await conn.ok("cancel_event", event_id="EV1014", user_id="priya_nair")
        assert gone["status"] == "cancelled"
        assert "event EV1014 is already cancelled" in await conn.err(
            "cancel_event", event_id="EV1014", user_id="priya_nair"
        )
        day = await conn.ok("list_events", user_id="priya_nair", date="2025-06-02")
        assert "EV1014" not in [e["event_id"] for e in day["events"]]

        # email
        sent = await conn.ok(
            "send_message", user_id="priya_nair", to_email="hannah.schmidt@acme.io",
            subject="Design review", body="I'll be there at 2pm.",
        )  # fmt: skip
        assert "no mailbox for 'nobody@acme.io'" in await conn.err(
            "send_message", user_id="priya_nair", to_email="nobody@acme.io", subject="x", body="y"
        )
        outbox = await conn.ok("list_messages", user_id="priya_nair", folder="sent")
        assert outbox["messages"][0]["message_id"] == sent["message_id"]
        full = await conn.ok("read_message", message_id=sent["message_id"])
        assert (
            full["body"] == "I'll be there at 2pm." and full["to_email"] == "hannah.schmidt@acme.io"
        )
        assert "message 'M0' not found" in await conn.err("read_message", message_id="M0")
        conn.assert_all_called()

        s1 = conn.state()
        marco_mail = [m["subject"] for m in _rows(s1, "messages", recipient_id="marco_bianchi")]
        assert marco_mail[-3:] == [
            "Invitation: Budget review",
            "Rescheduled: Budget review",
            "Cancelled: Budget review",
        ]
        assert _row(s1, "events", event_id="EV1014")["status"] == "cancelled"
        assert len(s1["tables"]["messages"]) == len(s0["tables"]["messages"]) + 4
        assert all("sent_at" not in m for m in s1["tables"]["messages"])


# ---------------------------------------------------------------- code interpreter


FIXED_LOW_STOCK = '    return sorted(i["sku"] for i in items if i["qty"] <= threshold)\n'


@pytest.mark.slow
async def test_code_every_tool_and_its_failures(tmp_path: Path) -> None:
    workdir = _workdir(tmp_path)
    async with serve_in_process("code", workdir, seed=2) as conn:
        s0 = conn.state()
        listing = await conn.ok("list_files")
        paths = [f["path"] for f in listing["files"]]
        assert paths == ["README.md", "data/sales.csv", "data/stock.csv", "inventory.py",
                         "tests/test_inventory.py"]  # fmt: skip
        assert paths == [f["path"] for f in s0["tables"]["files"]]
        assert "directory 'nope' not found" in await conn.err("list_files", directory="nope")

        sales = await conn.ok("read_file", path="data/sales.csv")
        assert sales["content"] == _row(s0, "files", path="data/sales.csv")["text"]
        assert "file 'missing.txt' not found" in await conn.err("read_file", path="missing.txt")
        assert "outside the work directory" in await conn.err("read_file", path="../x")
        assert "is reserved" in await conn.err("read_file", path=".trajsynth/code.json")

        report = await conn.ok("run_tests")
        assert not report["passed"] and report["tests_run"] == 4 and report["failures"] == 1
        assert report["failed_tests"] == [
            "test_inventory.InventoryTests.test_low_stock_includes_threshold"
        ]
        assert "test path 'spec' not found" in await conn.err("run_tests", path="spec")

        # fix the bug the tests catch, then the tests pass
        source = (await conn.ok("read_file", path="inventory.py"))["content"]
        buggy = next(line for line in source.splitlines(True) if "< threshold" in line)
        written = await conn.ok("write_file", path="inventory.py",
                                content=source.replace(buggy, FIXED_LOW_STOCK))  # fmt: skip
        assert written == {"path": "inventory.py", "size": written["size"], "created": False}
        assert (await conn.ok("run_tests", path="tests/test_inventory.py"))["passed"]

        # run Python over the seeded data
        rows = list(csv.DictReader(io.StringIO(sales["content"])))
        expected = round(sum(int(r["qty"]) * float(r["unit_price"]) for r in rows), 2)
        ran = await conn.ok(
            "run_python",
            source="import inventory\nprint(round(sum(inventory.revenue_by_sku("
            "inventory.load_sales()).values()), 2))\nopen('total.txt', 'w').write('ok')",
        )
        assert float(ran["stdout"]) == pytest.approx(expected) and ran["exit_code"] == 0
        msg = await conn.err("run_python", source="print('half'); 1/0")
        assert "exit code 1" in msg and "ZeroDivisionError" in msg and "half" in msg
        assert "timed out after 1s" in await conn.err(
            "run_python", source="import time\ntime.sleep(30)", timeout_s=1
        )

        # files
        new = await conn.ok("write_file", path="notes/todo.md", content="- ship it\n")
        assert new == {"path": "notes/todo.md", "size": 10, "created": True}
        assert "'notes' is a directory" in await conn.err("write_file", path="notes", content="")
        assert "only files can be deleted" in await conn.err("delete_file", path="notes")
        assert (await conn.ok("delete_file", path="total.txt"))["deleted"]
        assert "file 'total.txt' not found" in await conn.err("delete_file", path="total.txt")
        conn.assert_all_called()

        s1 = conn.state()
        assert [f["path"] for f in s1["tables"]["files"]] == [
            "README.md", "data/sales.csv", "data/stock.csv", "inventory.py", "notes/todo.md",
            "tests/test_inventory.py",
        ]  # fmt: skip
        assert FIXED_LOW_STOCK in _row(s1, "files", path="inventory.py")["text"]
        assert s1["state_hash"] != s0["state_hash"]
    assert not list(workdir.rglob("__pycache__"))


# ---------------------------------------------------------------- inside a real container


@pytest.mark.docker
async def test_shop_server_runs_inside_a_docker_sandbox(tmp_path: Path) -> None:
    from trajsynth.sandboxes import open_sandbox
    from trajsynth.schemas import SandboxKind, SandboxLimits

    expected_initial = dump_state("shop", tmp_path / "host", init=True, seed=4)
    with open_sandbox(SandboxKind.DOCKER, SandboxLimits()) as sandbox:
        state_argv = [sandbox.python, "-m", "trajsynth.mcp_servers.servers._state", "shop"]
        init = sandbox.exec([*state_argv, "--init", "--seed", "4"], timeout=120)
        assert init.exit_code == 0, init.stderr
        assert json.loads(init.stdout) == expected_initial

        argv = sandbox.stdio_command(
            [sandbox.python, "-m", SPECS["shop"].module], env={"TRAJSYNTH_SEED": "4"}
        )
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        with (tmp_path / "docker-server.log").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, read_timeout_seconds=120) as session,
            ):
                await session.initialize()
                tools = (await session.list_tools()).tools
                assert {t.name for t in tools} >= READS["shop"]
                await session.call_tool(
                    "add_to_cart", {"user_id": "noah_patel_2231", "product_id": "P107"}
                )
                order = await session.call_tool(
                    "place_order",
                    {"user_id": "noah_patel_2231", "payment_method_id": "paypal_2231"},
                )
                assert not order.is_error, _text(order)
                assert order.structured_content is not None
                assert order.structured_content["order_id"] == "#W1010"
                failed = await session.call_tool(
                    "cancel_order", {"order_id": "#W1001", "reason": "other"}
                )
                assert failed.is_error and "order #W1001 is delivered" in _text(failed)

        after = sandbox.exec(state_argv, timeout=120)
        assert after.exit_code == 0, after.stderr
        state = json.loads(after.stdout)
        assert state["state_hash"] != expected_initial["state_hash"]
        assert _row(state, "orders", order_id="#W1010")["status"] == "pending"
        assert [r["product_id"] for r in _rows(state, "order_items", order_id="#W1010")] == [
            "P104", "P107", "P111",
        ]  # fmt: skip
