from uuid import UUID

from outbox.api import atomic, publish
from tests.guide.receipts.events import ReceiptIssued
from tests.guide.receipts.models import Receipt


def issue_receipt(*, delivery_id: UUID) -> Receipt:
    """One receipt per delivery, announced in the same transaction that stores it."""
    with atomic("receipts"):
        receipt, created = Receipt.objects.get_or_create(
            delivery_id=delivery_id, defaults={"number": f"R-{delivery_id.hex[:8].upper()}"}
        )
        if created:
            publish(ReceiptIssued(delivery_id=delivery_id, number=receipt.number), stream=f"receipt:{receipt.pk}")
        return receipt
