from uuid import UUID

from outbox.api import Reader, Received, subscribe
from tests.guide.receipts import services


class Completed(Reader):
    """Just the field this context needs of `delivery.completed`."""

    delivery_id: UUID


@subscribe("receipts", "delivery.completed", reader=Completed)
def on_delivery_completed(message: Received[Completed]) -> None:
    services.issue_receipt(delivery_id=message.payload.delivery_id)
