"""The contracts the webhooks context publishes: `webhook.due` to itself, `webhook.endpoint_disabled` to anyone."""

from uuid import UUID

from outbox.api import Event


class WebhookDue(Event):
    """A message to attempt now. It names the message by id (the body and the secret stay in this
    context's tables) and how many attempts it had when this was published: a copy that finds more
    (another attempt came first) is stale and does nothing, so one message never has two retry chains."""

    type = "webhook.due"
    version = 1
    webhook_id: str  # the message's id, as its `webhook-id` header says it
    after_attempts: int = 0


class WebhookEndpointDisabled(Event):
    """An endpoint had no success for WEBHOOKS_DISABLE_AFTER_SECONDS: nothing more is sent to it
    (its messages are held) until its customer enables it again."""

    type = "webhook.endpoint_disabled"
    version = 1
    endpoint_id: UUID
    customer_id: UUID
