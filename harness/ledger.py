"""The chaos rig's ledger: what a run must add up to once the system is quiet, read from the
contexts' own tables and events and from what the rig's webhook receiver heard, never from the
rig's own bookkeeping. Each shortfall is a violation with the ids to look at; `figures` are
counts for the verdict."""

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from deliveries.models import Delivery
from drones.models import Drone
from harness.chaos import WebhookWatch
from notifications.models import Notification
from outbox.core.working_database import kernel_databases
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.placement import database_of
from webhooks.models import Attempt, Message

TERMINAL = Delivery.TERMINAL
# The notification each terminal status sends; its presence is the side effect checked.
NOTIFIED = {"delivered": "completed", "failed": "failed", "cancelled": "cancelled"}


@dataclass
class Ledger:
    """What the run must add up to once quiet.

    - every 202 has a delivery, and it is terminal;
    - every relayed event was processed by each of its recipients (an inbox row: at most one,
      by the inbox's unique key) and each terminal delivery sent its one notification;
    - no drone was ever reserved for two deliveries at once, nor a delivery given two drones,
      as told by the drones' own events in commit order, and no drone is left held;
    - the outbox is drained (timers for later excepted) and no message is dead-lettered;
    - with `webhooks`, every status change of a type the endpoint asked for is one webhook message,
      which arrived, signed, with its body, in the order of the changes; nothing else arrived.
    """

    accepted: list[str]
    webhooks: WebhookWatch | None = None
    # The moment the run was found quiet: timers that fall due later (a join timeout 5 minutes
    # after each request) are not the run's to have finished.
    as_of: datetime | None = None
    violations: list[str] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)

    def unsettled(self) -> list[str]:
        """Why the run is not quiet yet (empty once it is)."""
        reasons = []
        statuses = dict(Counter(Delivery.objects.filter(id__in=self.accepted).values_list("status", flat=True)))
        open_ = sum(n for status, n in statuses.items() if status not in TERMINAL)
        if open_ or sum(statuses.values()) < len(self.accepted):
            reasons.append(f"{open_} deliveries not terminal ({statuses})")
        self.as_of = timezone.now()
        due = self._due()
        if due:
            reasons.append(f"{due} outbox rows due and not relayed")
        missing = self._unprocessed()
        if missing:
            reasons.append(f"{len(missing)} messages not processed by a recipient")
        if self.webhooks is not None:
            pending = Message.objects.filter(status=Message.Status.PENDING).count()
            if pending:
                reasons.append(f"{pending} webhook messages pending")
        return reasons

    def _due(self) -> int:
        """Outbox rows due by `as_of` and not yet relayed, on every database."""
        return sum(
            q.filter(published_at__isnull=True, available_at__lte=self.as_of).count() for q in rows(OutboxMessage)
        )

    def _unprocessed(self) -> list[tuple[str, str, str]]:
        processed = {pair for q in rows(InboxMessage) for pair in q.values_list("subscriber", "message_id")}
        dead = {pair for q in rows(DeadLetter) for pair in q.values_list("subscriber", "message_id")}
        missing = []
        relayed = [
            row
            for q in rows(OutboxMessage)
            for row in q.filter(published_at__isnull=False, available_at__lte=self.as_of).values_list(
                "message_id", "type", "recipients", "target_subscriber"
            )
        ]
        for message_id, type_, recipients, target in relayed:
            for subscriber in [target] if target else recipients:
                if (subscriber, message_id) not in processed and (subscriber, message_id) not in dead:
                    missing.append((subscriber, str(message_id), type_))
        return missing

    def check(self) -> None:
        self.as_of = self.as_of or timezone.now()
        deliveries = {str(d.id): d for d in Delivery.objects.filter(id__in=self.accepted)}
        for delivery_id in self.accepted:
            delivery = deliveries.get(delivery_id)
            if delivery is None:
                self.violations.append(f"202 for {delivery_id} but no delivery")
            elif delivery.status not in TERMINAL:
                self.violations.append(f"delivery {delivery_id} stuck {delivery.status}")
        for subscriber, message_id, type_ in self._unprocessed()[:20]:
            self.violations.append(f"{type_} {message_id} never processed by {subscriber}")
        due = self._due()
        if due:
            self.violations.append(f"{due} outbox rows due and never relayed")
        returned = {
            c
            for q in rows(OutboxMessage)
            for c in q.filter(type="drone.package_returned").values_list("correlation_id", flat=True)
        }
        for delivery in deliveries.values():
            if (
                delivery.status == "delivered"
                and delivery.confirmation_required != "None"
                and not delivery.confirmation
            ):
                self.violations.append(f"delivery {delivery.id} delivered without its confirmation")
            if delivery.status_reason == "confirmation_timeout" and delivery.id not in returned:
                self.violations.append(f"delivery {delivery.id} timed out but its package was not returned")
        notified = set(Notification.objects.values_list("delivery_id", "kind"))
        for delivery in deliveries.values():
            kind = NOTIFIED.get(delivery.status)
            if kind and (delivery.id, kind) not in notified:
                self.violations.append(f"delivery {delivery.id} is {delivery.status} but no {kind} notification")
        self._check_drones(deliveries)
        if self.webhooks is not None:
            self._check_webhooks(self.webhooks)
        for letter in [letter for q in rows(DeadLetter) for letter in q[:20]][:20]:
            self.violations.append(f"dead letter: {letter.type} to {letter.subscriber}, {letter.reason}")
        statuses = Counter(d.status for d in deliveries.values())
        self.figures.update(
            deliveries=dict(statuses),
            failure_reasons=dict(Counter(d.status_reason for d in deliveries.values() if d.status == "failed")),
            events_relayed=sum(q.filter(published_at__isnull=False).count() for q in rows(OutboxMessage)),
            messages_processed=sum(q.count() for q in rows(InboxMessage)),
            duplicates_absorbed=sum(n for q in rows(InboxMessage) for n in q.values_list("duplicates", flat=True)),
            rows_sent_more_than_once=sum(q.filter(send_attempts__gt=1).count() for q in rows(OutboxMessage)),
            rows_resent_by_the_sweep=sum(q.filter(resends__gt=0).count() for q in rows(OutboxMessage)),
            dead_letters=sum(q.count() for q in rows(DeadLetter)),
        )
        if len(kernel_databases()) > 1:
            self.figures["databases"] = kernel_databases()

    def _check_webhooks(self, watch: WebhookWatch) -> None:
        """Each status change the endpoint asked for (the deliveries' own `delivery.status_changed`,
        in commit order) against the endpoint's messages, and each message against what arrived."""
        accepted = set(self.accepted)
        changes: dict[str, list[tuple]] = defaultdict(list)  # delivery -> its changes' keys, in order
        events = OutboxMessage.objects.using(database_of("deliveries")).filter(type="delivery.status_changed")
        for payload in events.order_by("id").values_list("payload", flat=True):
            event_type = f"delivery.{payload['status']}"
            if payload["delivery_id"] in accepted and event_type in watch.event_types:
                changes[payload["delivery_id"]].append(
                    (payload["delivery_id"], event_type, datetime.fromisoformat(payload["changed_at"]))
                )
        messages: dict[tuple, list[Message]] = defaultdict(list)
        mine = Message.objects.filter(endpoint_id=watch.endpoint_id).order_by("created_at", "pk")
        for message in mine:
            body = json.loads(message.body)
            key = (str(message.delivery_id), message.event_type, datetime.fromisoformat(body["timestamp"]))
            messages[key].append(message)
        arrivals = watch.receiver.arrivals
        for delivery_id, keys in changes.items():
            order = []
            for key in keys:
                found = messages.pop(key, [])
                if not found:
                    self.violations.append(f"delivery {delivery_id}'s {key[1]} became no webhook message")
                elif len(found) > 1:
                    ids = ", ".join(m.pk for m in found)
                    self.violations.append(f"delivery {delivery_id}'s {key[1]} became {len(found)} messages: {ids}")
                for message in found:
                    arrival = arrivals.get(message.pk)
                    if arrival is None:
                        self.violations.append(f"webhook {message.pk} ({key[1]} of {delivery_id}) never arrived")
                    elif arrival.path != watch.path or arrival.body != message.body:
                        self.violations.append(f"webhook {message.pk} arrived at {arrival.path} with another body")
                    else:
                        order.append((arrival.order, message.event_type))
            if order != sorted(order):  # each one's first arrival, in the order of the changes
                arrived = ", ".join(event_type for _, event_type in sorted(order))
                self.violations.append(f"delivery {delivery_id}'s webhooks arrived out of order: {arrived}")
        for found in messages.values():
            for message in found:
                self.violations.append(f"webhook message {message.pk} ({message.event_type}) for no status change")
        known = set(mine.values_list("pk", flat=True))
        for webhook_id, arrival in arrivals.items():
            if arrival.path in watch.silent.values():
                self.violations.append(
                    f"webhook {webhook_id} arrived for an endpoint disabled or deleted ({arrival.path})"
                )
            elif webhook_id not in known:
                self.violations.append(f"webhook {webhook_id} arrived at {arrival.path} but no message has that id")
        for problem in watch.receiver.bad_signatures[:20]:
            self.violations.append(f"webhook with a bad signature: {problem}")
        attempts = Attempt.objects.filter(message__endpoint_id=watch.endpoint_id)
        self.figures.update(
            webhook_messages=len(known),
            webhooks_received=sum(1 for a in arrivals.values() if a.path == watch.path),
            webhook_attempts=attempts.count(),
            webhooks_retried=mine.filter(attempts__gt=1).count(),
            webhook_duplicates_dropped_by_receiver=watch.receiver.duplicates,
            webhook_posts_refused_while_down=watch.receiver.refused,
            webhook_connections_cut_while_down=watch.receiver.cut_off,
            webhooks_held_for_the_disabled_endpoint=Message.objects.filter(
                endpoint_id__in=list(watch.silent), status=Message.Status.HELD
            ).count(),
        )
        if Attempt.objects.filter(message__endpoint_id__in=list(watch.silent)).exists():
            self.violations.append("a disabled or deleted endpoint was sent to")

    def _check_drones(self, deliveries: dict[str, Delivery]) -> None:
        """Walk the drones' reservations in commit order: a drone's events are all written under
        its row lock, so their outbox ids follow the order in which they happened."""
        holder: dict[str, str] = {}  # drone -> delivery
        held: dict[str, set[str]] = defaultdict(set)  # delivery -> drones
        # In the drones' own outbox, wherever that is: ids are in commit order within one database.
        events = OutboxMessage.objects.using(database_of("drones"))
        events = events.filter(type__in=("drone.scheduled", "drone.released")).order_by("id")
        for type_, payload in events.values_list("type", "payload"):
            drone, delivery = payload["drone_id"], payload["delivery_id"]
            if type_ == "drone.scheduled":
                if holder.get(drone) not in (None, delivery):
                    self.violations.append(f"drone {drone} reserved for {delivery} while held for {holder[drone]}")
                holder[drone] = delivery
                held[delivery].add(drone)
                if len(held[delivery]) > 1:
                    self.violations.append(f"delivery {delivery} holds drones {sorted(held[delivery])}")
            elif holder.get(drone) == delivery:
                del holder[drone]
                held[delivery].discard(drone)
        for drone in Drone.objects.filter(delivery_id__isnull=False):
            delivery = deliveries.get(str(drone.delivery_id))
            if delivery is not None and delivery.status in TERMINAL:
                self.violations.append(f"drone {drone.name} still held ({drone.status}) for {delivery.status} delivery")


def rows(model) -> list:
    """A kernel model's rows on each database with the kernel's tables: one, unless a context is on
    a database of its own (CONTEXT_DATABASE_URLS), whose events, inbox and letters are there."""
    return [model.objects.using(database) for database in kernel_databases()]
