from outbox.api import Event


class OrderPlaced(Event):
    """An order was placed."""

    type = "order.placed"
    version = 1
    order_id: int
    item: str
