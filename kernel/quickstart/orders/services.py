from orders.events import OrderPlaced
from orders.models import Order
from outbox.api import atomic, publish


def place_order(*, item: str) -> Order:
    with atomic("orders"):
        order = Order.objects.create(item=item)
        publish(OrderPlaced(order_id=order.pk, item=item), stream=f"order:{order.pk}")
        return order
