"""What the shop cluster is: its domain, its description, the dependency edges it states
and the facts its tasks' words use. Its ``trajsynth.clusters`` entry point names ``CLUSTER``."""

from __future__ import annotations

from trajsynth.schemas import BundledCluster, DeclaredEdge, Domain, DomainFacts, Precondition

__all__ = ["CLUSTER"]

CLUSTER = BundledCluster(
    cluster_id="shop",
    domain=Domain.RETAIL,
    description=(
        "An online shop: find a customer, search the catalogue, fill a cart, place orders with a "
        "card, PayPal or gift card, cancel pending orders, return delivered items, see refunds."
    ),
    module=__name__.rpartition(".")[0],  # this folder's package
    declared_edges=[
        DeclaredEdge(
            source="find_user_by_email",
            target="place_order",
            out_field="default_payment_method_id",
            in_param="payment_method_id",
        ),
        DeclaredEdge(
            source="get_user",
            target="place_order",
            out_field="payment_methods[].payment_method_id",
            in_param="payment_method_id",
        ),
        DeclaredEdge(
            source="get_order",
            target="return_items",
            out_field="items[].item_id",
            in_param="item_ids",
        ),
        DeclaredEdge(
            source="search_products",
            target="add_to_cart",
            out_field="products[].product_id",
            in_param="product_id",
        ),
    ],
    # what the tools accept (the server's policy): an order is placed from a non-empty cart
    # with a payment method of its owner; only a product in the cart can be removed; only a
    # pending or processing order can be cancelled; only lines of a delivered order returned
    preconditions=[
        Precondition(tool="place_order", param="user_id", table="cart_items", column="user_id"),
        Precondition(
            tool="place_order",
            param="payment_method_id",
            table="payment_methods",
            column="payment_method_id",
            same={"user_id": "user_id"},
        ),
        Precondition(
            tool="remove_from_cart", param="user_id", table="cart_items", column="user_id"
        ),
        Precondition(
            tool="remove_from_cart",
            param="product_id",
            table="cart_items",
            column="product_id",
            same={"user_id": "user_id"},
        ),
        Precondition(
            tool="cancel_order",
            param="order_id",
            table="orders",
            column="order_id",
            where={"status": ["pending", "processing"]},
        ),
        Precondition(
            tool="return_items",
            param="order_id",
            table="orders",
            column="order_id",
            where={"status": ["delivered"]},
        ),
        Precondition(
            tool="return_items",
            param="item_ids",
            table="order_items",
            column="item_id",
            where={"status": ["ordered"]},
            same={"order_id": "order_id"},
        ),
    ],
    facts=DomainFacts(persona="A shopper at an online store."),
)
