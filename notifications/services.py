"""Tell about deliveries: a record per status change, and a message per notify-me request."""

import logging
from uuid import UUID

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils.module_loading import import_string

from notifications.models import Notification, NotifyMeRequest, SentMessage

logger = logging.getLogger(__name__)

MESSAGES = {
    Notification.Kind.DISPATCHED: "Your package is on its way.",
    Notification.Kind.CONFIRMATION_REQUESTED: "Your package has arrived: please confirm its delivery.",
    Notification.Kind.COMPLETED: "Your package has been delivered.",
    Notification.Kind.FAILED: "We could not deliver your package ({reason}).",
    Notification.Kind.CANCELLED: "Your delivery was cancelled.",
}


def notify(*, delivery_id: UUID, kind: str, reason: str = "") -> Notification:
    """Record one notification per (delivery, kind) and send it to every notify-me request of the
    delivery, once per request, kind and channel: a repeated event sends nothing again.

    A message is sent inside the handler's transaction, after its SentMessage row is written: a
    failed send rolls the row back and the event is retried (then dead-lettered) like any
    failure. Only a crash between a successful send and the commit would send it twice."""
    with transaction.atomic():
        text = MESSAGES[kind].format(reason=reason)
        notification, _ = Notification.objects.get_or_create(
            delivery_id=delivery_id, kind=kind, defaults={"message": text}
        )
        for request in NotifyMeRequest.objects.filter(delivery_id=delivery_id).order_by("id"):
            if request.email_address and _first(request, kind, SentMessage.Channel.EMAIL):
                subject = f"Delivery {delivery_id}: {kind.replace('_', ' ')}"
                send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [request.email_address])
            if request.sms and _first(request, kind, SentMessage.Channel.SMS):
                import_string(settings.NOTIFICATIONS_SMS_SENDER)(to=request.sms, text=text)
        return notification


def _first(request: NotifyMeRequest, kind: str, channel: str) -> bool:
    _, created = SentMessage.objects.get_or_create(request=request, kind=kind, channel=channel)
    return created


def request_notifications(*, delivery_id: UUID, email_address: str = "", sms: str = "") -> NotifyMeRequest:
    with transaction.atomic():
        return NotifyMeRequest.objects.create(delivery_id=delivery_id, email_address=email_address, sms=sms)


def log_sms(*, to: str, text: str) -> None:
    """The default SMS sender: no gateway, a log line (NOTIFICATIONS_SMS_SENDER names another)."""
    logger.info("SMS to %s…%s: %s", to[:4], to[-2:], text)
