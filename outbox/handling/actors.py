"""Start-up wiring: find every app's contracts and handlers, then bind one actor per subscriber.

The registry (`outbox.core.subscriptions`) knows who subscribes to what; this module turns it into
Dramatiq actors that call the dispatcher, once, from `OutboxConfig.ready()`. It is the only
module of the kernel that imports both the registry and `outbox.handling.dispatch`.
"""

import dramatiq
from django.conf import settings
from django.utils.module_loading import autodiscover_modules

from outbox.core.subscriptions import PACK, actor_name, is_pack, queue_name, subscribers
from outbox.handling.dispatch import dispatch
from outbox.handling.packs import dispatch_pack


def autodiscover() -> None:
    """Import every installed app's contracts and handlers, then give each subscriber its actor."""
    autodiscover_modules("events", "handlers")
    declare_actors(dramatiq.get_broker())


def declare_actors(broker: dramatiq.Broker) -> None:
    for subscriber in subscribers():
        if actor_name(subscriber) in broker.actors:
            continue

        def dispatch_to_subscriber(*args, _subscriber: str = subscriber, **kwargs) -> None:
            # Whatever arguments a message carries: dispatch sets anything but one envelope aside as
            # a dead letter (invalid_envelope) at once, where a missing argument would have failed
            # every retry into Dramatiq's own dead-letter queue.
            if is_pack(args, kwargs):  # several envelopes the relay sent together (outbox.handling.packs)
                dispatch_pack(subscriber=_subscriber, bodies=kwargs[PACK], broker=broker)
                return
            body = args[0] if len(args) == 1 and not kwargs else {"args": list(args), "kwargs": kwargs}
            dispatch(subscriber=_subscriber, body=body)

        dramatiq.actor(  # type: ignore[call-overload]  # its options are the broker middleware's
            dispatch_to_subscriber,
            actor_name=actor_name(subscriber),
            queue_name=queue_name(subscriber),
            broker=broker,
            # Beyond OUTBOX_MAX_RETRIES dispatch dead-letters the message itself; the extra attempts
            # are for when even that fails, so the message is never failed into Dramatiq's own queue.
            max_retries=settings.OUTBOX_MAX_RETRIES + settings.OUTBOX_DEAD_LETTER_RETRIES,
            min_backoff=settings.OUTBOX_MIN_BACKOFF_MS,
            max_backoff=settings.OUTBOX_MAX_BACKOFF_MS,
        )
