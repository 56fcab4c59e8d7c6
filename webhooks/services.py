"""Webhooks: customers' endpoints, the messages owed to them, and each attempt to send one.

A status change becomes one Message per endpoint that wants it, its body built once, and a
`webhook.due` in the same transaction. The handler of `webhook.due` makes one attempt: a 2xx
delivers it, anything else schedules the next `webhook.due` for later (exponential backoff with
jitter) until WEBHOOKS_RETRY_FOR_SECONDS after the message was made. Messages to one endpoint about
one delivery go one at a time, in the order of the changes: a message waits while an older one is
owed (each one delivered or given up hands the turn to the next) and while a change before its own
has not been heard (hearing it lets the message go). An endpoint with no success for
WEBHOOKS_DISABLE_AFTER_SECONDS is disabled and its messages held until its customer enables it."""

import logging
import random
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.utils import timezone
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from outbox.api import atomic, connection_of, locked_row, publish, save_fields
from webhooks import addresses, sending
from webhooks.events import WebhookDue, WebhookEndpointDisabled
from webhooks.models import Attempt, Endpoint, HeardChanges, Message, new_secret

# The statuses of docs/api.md ("Status values"): each change to one is sent as `delivery.<status>`.
STATUSES = (
    "requested",
    "waiting_for_drone",
    "scheduled",
    "in_transit",
    "awaiting_confirmation",
    "delivered",
    "failed",
    "cancelled",
)
EVENT_TYPES = tuple(f"delivery.{status}" for status in STATUSES)
PING = "webhook.ping"
ENDED = ("delivered", "failed", "cancelled")  # a delivery's last status: nothing is heard of it after

OWED = (Message.Status.PENDING, Message.Status.HELD)

logger = logging.getLogger(__name__)


class RefusedUrl(ValueError):
    """The URL is not one the service may POST to: `reason` the guard's short code."""

    field = "url"

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


class UnknownEventType(ValueError):
    field = "eventTypes"

    def __init__(self, unknown: list[str]):
        super().__init__(f"unknown event types: {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}")
        self.reason = f"not one of {', '.join(EVENT_TYPES)}"


class NotReplayable(ValueError):
    """Only a message given up, or held while its endpoint is enabled, is replayed."""


def check_url(url: str) -> None:
    """Refuse (RefusedUrl) a URL the guard would not send to: its reason said, never a 5xx."""
    try:
        addresses.check(url)
    except addresses.ForbiddenAddress as refused:
        raise RefusedUrl(str(refused), reason=refused.reason) from refused
    except (ValueError, UnicodeError) as error:  # a string no URL parser makes sense of
        raise RefusedUrl(f"not a URL: {error}", reason="invalid") from error


def create_endpoint(
    *, customer_id: UUID, url: str, description: str = "", event_types: list[str] = (), alert_email: str = ""
) -> Endpoint:
    """A new endpoint of the customer's, with a secret of its own; its URL checked now (and at every send)."""
    unknown = [t for t in event_types if t not in EVENT_TYPES]
    if unknown:
        raise UnknownEventType(unknown)
    check_url(url)
    with atomic("webhooks"):
        return Endpoint.objects.create(
            customer_id=customer_id,
            url=url,
            description=description,
            event_types=list(dict.fromkeys(event_types)),
            alert_email=alert_email,
        )


def update_endpoint(
    *,
    endpoint: Endpoint,
    url: str | None = None,
    description: str | None = None,
    event_types: list[str] | None = None,
    alert_email: str | None = None,
) -> Endpoint:
    """Change what is given (None: unchanged); a new URL is checked as at registration. Messages
    already made keep the types they were made for; the new ones follow the new `event_types`."""
    if event_types is not None:
        unknown = [t for t in event_types if t not in EVENT_TYPES]
        if unknown:
            raise UnknownEventType(unknown)
        event_types = list(dict.fromkeys(event_types))
    if url is not None:
        check_url(url)
    given = {"url": url, "description": description, "event_types": event_types, "alert_email": alert_email}
    changed = {name: value for name, value in given.items() if value is not None}
    with atomic("webhooks"):
        for name, value in changed.items():
            setattr(endpoint, name, value)
        if changed:
            save_fields(endpoint, list(changed))
        return endpoint


def delete_endpoint(*, endpoint: Endpoint) -> None:
    """The endpoint and everything owed to it: a `webhook.due` still on its way finds nothing."""
    with atomic("webhooks"):
        endpoint.delete()


