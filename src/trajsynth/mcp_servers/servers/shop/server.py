"""Retail shop: catalogue, cart, orders, returns and refunds, as an MCP server (docs/methods.md §2).

This module is the MCP server and its tools; their state (``$TRAJSYNTH_WORKDIR/shop.sqlite``, its
tables and seeding) is ``state.py``'s ``STORE``. Policy the tools enforce, as a real shop would:
only pending or processing orders can be cancelled; only items of delivered orders can be returned,
once; a gift card cannot pay more than its balance; stock cannot go negative; refunds go to a
payment method of the order's owner.

Run: ``python -m trajsynth.mcp_servers.servers.shop`` (stdio).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from trajsynth.mcp_servers.servers._backend import (
    fail,
    from_row,
    insert,
    money,
    next_id,
    one,
    one_or_fail,
    read_tool,
    serve_state,
    write_tool,
)
from trajsynth.mcp_servers.servers._stdio import serve_stdio
from trajsynth.mcp_servers.servers.shop.state import STORE

__all__ = ["STORE", "main", "server"]

server = MCPServer(
    name="shop",
    instructions="An online shop's customer-service tools. Amounts are in USD.",
)
serve_state(server, STORE)

# ---------------------------------------------------------------- output models


class PaymentMethod(BaseModel):
    payment_method_id: str = Field(description="Id of the payment method")
    kind: Literal["credit_card", "gift_card", "paypal"] = Field(description="Kind of method")
    label: str = Field(description="Human-readable label, e.g. 'Visa ending 4242'")
    balance: float | None = Field(description="Remaining balance of a gift card, else null")


class UserSummary(BaseModel):
    user_id: str = Field(description="Id of the customer account")
    name: str = Field(description="Customer's full name")
    email: str = Field(description="Customer's email address")
    default_payment_method_id: str = Field(description="Id of the default payment method")


class UserDetails(UserSummary):
    address: str = Field(description="Shipping address")
    payment_methods: list[PaymentMethod] = Field(description="Payment methods on file")


class ProductSummary(BaseModel):
    product_id: str = Field(description="Id of the product")
    sku: str = Field(description="Stock-keeping unit code")
    name: str = Field(description="Product name")
    category: str = Field(description="Catalogue category")
    price: float = Field(description="Unit price in USD")
    in_stock: bool = Field(description="Whether at least one unit is available")


class ProductSearch(BaseModel):
    query: str = Field(description="The search text")
    products: list[ProductSummary] = Field(description="Matching products")


class Product(ProductSummary):
    description: str = Field(description="Product description")
    stock: int = Field(description="Units available")


class CartLine(BaseModel):
    product_id: str = Field(description="Id of the product")
    name: str = Field(description="Product name")
    quantity: int = Field(description="Units in the cart")
    unit_price: float = Field(description="Unit price in USD")
    line_total: float = Field(description="quantity x unit_price")


class Cart(BaseModel):
    user_id: str = Field(description="Owner of the cart")
    items: list[CartLine] = Field(description="Lines in the cart")
    total: float = Field(description="Cart total in USD")


class OrderItem(BaseModel):
    item_id: str = Field(description="Id of the order line (used for returns)")
    product_id: str = Field(description="Id of the product")
    name: str = Field(description="Product name")
    quantity: int = Field(description="Units ordered")
    unit_price: float = Field(description="Unit price paid in USD")
    status: Literal["ordered", "returned", "cancelled"] = Field(description="Line status")


class OrderSummary(BaseModel):
    order_id: str = Field(description="Id of the order, e.g. '#W1001'")
    status: str = Field(description="pending, processing, shipped, delivered or cancelled")
    total: float = Field(description="Order total in USD")
    placed_at: str = Field(description="When the order was placed (ISO 8601)")
    item_count: int = Field(description="Number of lines in the order")


class OrderList(BaseModel):
    user_id: str = Field(description="Owner of the orders")
    orders: list[OrderSummary] = Field(description="Orders, newest first")


class Order(BaseModel):
    order_id: str = Field(description="Id of the order, e.g. '#W1001'")
    user_id: str = Field(description="Owner of the order")
    status: str = Field(description="pending, processing, shipped, delivered or cancelled")
    payment_method_id: str = Field(description="Payment method charged for the order")
    total: float = Field(description="Order total in USD")
    shipping_address: str = Field(description="Where the order ships")
    placed_at: str = Field(description="When the order was placed (ISO 8601)")
    items: list[OrderItem] = Field(description="Order lines")


class Refund(BaseModel):
    refund_id: str = Field(description="Id of the refund")
    order_id: str = Field(description="Order the refund belongs to")
    item_ids: list[str] = Field(description="Order lines refunded")
    amount: float = Field(description="Amount refunded in USD")
    payment_method_id: str = Field(description="Payment method the money went back to")
    reason: str = Field(description="Why the refund was issued")


class RefundList(BaseModel):
    refunds: list[Refund] = Field(description="Refunds, oldest first")


# ---------------------------------------------------------------- helpers

UserId = Annotated[str, Field(description="Customer account id, e.g. 'mia_kim_1042'")]
OrderId = Annotated[str, Field(description="Order id, e.g. '#W1001'")]
ProductId = Annotated[str, Field(description="Product id (e.g. 'P100') or its SKU")]
PaymentMethodId = Annotated[str, Field(description="Payment method id, e.g. 'credit_card_4242'")]


def _norm_order_id(order_id: str) -> str:
    order_id = order_id.strip()
    return order_id if order_id.startswith("#") else f"#{order_id}"


def _user(conn: sqlite3.Connection, user_id: str) -> sqlite3.Row:
    return one_or_fail(
        conn, "SELECT * FROM users WHERE user_id = ?", (user_id,), f"user '{user_id}' not found"
    )


def _product(conn: sqlite3.Connection, product_id: str) -> sqlite3.Row:
    key = product_id.strip()
    return one_or_fail(
        conn,
        "SELECT * FROM products WHERE product_id = ? OR sku = ?",
        (key, key.upper()),
        f"product '{product_id}' not found",
    )


def _order_row(conn: sqlite3.Connection, order_id: str) -> sqlite3.Row:
    return one_or_fail(
        conn,
        "SELECT * FROM orders WHERE order_id = ?",
        (_norm_order_id(order_id),),
        f"order {_norm_order_id(order_id)} not found",
    )


def _payment_method(conn: sqlite3.Connection, pm_id: str, user_id: str) -> sqlite3.Row:
    row = one_or_fail(
        conn,
        "SELECT * FROM payment_methods WHERE payment_method_id = ?",
        (pm_id,),
        f"payment method '{pm_id}' not found",
    )
    if row["user_id"] != user_id:
        raise fail(f"payment method '{pm_id}' does not belong to user '{user_id}'")
    return row


def _order(conn: sqlite3.Connection, order_id: str) -> Order:
    row = _order_row(conn, order_id)
    items = conn.execute(
        "SELECT * FROM order_items WHERE order_id = ? ORDER BY item_id", (row["order_id"],)
    ).fetchall()
    return from_row(Order, row, items=[from_row(OrderItem, i) for i in items])


def _cart(conn: sqlite3.Connection, user_id: str) -> Cart:
    rows = conn.execute(
        "SELECT c.product_id, c.quantity, p.name, p.price FROM cart_items c "
        "JOIN products p ON p.product_id = c.product_id WHERE c.user_id = ? ORDER BY c.product_id",
        (user_id,),
    ).fetchall()
    lines = [
        CartLine(
            product_id=r["product_id"],
            name=r["name"],
            quantity=r["quantity"],
            unit_price=r["price"],
            line_total=money(r["price"] * r["quantity"]),
        )
        for r in rows
    ]
    return Cart(user_id=user_id, items=lines, total=money(sum(x.line_total for x in lines)))


def _refund(row: sqlite3.Row) -> Refund:
    return from_row(Refund, row, item_ids=json.loads(row["item_ids"]))


def _credit(conn: sqlite3.Connection, pm: sqlite3.Row, amount: float) -> None:
    if pm["kind"] == "gift_card":
        conn.execute(
            "UPDATE payment_methods SET balance = ? WHERE payment_method_id = ?",
            (money(pm["balance"] + amount), pm["payment_method_id"]),
        )


# ---------------------------------------------------------------- tools


@server.tool(annotations=read_tool("Find customer by email"))
async def find_user_by_email(
    email: Annotated[str, Field(description="The customer's email address")],
) -> UserSummary:
    """Look up a customer account by email address."""
    with STORE.tx() as conn:
        row = one_or_fail(
            conn,
            "SELECT * FROM users WHERE lower(email) = ?",
            (email.strip().lower(),),
            f"no user with email '{email}'",
        )
        return from_row(UserSummary, row)


@server.tool(annotations=read_tool("Get customer details"))
async def get_user(user_id: UserId) -> UserDetails:
    """Get a customer's details: address and payment methods (with gift-card balances)."""
    with STORE.tx() as conn:
        row = _user(conn, user_id)
        pms = conn.execute(
            "SELECT * FROM payment_methods WHERE user_id = ? ORDER BY payment_method_id",
            (user_id,),
        ).fetchall()
        return from_row(UserDetails, row, payment_methods=[from_row(PaymentMethod, p) for p in pms])


