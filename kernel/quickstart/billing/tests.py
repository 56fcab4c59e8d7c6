"""billing's handler tested alone: order.placed handed to it as the orders app sends it, with none
of that app's code or contract (the contract is its publisher's to declare, once), and no broker."""

from billing.handlers import Placed
from billing.models import Invoice


def test_an_order_placed_is_invoiced(outbox_deliver):
    handed = outbox_deliver("billing", "order.placed", {"order_id": 7, "item": "tea"}, version=1)

    assert handed.outcome == "processed"
    assert Invoice.objects.get().order_id == 7


def test_the_payload_may_be_built_with_billings_own_reader(outbox_deliver):
    handed = outbox_deliver("billing", "order.placed", Placed(order_id=7, item="tea"))

    assert handed.outcome == "processed"
    assert Invoice.objects.filter(order_id=7).count() == 1


def test_the_same_message_handed_twice_is_invoiced_once(outbox_deliver):
    first = outbox_deliver("billing", "order.placed", {"order_id": 7, "item": "tea"})
    again = outbox_deliver("billing", first.envelope)

    assert (first.outcome, again.outcome) == ("processed", "duplicate")
    assert Invoice.objects.count() == 1


def test_an_order_without_its_item_is_a_dead_letter(outbox_deliver):
    handed = outbox_deliver("billing", "order.placed", {"order_id": 7})

    assert handed.outcome == "dead_lettered"
    assert handed.dead_letter.reason == "invalid_payload"
    assert "item" in handed.dead_letter.error
    assert not Invoice.objects.exists()


def test_an_order_billing_cannot_price_is_a_dead_letter_with_its_error(outbox_deliver):
    handed = outbox_deliver("billing", "order.placed", {"order_id": 7, "item": "poison"})

    assert (handed.dead_letter.reason, handed.dead_letter.error) == (
        "handler_error",
        "billing cannot price a poison order",
    )


def test_a_handler_made_to_fail_is_a_dead_letter(outbox_deliver, outbox_failing):
    with outbox_failing("billing", "order.placed", error=ConnectionError("the ledger is offline")):
        handed = outbox_deliver("billing", "order.placed", {"order_id": 7, "item": "tea"})

    assert handed.dead_letter.error == "the ledger is offline"
    assert not Invoice.objects.exists()
