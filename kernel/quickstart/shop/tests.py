"""The shop's flows across its apps: what the orders app publishes, billing handles."""

import pytest
from billing.models import Invoice
from orders.services import place_order

from outbox.testing import DeadLettered


def test_an_order_is_invoiced(outbox_run_choreography, outbox_published):
    order = place_order(item="tea")

    outbox_run_choreography()

    assert Invoice.objects.filter(order_id=order.pk).count() == 1
    [placed] = outbox_published("order.placed")
    assert placed.payload == {"order_id": order.pk, "item": "tea"}


def test_what_the_orders_app_publishes_billing_reads(outbox_published, outbox_deliver):
    place_order(item="tea")
    [placed] = outbox_published("order.placed")

    handed = outbox_deliver("billing", placed)

    assert handed.outcome == "processed"


def test_a_handler_that_fails_fails_the_flow(outbox_run_choreography):
    place_order(item="poison")

    with pytest.raises(DeadLettered, match="billing cannot price a poison order"):
        outbox_run_choreography()


def test_an_order_is_invoiced_through_the_broker(outbox_relay_and_workers, outbox_wait_until_processed):
    order = place_order(item="tea")

    outbox_wait_until_processed(timeout=30)

    assert Invoice.objects.filter(order_id=order.pk).count() == 1