@server.tool(annotations=read_tool("Search the catalogue"))
async def search_products(
    query: Annotated[str, Field(description="Words to look for in product names, e.g. 'mug'")],
    category: Annotated[
        str | None,
        Field(description="Only this category: kitchen, electronics, outdoor or fitness"),
    ] = None,
    max_price: Annotated[float | None, Field(description="Only products up to this price")] = None,
) -> ProductSearch:
    """Search the catalogue by name or description; every word of the query must match."""
    words = [w for w in query.lower().split() if w]
    with STORE.tx() as conn:
        rows = conn.execute("SELECT * FROM products ORDER BY product_id").fetchall()
    hits = []
    for r in rows:
        text = f"{r['name']} {r['description']} {r['sku']} {r['category']}".lower()
        if not all(w in text for w in words):
            continue
        if category is not None and r["category"] != category.strip().lower():
            continue
        if max_price is not None and r["price"] > max_price:
            continue
        hits.append(from_row(ProductSummary, r, in_stock=r["stock"] > 0))
    return ProductSearch(query=query, products=hits)


@server.tool(annotations=read_tool("Get product details"))
async def get_product(product_id: ProductId) -> Product:
    """Get one product's details, including how many units are in stock."""
    with STORE.tx() as conn:
        r = _product(conn, product_id)
        return from_row(Product, r, in_stock=r["stock"] > 0)


