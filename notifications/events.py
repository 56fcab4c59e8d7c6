"""The contract the notifications context publishes, to itself only."""

from outbox.api import Event


class NotificationDue(Event):
    """One message to send: a notify-me request, a status change, a channel. Each is its own
    message, so that one failing send is retried alone and never repeats the others. It names
    the message by id: the address stays in the notifications context's table."""

    type = "notification.due"
    version = 1
    sent_message_id: int
