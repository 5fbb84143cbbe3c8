"""The retail database lookups the tools share (environment functions, not tools).

`RetailLookups` finds orders, users, products, items, variants and payment methods with
tau2-bench's error texts, and checks that items named for a change are in an order often enough.
The tools the agent calls are in `gyms.tau2.retail.tools`.
"""

from __future__ import annotations

from gyms.tau2.retail.models import Order, Product, RetailDB, User, Variant
from gyms.tau2.toolkit import Toolkit


class RetailLookups(Toolkit):
    """Reads and checks over `RetailDB` that several retail tools share."""

    db: RetailDB

    def _get_order(self, order_id: str) -> Order:
        if order_id not in self.db.orders:
            raise ValueError("Order not found")
        return self.db.orders[order_id]

    def _get_user(self, user_id: str) -> User:
        if user_id not in self.db.users:
            raise ValueError("User not found")
        return self.db.users[user_id]

    def _get_product(self, product_id: str) -> Product:
        if product_id not in self.db.products:
            raise ValueError("Product not found")
        return self.db.products[product_id]

    def _get_item(self, item_id: str) -> Variant:
        for product in self.db.products.values():
            if item_id in product.variants:
                return product.variants[item_id]
        raise ValueError("Item not found")

    def _get_variant(self, product_id: str, variant_id: str) -> Variant:
        product = self._get_product(product_id)
        if variant_id not in product.variants:
            raise ValueError("Variant not found")
        return product.variants[variant_id]

    def _get_payment_method(self, user_id: str, payment_method_id: str):
        user = self._get_user(user_id)
        if payment_method_id not in user.payment_methods:
            raise ValueError("Payment method not found")
        return user.payment_methods[payment_method_id]

    @staticmethod
    def _check_counts(order: Order, item_ids: list[str], message: str) -> None:
        have = [item.item_id for item in order.items]
        for item_id in item_ids:
            if item_ids.count(item_id) > have.count(item_id):
                raise ValueError(message.format(item_id=item_id))