@server.tool(annotations=write_tool("Add to cart"))
async def add_to_cart(
    user_id: UserId,
    product_id: ProductId,
    quantity: Annotated[int, Field(description="Units to add (at least 1)")] = 1,
) -> Cart:
    """Add units of a product to the customer's cart; returns the updated cart."""
    if quantity < 1:
        raise fail(f"quantity must be at least 1, got {quantity}")
    with STORE.tx() as conn:
        _user(conn, user_id)
        p = _product(conn, product_id)
        row = one(
            conn,
            "SELECT quantity FROM cart_items WHERE user_id = ? AND product_id = ?",
            (user_id, p["product_id"]),
        )
        have = row["quantity"] if row else 0
        if have + quantity > p["stock"]:
            raise fail(
                f"insufficient stock for {p['name']} ({p['product_id']}): "
                f"{p['stock']} available, {have + quantity} requested"
            )
        conn.execute(
            "INSERT INTO cart_items (user_id, product_id, quantity) VALUES (?, ?, ?) "
            "ON CONFLICT (user_id, product_id) "
            "DO UPDATE SET quantity = quantity + excluded.quantity",
            (user_id, p["product_id"], quantity),
        )
        return _cart(conn, user_id)


@server.tool(annotations=write_tool("Remove from cart", destructive=True, idempotent=True))
async def remove_from_cart(user_id: UserId, product_id: ProductId) -> Cart:
    """Remove a product from the customer's cart; returns the updated cart."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        p = _product(conn, product_id)
        cur = conn.execute(
            "DELETE FROM cart_items WHERE user_id = ? AND product_id = ?",
            (user_id, p["product_id"]),
        )
        if cur.rowcount == 0:
            raise fail(f"{p['name']} ({p['product_id']}) is not in the cart of '{user_id}'")
        return _cart(conn, user_id)


@server.tool(annotations=read_tool("View cart"))
async def view_cart(user_id: UserId) -> Cart:
    """Show what is in the customer's cart and its total."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        return _cart(conn, user_id)