def rotate_secret(*, endpoint: Endpoint, now: datetime | None = None) -> Endpoint:
    """A new secret; the old one signs too until WEBHOOKS_SECRET_GRACE_SECONDS from now."""
    now = now or timezone.now()
    with atomic("webhooks"):
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_expires_at = now + timedelta(seconds=settings.WEBHOOKS_SECRET_GRACE_SECONDS)
        endpoint.secret = new_secret()
        endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
        return endpoint


def signing_secrets(endpoint: Endpoint, *, now: datetime) -> list[str]:
    """The secrets that sign a message now: the current one, and the previous one in its grace period."""
    found = [endpoint.secret]
    if endpoint.previous_secret and endpoint.previous_secret_expires_at and endpoint.previous_secret_expires_at > now:
        found.append(endpoint.previous_secret)
    return found


class _Body(BaseModel):
    """What is POSTed: camelCase, as the API's resources are."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
    type: str
    timestamp: datetime
    data: dict


class _StatusData(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
    delivery_id: UUID
    status: str
    status_reason: str | None
    last_known_location: dict | None
    pickup_eta: datetime | None
    delivery_eta: datetime | None


def _body(*, type: str, timestamp: datetime, data: BaseModel | dict) -> str:
    data = data.model_dump(mode="json", by_alias=True) if isinstance(data, BaseModel) else data
    return _Body(type=type, timestamp=timestamp, data=data).model_dump_json(by_alias=True)


def enqueue_status_change(
    *,
    customer_id: UUID,
    delivery_id: UUID,
    status: str,
    status_reason: str = "",
    changed_at: datetime,
    last_known_location: dict | None = None,
    pickup_eta: datetime | None = None,
    delivery_eta: datetime | None = None,
    sequence: int | None = None,
    change_number: int | None = None,
) -> list[Message]:
    """One message per endpoint of the customer's that wants `delivery.<status>`, each announced
    by a `webhook.due` in the same transaction; to a disabled endpoint, held and not announced; while
    a change before this one is unheard, not announced until it is. A change that fills such a gap
    announces the messages that waited for it."""
    event_type = f"delivery.{status}"
    with atomic("webhooks"):
        heard_through = None
        if change_number is not None:
            heard_through = _hear(delivery_id, change_number, ended=status in ENDED)
            for message in _let_go(delivery_id, by=change_number, heard_through=heard_through):
                _announce(message)
        endpoints = [
            e for e in Endpoint.objects.filter(customer_id=customer_id).order_by("created_at") if e.wants(event_type)
        ]
        if not endpoints:
            return []
        data = _StatusData(
            delivery_id=delivery_id,
            status=status,
            status_reason=status_reason or None,
            last_known_location=last_known_location,
            pickup_eta=pickup_eta,
            delivery_eta=delivery_eta,
        )
        body = _body(type=event_type, timestamp=changed_at, data=data)
        messages = []
        for endpoint in endpoints:
            status_now = Message.Status.PENDING if endpoint.enabled else Message.Status.HELD
            message = Message.objects.create(
                endpoint=endpoint,
                delivery_id=delivery_id,
                event_type=event_type,
                body=body,
                status=status_now,
                sequence=sequence,
                change_number=change_number,
            )
            if endpoint.enabled and (heard_through is None or change_number <= heard_through):
                _announce(message)
            elif endpoint.enabled:  # sent when the gap is filled, or at the latest once the wait is over
                _announce(message, at=_wait_over(message))
            messages.append(message)
        return messages


def _hear(delivery_id: UUID, number: int, *, ended: bool = False) -> int:
    """Record the delivery's change `number` as heard and answer through which number every change
    is heard. One statement when the changes come in order (the usual): an upsert that also locks
    the delivery's row, so that of two changes heard at once, the second sees the first; a change
    heard out of order is then recorded by a second."""
    connection = connection_of("webhooks")
    beyond = HeardChanges._meta.get_field("heard_beyond")
    now = HeardChanges._meta.get_field("last_heard_at").get_db_prep_value(timezone.now(), connection)
    with connection.cursor() as cursor:
        cursor.execute(
            _HEAR.format(table=connection.ops.quote_name(HeardChanges._meta.db_table)),
            [
                HeardChanges._meta.pk.get_db_prep_value(delivery_id, connection),
                1 if number == 1 else 0,
                None if number == 1 else beyond.get_db_prep_save([number], connection),
                ended,
                now,
                number - 1,
                number,
            ],
        )
        heard_through, heard_beyond = cursor.fetchone()
    heard = HeardChanges(delivery_id=delivery_id, heard_through=heard_through)
    heard.heard_beyond = beyond.from_db_value(heard_beyond, None, connection)
    heard._state.adding, heard._state.db = False, connection.alias
    if not heard.heard(number):
        heard.hear(number)
        save_fields(heard, ["heard_through", "heard_beyond"])
    return heard.heard_through


# Insert the delivery's row (its first change heard), or lock it and record the next change in order.
_HEAR = (
    "INSERT INTO {table} (delivery_id, heard_through, heard_beyond, ended, last_heard_at) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (delivery_id) DO UPDATE SET last_heard_at = EXCLUDED.last_heard_at, "
    "ended = {table}.ended OR EXCLUDED.ended, heard_through = CASE "
    "WHEN {table}.heard_through = %s AND {table}.heard_beyond IS NULL THEN %s ELSE {table}.heard_through END "
    "RETURNING heard_through, heard_beyond"
)


def _let_go(delivery_id: UUID, *, by: int, heard_through: int) -> list[Message]:
    """The messages that waited for change `by` to be heard: to each endpoint, the first of them."""
    if heard_through <= by:
        return []
    waiting = Message.objects.filter(
        delivery_id=delivery_id,
        status=Message.Status.PENDING,
        attempts=0,
        change_number__gt=by,
        change_number__lte=heard_through,
    ).order_by("sequence", "created_at", "pk")
    first: dict[UUID, Message] = {}
    for message in waiting:
        first.setdefault(message.endpoint_id, message)
    return list(first.values())


def ping(*, endpoint: Endpoint) -> Message:
    """A `webhook.ping` message, sent as every other is (held while the endpoint is disabled)."""
    now = timezone.now()
    with atomic("webhooks"):
        message = Message.objects.create(
            endpoint=endpoint,
            event_type=PING,
            body=_body(type=PING, timestamp=now, data={"endpointId": str(endpoint.pk)}),
            status=Message.Status.PENDING if endpoint.enabled else Message.Status.HELD,
            created_at=now,
        )
        if endpoint.enabled:
            _announce(message)
        return message


def _announce(message: Message, *, at: datetime | None = None, again: bool = False) -> None:
    """Publish the message's `webhook.due`: now, or at `at`. In the delivery's story, unless the
    message's own attempt schedules it `again` (a retry, a longer wait): each of those links is a
    story of its own, as a chain of timers is periodic work, not a causal loop; under the delivery's
    id three days of retries would pass OUTBOX_MAX_HOPS and be dead-lettered as a loop."""
    publish(
        WebhookDue(webhook_id=message.pk, after_attempts=message.attempts),
        stream=f"webhooks:{message.delivery_id or message.endpoint_id}",
        correlation_id=uuid4() if again else message.delivery_id,
        available_at=at,
    )


def attempt(*, message_id: str, after_attempts: int | None = None, now: datetime | None = None) -> Message | None:
    """Attempt to send one message, unless it is no longer owed, a copy of its `webhook.due` is
    stale (it has had more attempts than this one was published after), or an older message to
    its endpoint about its delivery is still owed (that one's success hands it the turn). Never
    raises for the endpoint's failure: that is recorded, and the next attempt scheduled."""
    with atomic("webhooks"):
        message = (
            Message.objects.select_for_update(of=("self",)).select_related("endpoint").filter(pk=message_id).first()
        )
        if message is None or message.status != Message.Status.PENDING:
            return message
        if after_attempts is not None and message.attempts != after_attempts:
            return message
        endpoint = message.endpoint
        if not endpoint.enabled:
            message.status = Message.Status.HELD
            message.save(update_fields=["status"])
            return message
        now = now or timezone.now()
        if _an_older_one_is_owed(message):
            return message
        if _an_earlier_change_is_unheard(message, now=now):  # let go when it is heard, or when the wait is over
            _announce(message, at=max(_wait_over(message), now + timedelta(seconds=1)), again=True)
            return message
        outcome = _send(message, now=now)
        Attempt.objects.create(
            message=message,
            attempted_at=now,
            status_code=outcome.status_code,
            error=outcome.error[:500],
            duration_ms=outcome.duration_ms,
            response_excerpt=outcome.response_excerpt[:1024],
        )
        message.attempts += 1
        if outcome.ok:
            _delivered(message, now=now)
        else:
            _failed(message, now=now)
        return message


def _send(message: Message, *, now: datetime) -> "sending.Outcome":
    endpoint = message.endpoint
    try:
        return sending.send(
            url=endpoint.url,
            secrets=signing_secrets(endpoint, now=now),
            webhook_id=message.pk,
            timestamp=now,
            body=message.body,
        )
    except addresses.ForbiddenAddress as refused:
        return sending.Outcome(status_code=None, error=str(refused), duration_ms=0, response_excerpt="")


def _an_older_one_is_owed(message: Message) -> bool:
    if message.delivery_id is None:  # a ping waits for nothing
        return False
    older = (
        Q(sequence__lt=message.sequence)
        if message.sequence is not None
        else Q(created_at__lt=message.created_at) | Q(created_at=message.created_at, pk__lt=message.pk)
    )
    return (
        Message.objects.filter(endpoint_id=message.endpoint_id, delivery_id=message.delivery_id, status__in=OWED)
        .filter(older)
        .exists()
    )


def _an_earlier_change_is_unheard(message: Message, *, now: datetime) -> bool:
    """Whether a change before the message's own is still unheard: never once it was attempted, nor
    once it has waited WEBHOOKS_ORDER_WAIT_SECONDS (a change that will not come: a letter discarded)."""
    if message.change_number is None or message.change_number == 1 or message.attempts:
        return False
    heard = HeardChanges.objects.filter(delivery_id=message.delivery_id, heard_through__gte=message.change_number - 1)
    if heard.exists():
        return False
    if now < _wait_over(message):
        return True
    logger.warning(
        "webhook %s (change %s of delivery %s) sent without the changes before it: they were not heard within %g s",
        message.pk,
        message.change_number,
        message.delivery_id,
        settings.WEBHOOKS_ORDER_WAIT_SECONDS,
    )
    return False


def _wait_over(message: Message) -> datetime:
    return message.created_at + timedelta(seconds=settings.WEBHOOKS_ORDER_WAIT_SECONDS)


def _next_in_line(message: Message) -> Message | None:
    """The oldest message still pending to the same endpoint about the same delivery."""
    if message.delivery_id is None:
        return None
    return (
        Message.objects.filter(
            endpoint_id=message.endpoint_id, delivery_id=message.delivery_id, status=Message.Status.PENDING
        )
        .exclude(pk=message.pk)
        .order_by("sequence", "created_at", "pk")
        .first()
    )


def _delivered(message: Message, *, now: datetime) -> None:
    message.status, message.delivered_at, message.next_attempt_at = Message.Status.DELIVERED, now, None
    message.save(update_fields=["status", "delivered_at", "next_attempt_at", "attempts"])
    Endpoint.objects.filter(pk=message.endpoint_id).exclude(failing_since=None).update(failing_since=None)
    if following := _next_in_line(message):
        _announce(following)


def _failed(message: Message, *, now: datetime) -> None:
    """Disable the endpoint if it has failed for long enough; else give the message up if its time
    is over; else schedule its next attempt."""
    Endpoint.objects.filter(pk=message.endpoint_id, failing_since=None).update(failing_since=now)
    failing_since = Endpoint.objects.values_list("failing_since", flat=True).get(pk=message.endpoint_id)
    if now - failing_since >= timedelta(seconds=settings.WEBHOOKS_DISABLE_AFTER_SECONDS):
        message.save(update_fields=["attempts"])
        disable(
            endpoint=message.endpoint,
            reason="no success for " + _duration(settings.WEBHOOKS_DISABLE_AFTER_SECONDS),
            now=now,
        )
        message.refresh_from_db()
        return
    horizon = message.created_at + timedelta(seconds=settings.WEBHOOKS_RETRY_FOR_SECONDS)
    if now >= horizon:
        message.status, message.next_attempt_at = Message.Status.FAILED, None
        message.save(update_fields=["status", "next_attempt_at", "attempts"])
        if following := _next_in_line(message):
            _announce(following)
        return
    message.next_attempt_at = min(now + backoff(message.attempts), horizon)
    message.save(update_fields=["next_attempt_at", "attempts"])
    _announce(message, at=message.next_attempt_at, again=True)


def backoff(attempts: int, *, rng: random.Random | None = None) -> timedelta:
    """How long after the `attempts`-th failed attempt the next one is made: the schedule's step
    (WEBHOOKS_BACKOFF_SECONDS), jittered down by up to half, so that an endpoint's messages do not
    all come back at once; past its end, two to four times its last step."""
    schedule = settings.WEBHOOKS_BACKOFF_SECONDS
    if attempts <= len(schedule):
        most = schedule[max(attempts, 1) - 1]
        return timedelta(seconds=(rng or random).uniform(most / 2, most))
    return timedelta(seconds=(rng or random).uniform(2 * schedule[-1], 4 * schedule[-1]))


def _duration(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{int(seconds // 86400)} days"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} hours"
    return f"{seconds:g} seconds"


def disable(*, endpoint: Endpoint, reason: str, now: datetime | None = None) -> bool:
    """Stop sending to the endpoint: its owed messages held, `webhook.endpoint_disabled` published.
    False if it was disabled already."""
    now = now or timezone.now()
    with atomic("webhooks"):
        if not Endpoint.objects.filter(pk=endpoint.pk, disabled_at=None).update(
            disabled_at=now, disabled_reason=reason
        ):
            return False
        Message.objects.filter(endpoint_id=endpoint.pk, status=Message.Status.PENDING).update(
            status=Message.Status.HELD, next_attempt_at=None
        )
        publish(
            WebhookEndpointDisabled(endpoint_id=endpoint.pk, customer_id=endpoint.customer_id),
            stream=f"webhooks:{endpoint.pk}",
        )
        endpoint.disabled_at, endpoint.disabled_reason = now, reason
        return True


def alert_disabled(*, endpoint_id: UUID) -> bool:
    """E-mail the endpoint's `alert_email` that it was disabled, once per disabling (a failed send
    raises, and the event is retried); nothing if it has no address or was enabled since. True if sent."""
    with atomic("webhooks"):
        endpoint = locked_row(Endpoint, endpoint_id)
        if endpoint is None or endpoint.enabled or not endpoint.alert_email:
            return False
        if endpoint.alerted_for == endpoint.disabled_at:  # told of this disabling already
            return False
        send_mail(
            f"Webhook endpoint disabled: {endpoint.url}",
            f"Nothing has been sent to {endpoint.url} since {endpoint.disabled_at:%Y-%m-%d %H:%M:%S %Z}: "
            f"{endpoint.disabled_reason}.\n\nWhat it is owed is held. Enable it (POST "
            f"/api/webhookendpoints/{endpoint.pk}/enable) and that is sent, oldest first.",
            settings.DEFAULT_FROM_EMAIL,
            [endpoint.alert_email],
        )
        endpoint.alerted_for = endpoint.disabled_at
        save_fields(endpoint, ["alerted_for"])
        return True


def enable(*, endpoint: Endpoint) -> Endpoint:
    """Send to the endpoint again: what it is owed (held) goes out oldest first, one message at a
    time for each delivery."""
    with atomic("webhooks"):
        endpoint = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
        endpoint.disabled_at, endpoint.disabled_reason, endpoint.failing_since = None, "", None
        endpoint.save(update_fields=["disabled_at", "disabled_reason", "failing_since"])
        held = list(endpoint.messages.filter(status=Message.Status.HELD).order_by("sequence", "created_at", "pk"))
        endpoint.messages.filter(pk__in=[m.pk for m in held]).update(status=Message.Status.PENDING)
        heads, seen = [], set()
        for message in held:
            if message.delivery_id is None or message.delivery_id not in seen:
                heads.append(message)
                seen.add(message.delivery_id)
        for message in heads:
            _announce(message)
        return endpoint


def replay(*, message: Message) -> Message:
    """Send a message again that was given up (or held while its endpoint is enabled): one more
    attempt, queued now; given up again if it fails after its retry period."""
    with atomic("webhooks"):
        message = Message.objects.select_for_update(of=("self",)).select_related("endpoint").get(pk=message.pk)
        if not message.endpoint.enabled:
            raise NotReplayable(f"endpoint {message.endpoint.url} is disabled: enable it, and what it is owed is sent")
        if message.status not in (Message.Status.FAILED, Message.Status.HELD):
            raise NotReplayable(f"message {message.pk} is {message.status}")
        message.status = Message.Status.PENDING
        message.save(update_fields=["status"])
        _announce(message)
        return message
