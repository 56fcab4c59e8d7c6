from billing.models import Invoice
from outbox.api import Reader, Received, subscribe


class Placed(Reader):
    order_id: int
    item: str


@subscribe("billing", "order.placed", reader=Placed)
def on_order_placed(message: Received[Placed]) -> None:
    if message.payload.item == "poison":
        raise ValueError("billing cannot price a poison order")
    Invoice.objects.create(order_id=message.payload.order_id)