@server.tool(annotations=write_tool("Place order"))
async def place_order(user_id: UserId, payment_method_id: PaymentMethodId) -> Order:
    """Check out the customer's cart: charge the payment method and create a pending order."""
    with STORE.tx() as conn:
        user = _user(conn, user_id)
        pm = _payment_method(conn, payment_method_id, user_id)
        cart = _cart(conn, user_id)
        if not cart.items:
            raise fail(f"the cart of '{user_id}' is empty; add products before placing an order")
        for line in cart.items:
            stock = one(conn, "SELECT stock FROM products WHERE product_id = ?", (line.product_id,))
            assert stock is not None
            if line.quantity > stock["stock"]:
                raise fail(
                    f"insufficient stock for {line.name} ({line.product_id}): "
                    f"{stock['stock']} available, {line.quantity} in the cart"
                )
        if pm["kind"] == "gift_card":
            if pm["balance"] < cart.total:
                raise fail(
                    f"insufficient funds: gift card {payment_method_id} has a balance of "
                    f"{pm['balance']:.2f}, the order total is {cart.total:.2f}"
                )
            conn.execute(
                "UPDATE payment_methods SET balance = ? WHERE payment_method_id = ?",
                (money(pm["balance"] - cart.total), payment_method_id),
            )
        order_id = next_id(conn, "orders", "order_id", "#W", 1001)
        insert(
            conn,
            "orders",
            {
                "order_id": order_id,
                "user_id": user_id,
                "status": "pending",
                "payment_method_id": payment_method_id,
                "total": cart.total,
                "shipping_address": user["address"],
                "placed_at": STORE.now(conn),
                "cancel_reason": None,
            },
        )
        for n, line in enumerate(cart.items, start=1):
            insert(
                conn,
                "order_items",
                {
                    "item_id": f"I{order_id[2:]}-{n}",
                    "order_id": order_id,
                    "product_id": line.product_id,
                    "name": line.name,
                    "quantity": line.quantity,
                    "unit_price": line.unit_price,
                    "status": "ordered",
                },
            )
            conn.execute(
                "UPDATE products SET stock = stock - ? WHERE product_id = ?",
                (line.quantity, line.product_id),
            )
        conn.execute("DELETE FROM cart_items WHERE user_id = ?", (user_id,))
        return _order(conn, order_id)


