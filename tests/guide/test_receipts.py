from outbox.testing import failing, published, run_choreography
from tests.factories import requested
from tests.guide.receipts.models import Receipt


def test_a_completed_delivery_gets_one_receipt_announced_once(customer, fleet):
    delivery_id = requested(customer)

    run_choreography(correlation_id=delivery_id)

    receipt = Receipt.objects.get(delivery_id=delivery_id)
    [issued] = published("receipt.issued", correlation_id=delivery_id)
    assert issued.payload == {"delivery_id": str(delivery_id), "number": receipt.number}


def test_a_receipt_that_cannot_be_issued_is_a_dead_letter_and_the_delivery_still_completes(customer, fleet):
    delivery_id = requested(customer)

    with failing("receipts", "delivery.completed"):
        run_choreography(correlation_id=delivery_id, dead_letters="keep")

    assert not Receipt.objects.exists()
    assert published("delivery.completed", correlation_id=delivery_id)
