from uuid import UUID

from outbox.api import Event


class ReceiptIssued(Event):
    """A receipt was issued for a completed delivery."""

    type = "receipt.issued"
    version = 1
    delivery_id: UUID
    number: str
