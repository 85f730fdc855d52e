"""The shop's state: its SQLite tables and how they are seeded (docs/methods.md §2).

One SQLite file, ``$TRAJSYNTH_WORKDIR/shop.sqlite``, seeded from ``seed.json`` beside this module
perturbed by ``$TRAJSYNTH_SEED`` (stock levels, gift-card balances, which orders are
pending/shipped/delivered).

Imported by ``server.py`` (the tools) and by ``_state --init``, which seeds a work
directory without loading the server (this module imports no ``mcp``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from trajsynth.mcp_servers.servers._backend import (
    Column,
    Store,
    Table,
    money,
)

__all__ = ["STORE"]

ORDER_STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled")

STORE_TABLES = (
    Table(
        "users",
        (
            Column("user_id"),
            Column("name"),
            Column("email"),
            Column("address"),
            Column("default_payment_method_id"),
        ),
        ("user_id",),
    ),
    Table(
        "payment_methods",
        (
            Column("payment_method_id"),
            Column("user_id"),
            Column("kind"),
            Column("label"),
            Column("balance", "REAL", nullable=True),
        ),
        ("payment_method_id",),
    ),
    Table(
        "products",
        (
            Column("product_id"),
            Column("sku"),
            Column("name"),
            Column("category"),
            Column("description"),
            Column("price", "REAL"),
            Column("stock", "INTEGER"),
        ),
        ("product_id",),
    ),
    Table(
        "cart_items",
        (Column("user_id"), Column("product_id"), Column("quantity", "INTEGER")),
        ("user_id", "product_id"),
    ),
    Table(
        "orders",
        (
            Column("order_id"),
            Column("user_id"),
            Column("status"),
            Column("payment_method_id"),
            Column("total", "REAL"),
            Column("shipping_address"),
            Column("placed_at"),
            Column("cancel_reason", nullable=True),
        ),
        ("order_id",),
    ),
    Table(
        "order_items",
        (
            Column("item_id"),
            Column("order_id"),
            Column("product_id"),
            Column("name"),
            Column("quantity", "INTEGER"),
            Column("unit_price", "REAL"),
            Column("status"),
        ),
        ("item_id",),
    ),
    Table(
        "refunds",
        (
            Column("refund_id"),
            Column("order_id"),
            Column("item_ids"),
            Column("amount", "REAL"),
            Column("payment_method_id"),
            Column("reason"),
            Column("created_at"),
        ),
        ("refund_id",),
        volatile=frozenset({"created_at"}),
    ),
)


def _seed(data: dict[str, Any], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Rows from the seed data; the rng moves stock, gift-card balances and order statuses."""
    products = {p["product_id"]: p for p in data["products"]}
    rows: dict[str, list[dict[str, Any]]] = {
        "users": [dict(u) for u in data["users"]],
        "payment_methods": [],
        "products": [],
        "cart_items": [dict(c) for c in data["carts"]],
        "orders": [],
        "order_items": [],
        "refunds": [],
    }
    for pm in data["payment_methods"]:
        pm = dict(pm)
        if pm["balance"] is not None:
            pm["balance"] = money(pm["balance"] * rng.uniform(0.6, 1.4))
        rows["payment_methods"].append(pm)
    for p in data["products"]:
        p = dict(p)
        if p["stock"] > 0:
            p["stock"] = max(0, p["stock"] + rng.randint(-3, 3))
        rows["products"].append(p)
    users = {u["user_id"]: u for u in data["users"]}
    for o in data["orders"]:
        status = rng.choice(o["status_choices"])
        total = 0.0
        for n, item in enumerate(o["items"], start=1):
            product = products[item["product_id"]]
            total += product["price"] * item["quantity"]
            rows["order_items"].append(
                {
                    "item_id": f"I{o['order_id'][2:]}-{n}",
                    "order_id": o["order_id"],
                    "product_id": item["product_id"],
                    "name": product["name"],
                    "quantity": item["quantity"],
                    "unit_price": product["price"],
                    "status": "cancelled" if status == "cancelled" else "ordered",
                }
            )
        rows["orders"].append(
            {
                "order_id": o["order_id"],
                "user_id": o["user_id"],
                "status": status,
                "payment_method_id": o["payment_method_id"],
                "total": money(total),
                "shipping_address": users[o["user_id"]]["address"],
                "placed_at": o["placed_at"],
                "cancel_reason": "ordered by mistake" if status == "cancelled" else None,
            }
        )
    for r in data["refunds"]:
        r = dict(r)
        r["item_ids"] = json.dumps(sorted(r["item_ids"]))
        rows["refunds"].append(r)
    return rows


STORE = Store("shop", STORE_TABLES, _seed, Path(__file__).with_name("seed.json"))
