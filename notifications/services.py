"""Tell about deliveries: a record per status change, and a message per notify-me request."""

import logging
from uuid import UUID

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone
from django.utils.module_loading import import_string

from notifications.events import NotificationDue
from notifications.models import Notification, NotifyMeRequest, SentMessage
from outbox.api import atomic, connection_of, publish, save_fields

connection = connection_of("notifications")  # its database, wherever the settings put it

logger = logging.getLogger(__name__)

MESSAGES = {
    Notification.Kind.DISPATCHED: "Your package is on its way.",
    Notification.Kind.CONFIRMATION_REQUESTED: "Your package has arrived: please confirm its delivery.",
    Notification.Kind.COMPLETED: "Your package has been delivered.",
    Notification.Kind.FAILED: "We could not deliver your package ({reason}).",
    Notification.Kind.CANCELLED: "Your delivery was cancelled.",
}


def notify(*, delivery_id: UUID, kind: str, reason: str = "") -> None:
    """Record one notification per (delivery, kind) and, for every notify-me request of the
    delivery, one message per channel, each announced by its own `notification.due`. A repeated
    event finds them there and announces nothing again.

    The notification is one INSERT that does nothing on a conflict with the one already there:
    get_or_create's SELECT, then SAVEPOINT, INSERT and RELEASE, were four statements of every
    delivery's status change (tests/test_statement_counts.py). It and the read of the requests
    are written as SQL: every delivery runs them twice, and Django's `bulk_create` and queryset
    cost the worker more than PostgreSQL's work on them (docs/performance.md)."""
    with atomic("notifications"):
        text = MESSAGES[kind].format(reason=reason)
        for request_id, email_address, sms in _record(delivery_id=delivery_id, kind=kind, text=text):
            channels = [(SentMessage.Channel.EMAIL, email_address), (SentMessage.Channel.SMS, sms)]
            for channel, address in channels:
                if not address:
                    continue
                message, created = SentMessage.objects.get_or_create(request_id=request_id, kind=kind, channel=channel)
                if created:
                    publish(NotificationDue(sent_message_id=message.pk), stream=f"notifications:{delivery_id}")


def _record(*, delivery_id: UUID, kind: str, text: str) -> list[tuple[int, str, str]]:
    """Record the notification (unless it is there) and return the delivery's notify-me requests,
    (id, email address, SMS number) in the order they were made."""
    quote = connection.ops.quote_name
    delivery = _delivery_id.get_db_prep_value(delivery_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(Notification._meta.db_table)} (delivery_id, kind, message, created_at) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (delivery_id, kind) DO NOTHING",
            [delivery, kind, text, _created_at.get_db_prep_value(timezone.now(), connection)],
        )
        cursor.execute(
            f"SELECT id, email_address, sms FROM {quote(NotifyMeRequest._meta.db_table)} "
            "WHERE delivery_id = %s ORDER BY id",
            [delivery],
        )
        return cursor.fetchall()


_delivery_id = Notification._meta.get_field("delivery_id")
_created_at = Notification._meta.get_field("created_at")


def send_message(*, sent_message_id: int) -> SentMessage | None:
    """Send one message, once: a failed send raises, and the event is retried (then
    dead-lettered, and a replay sends it). Only a crash between a send that went out and the
    commit of its `sent_at` would send it twice."""
    with atomic("notifications"):
        message = SentMessage.objects.select_for_update().select_related("request").filter(pk=sent_message_id).first()
        if message is None or message.sent_at is not None:
            return message
        notification = Notification.objects.get(delivery_id=message.request.delivery_id, kind=message.kind)
        if message.channel == SentMessage.Channel.EMAIL:
            subject = f"Delivery {message.request.delivery_id}: {message.kind.replace('_', ' ')}"
            send_mail(subject, notification.message, settings.DEFAULT_FROM_EMAIL, [message.request.email_address])
        else:
            import_string(settings.NOTIFICATIONS_SMS_SENDER)(to=message.request.sms, text=notification.message)
        message.sent_at = timezone.now()
        save_fields(message, ["sent_at"])
        return message


class TooManyRequests(Exception):
    """A delivery takes at most NOTIFY_ME_MAX_REQUESTS_PER_DELIVERY requests."""


class NothingLeftToTell(Exception):
    """A delivery that has ended changes status no more: a request for it would never send anything."""

    def __init__(self, status: str):
        super().__init__(f"a delivery that is {status} has no status change left to tell")
        self.reason = f"already_{status}"


def request_notifications(*, delivery_id: UUID, email_address: str = "", sms: str = "") -> NotifyMeRequest:
    """Keep a notify-me request, within the delivery's cap. Concurrent requests for one delivery are
    counted one after another (a lock on the delivery's requests), or each could see room left."""
    with atomic("notifications"):
        _lock_the_requests_of(delivery_id)
        limit = settings.NOTIFY_ME_MAX_REQUESTS_PER_DELIVERY
        if NotifyMeRequest.objects.filter(delivery_id=delivery_id).count() >= limit:
            raise TooManyRequests(f"a delivery takes at most {limit} notify-me requests")
        return NotifyMeRequest.objects.create(delivery_id=delivery_id, email_address=email_address, sms=sms)


def _lock_the_requests_of(delivery_id: UUID) -> None:
    """Until the transaction ends (PostgreSQL; SQLite serialises its writers)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"notify-me:{delivery_id}"])


def log_sms(*, to: str, text: str) -> None:
    """The default SMS sender: no gateway, a log line (NOTIFICATIONS_SMS_SENDER names another)."""
    logger.info("SMS to %s…%s: %s", to[:4], to[-2:], text)
