"""Adding a bundled cluster is one folder and one entry point (README "Where a change goes").

A tiny bank cluster is written as a folder (``server.py``, ``seed.json``, ``cluster.py``,
``__init__.py``, ``__main__.py``) beside the bundled ones (the servers package's search path
is extended to ``tmp_path``, as if the folder were in ``src/``), one entry point names its
``CLUSTER``, and nothing else changes: the registry lists it, builds it from its own server's
tools, the state dump seeds it from its own ``seed.json``, and the planner plans a task from
it whose words use the folder's persona.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.inprocess_env import InProcessEnvironment

import trajsynth.mcp_servers.servers as servers_package
from trajsynth.mcp_servers import registry
from trajsynth.mcp_servers.servers._state import dump_state
from trajsynth.planning.planner import Planner, plan_blueprint
from trajsynth.schemas import (
    Blueprint,
    Cell,
    Difficulty,
    Domain,
    EdgeOrigin,
    InputError,
    PathShape,
    ReasoningMode,
    ServerKind,
    ToolAccess,
)

NAME = "toybank"
PERSONA = "A pensioner checking on their savings."

SERVER = '''
"""A toy bank: accounts and deposits."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from trajsynth.mcp_servers.servers._backend import (
    Column, Store, Table, fail, money, one, read_tool, write_tool,
)

TABLES = (
    Table(
        "accounts",
        (Column("account_id"), Column("owner"), Column("balance", "REAL")),
        ("account_id",),
    ),
)