@server.tool(annotations=read_tool("List orders"))
async def list_orders(
    user_id: UserId,
    status: Annotated[
        Literal["pending", "processing", "shipped", "delivered", "cancelled"] | None,
        Field(description="Only orders with this status"),
    ] = None,
) -> OrderList:
    """List a customer's orders, newest first."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        rows = conn.execute(
            "SELECT o.*, (SELECT count(*) FROM order_items i WHERE i.order_id = o.order_id) AS n "
            "FROM orders o WHERE user_id = ? ORDER BY placed_at DESC, order_id DESC",
            (user_id,),
        ).fetchall()
    return OrderList(
        user_id=user_id,
        orders=[
            OrderSummary(
                order_id=r["order_id"],
                status=r["status"],
                total=r["total"],
                placed_at=r["placed_at"],
                item_count=r["n"],
            )
            for r in rows
            if status is None or r["status"] == status
        ],
    )


@server.tool(annotations=read_tool("Get order details"))
async def get_order(order_id: OrderId) -> Order:
    """Get an order with its lines, status, total and payment method."""
    with STORE.tx() as conn:
        return _order(conn, order_id)


@server.tool(annotations=write_tool("Cancel order", destructive=True))
async def cancel_order(
    order_id: OrderId,
    reason: Annotated[
        Literal["no longer needed", "ordered by mistake", "found a better price", "other"],
        Field(description="Why the customer cancels"),
    ],
) -> Order:
    """Cancel a pending or processing order: restock it and refund the full total."""
    with STORE.tx() as conn:
        row = _order_row(conn, order_id)
        oid = row["order_id"]
        if row["status"] not in ("pending", "processing"):
            raise fail(
                f"order {oid} is {row['status']}; only pending or processing orders can be "
                "cancelled"
            )
        items = conn.execute("SELECT * FROM order_items WHERE order_id = ?", (oid,)).fetchall()
        for i in items:
            conn.execute(
                "UPDATE products SET stock = stock + ? WHERE product_id = ?",
                (i["quantity"], i["product_id"]),
            )
        conn.execute("UPDATE order_items SET status = 'cancelled' WHERE order_id = ?", (oid,))
        conn.execute(
            "UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?",
            (reason, oid),
        )
        pm = one(
            conn,
            "SELECT * FROM payment_methods WHERE payment_method_id = ?",
            (row["payment_method_id"],),
        )
        assert pm is not None
        _credit(conn, pm, row["total"])
        insert(
            conn,
            "refunds",
            {
                "refund_id": next_id(conn, "refunds", "refund_id", "R", 1001),
                "order_id": oid,
                "item_ids": json.dumps(sorted(i["item_id"] for i in items)),
                "amount": row["total"],
                "payment_method_id": row["payment_method_id"],
                "reason": f"order cancelled: {reason}",
                "created_at": STORE.now(conn),
            },
        )
        return _order(conn, oid)


@server.tool(annotations=write_tool("Return items"))
async def return_items(
    order_id: OrderId,
    item_ids: Annotated[
        list[str], Field(description="Ids of the order lines to return, e.g. ['I1001-1']")
    ],
    payment_method_id: Annotated[
        str | None,
        Field(
            description="Where to refund (a method of the order's owner); default: the one charged"
        ),
    ] = None,
) -> Refund:
    """Return lines of a delivered order; the refund goes to the chosen payment method."""
    if not item_ids:
        raise fail("item_ids is empty; name at least one order line to return")
    with STORE.tx() as conn:
        row = _order_row(conn, order_id)
        oid = row["order_id"]
        if row["status"] != "delivered":
            raise fail(f"order {oid} is {row['status']}; only delivered orders can be returned")
        target = payment_method_id or row["payment_method_id"]
        pm = _payment_method(conn, target, row["user_id"])
        amount = 0.0
        for item_id in sorted(set(item_ids)):
            item = one(
                conn,
                "SELECT * FROM order_items WHERE item_id = ? AND order_id = ?",
                (item_id, oid),
            )
            if item is None:
                raise fail(f"item '{item_id}' is not part of order {oid}")
            if item["status"] == "returned":
                raise fail(f"item '{item_id}' of order {oid} has already been returned")
            amount += item["unit_price"] * item["quantity"]
            conn.execute("UPDATE order_items SET status = 'returned' WHERE item_id = ?", (item_id,))
            conn.execute(
                "UPDATE products SET stock = stock + ? WHERE product_id = ?",
                (item["quantity"], item["product_id"]),
            )
        _credit(conn, pm, money(amount))
        refund_id = next_id(conn, "refunds", "refund_id", "R", 1001)
        insert(
            conn,
            "refunds",
            {
                "refund_id": refund_id,
                "order_id": oid,
                "item_ids": json.dumps(sorted(set(item_ids))),
                "amount": money(amount),
                "payment_method_id": target,
                "reason": "items returned",
                "created_at": STORE.now(conn),
            },
        )
        refund = one(conn, "SELECT * FROM refunds WHERE refund_id = ?", (refund_id,))
        assert refund is not None
        return _refund(refund)


@server.tool(annotations=read_tool("List refunds"))
async def get_refunds(
    user_id: Annotated[str | None, Field(description="Refunds of this customer's orders")] = None,
    order_id: Annotated[str | None, Field(description="Refunds of this order")] = None,
) -> RefundList:
    """List refunds of one order or of all of a customer's orders."""
    if user_id is None and order_id is None:
        raise fail("give a user_id or an order_id")
    with STORE.tx() as conn:
        if order_id is not None:
            oid = _order_row(conn, order_id)["order_id"]
            rows = conn.execute(
                "SELECT * FROM refunds WHERE order_id = ? ORDER BY refund_id", (oid,)
            ).fetchall()
        else:
            assert user_id is not None
            _user(conn, user_id)
            rows = conn.execute(
                "SELECT r.* FROM refunds r JOIN orders o ON o.order_id = r.order_id "
                "WHERE o.user_id = ? ORDER BY r.refund_id",
                (user_id,),
            ).fetchall()
        return RefundList(refunds=[_refund(r) for r in rows])


def main() -> None:
    """Seed the state if needed, then serve over stdio."""
    STORE.ensure()
    serve_stdio(server)


if __name__ == "__main__":
    main()