def _seed(data: dict[str, Any], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    rows = [{**a, "balance": money(a["balance"] + rng.randint(0, 50))} for a in data["accounts"]]
    return {"accounts": rows}


STORE = Store("toybank", TABLES, _seed, Path(__file__).with_name("seed.json"))
server = MCPServer(name="toybank")


class Account(BaseModel):
    account_id: str = Field(description="Id of the account")
    owner: str = Field(description="Full name of the owner")
    balance: float = Field(description="Balance in EUR")


class Accounts(BaseModel):
    accounts: list[Account] = Field(description="The owner's accounts")


@server.tool(annotations=read_tool("List accounts"))
def list_accounts(owner: Annotated[str, Field(description="Owner's full name")]) -> Accounts:
    """List the accounts of an owner."""
    with STORE.tx() as conn:
        rows = conn.execute(
            "SELECT * FROM accounts WHERE owner = ? ORDER BY account_id", (owner,)
        ).fetchall()
    if not rows:
        raise fail(f"no accounts of {owner!r}")
    return Accounts(accounts=[Account(**dict(r)) for r in rows])


@server.tool(annotations=write_tool("Deposit money"))
def deposit(
    account_id: Annotated[str, Field(description="Id of the account")],
    amount: Annotated[float, Field(description="Amount in EUR, more than 0")],
) -> Account:
    """Deposit money into an account."""
    if amount <= 0:
        raise fail("the amount must be more than 0")
    with STORE.tx() as conn:
        row = one(conn, "SELECT * FROM accounts WHERE account_id = ?", (account_id,))
        if row is None:
            raise fail(f"no account {account_id!r}")
        balance = money(row["balance"] + amount)
        conn.execute(
            "UPDATE accounts SET balance = ? WHERE account_id = ?", (balance, account_id)
        )
        return Account(account_id=account_id, owner=row["owner"], balance=balance)


def main() -> None:
    STORE.ensure()
    server.run("stdio")
'''

CLUSTER = f"""
from trajsynth.schemas import BundledCluster, DeclaredEdge, Domain, DomainFacts

CLUSTER = BundledCluster(
    cluster_id="toybank",
    domain=Domain.FINANCE,
    description="A toy bank: list an owner's accounts and deposit money.",
    module=__name__.rpartition(".")[0],
    declared_edges=[
        DeclaredEdge(
            source="list_accounts",
            target="deposit",
            out_field="accounts[].account_id",
            in_param="account_id",
        ),
    ],
    facts=DomainFacts(persona={PERSONA!r}),
)
"""

SEED = {
    "now": "2025-03-01T09:00:00Z",
    "accounts": [
        {"account_id": "AC1", "owner": "Rosa Diaz", "balance": 120.0},
        {"account_id": "AC2", "owner": "Rosa Diaz", "balance": 15.5},
        {"account_id": "AC3", "owner": "Tom Berg", "balance": 980.0},
    ],
}


@pytest.fixture
def toybank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The folder, beside the bundled ones, and its one entry point next to trajsynth's."""
    folder = tmp_path / "pkgs" / NAME
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""A toy bank cluster."""\n')
    (folder / "__main__.py").write_text(
        f"from {servers_package.__name__}.{NAME}.server import main\n\nmain()\n"
    )
    (folder / "server.py").write_text(SERVER)
    (folder / "cluster.py").write_text(CLUSTER)
    (folder / "seed.json").write_text(json.dumps(SEED))
    monkeypatch.setattr(
        servers_package, "__path__", [*servers_package.__path__, str(folder.parent)]
    )

    real = importlib.metadata.entry_points
    ours = importlib.metadata.EntryPoint(
        NAME, f"{servers_package.__name__}.{NAME}.cluster:CLUSTER", registry.ENTRY_POINT_GROUP
    )

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [*real(group=group), ours] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_BUILT", {})
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    yield
    for module in [m for m in sys.modules if m.startswith(f"{servers_package.__name__}.{NAME}")]:
        del sys.modules[module]


@pytest.mark.usefixtures("toybank")
def test_a_folder_and_an_entry_point_make_a_cluster(tmp_path: Path) -> None:
    assert NAME in registry.cluster_names(clusters_dir=tmp_path)
    assert {"calendar", "code", "shop", "travel"} <= set(
        registry.cluster_names(clusters_dir=tmp_path)
    )
    c = registry.get_cluster(NAME, clusters_dir=tmp_path)
    assert (c.domain, c.source, c.server.kind) == (Domain.FINANCE, "bundled", ServerKind.BUNDLED)
    assert c.server.module == f"{servers_package.__name__}.{NAME}"
    assert c.facts is not None and c.facts.persona == PERSONA
    assert {t.name: t.access for t in c.tools} == {
        "list_accounts": ToolAccess.READ,
        "deposit": ToolAccess.WRITE,
    }
    declared = [e for e in c.edges if e.origin is EdgeOrigin.DECLARED]
    assert [(e.source, e.target, e.in_param) for e in declared] == [
        ("list_accounts", "deposit", "account_id")
    ]
    assert NAME in [x.cluster_id for x in registry.list_clusters(clusters_dir=tmp_path)]


@pytest.mark.usefixtures("toybank")
def test_its_state_is_seeded_from_its_own_seed_file(tmp_path: Path) -> None:
    state = dump_state(NAME, tmp_path / "work", init=True, seed=3)
    rng = random.Random(3)
    expected = [money + rng.randint(0, 50) for money in (120.0, 15.5, 980.0)]
    assert [r["balance"] for r in state["tables"]["accounts"]] == expected
    meta = {r["key"]: r["value"] for r in state["tables"]["meta"]}
    assert (meta["cluster"], meta["now"]) == (NAME, SEED["now"])


@pytest.mark.usefixtures("toybank")
async def test_the_planner_plans_from_it_with_its_persona(tmp_path: Path) -> None:
    c = registry.get_cluster(NAME, clusters_dir=tmp_path)
    cell = Cell(
        cluster_id=NAME,
        path_shape=PathShape.SINGLE,
        target_mode=ReasoningMode.DIRECT_EXECUTE,
        difficulty=Difficulty.EASY,
    )
    planned = []
    for seed in range(6):
        outcome = await plan_blueprint(
            Planner(use_llm=False),
            None,
            lambda seed=seed: InProcessEnvironment(NAME, tmp_path, seed=seed),
            c,
            cell,
            seed,
        )
        if isinstance(outcome, Blueprint):
            planned.append(outcome)
    assert planned, "no task could be planned from the toy bank"
    for bp in planned:
        assert bp.cluster_id == NAME and bp.domain == "finance"
        assert bp.persona == PERSONA  # from the folder's cluster.py, not a table in agents/
        assert {s.tool for s in bp.tool_path} <= {"list_accounts", "deposit"}
        assert bp.gold_run.final_state.state_hash


def test_an_install_without_the_entry_points_says_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled clusters exist only as entry points: a stale install is told to reinstall."""
    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda *, group: [])
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_BUILT", {})
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    with pytest.raises(InputError, match=r"known clusters: none \(.*pip install -e \."):
        registry.get_cluster("shop", clusters_dir=tmp_path)
