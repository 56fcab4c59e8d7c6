"""Who listens to what: the registry `@subscribe` fills from each context's `handlers.py`.

Every subscriber gets its own Dramatiq queue and actor, so one slow or failing subscriber
never holds up another. The relay sends one copy of an event to each subscriber's queue.
This module only records and answers; finding the handlers and binding the actors is
`outbox.handling.actors`, run once from `OutboxConfig.ready()` (as Django's admin keeps its registry,
`sites.py`, apart from `autodiscover()` and `AdminConfig.ready()`). So publishing, the relay and
the dead-letter store read the registry without importing the dispatcher.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import dramatiq
from django.apps import apps
from django.conf import settings
from pydantic import BaseModel

from outbox.core.envelope import Envelope

P = TypeVar("P")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Received(Generic[P]):
    """What a handler is given: the envelope and the payload read through its own model."""

    envelope: Envelope
    payload: P


@dataclass(frozen=True)
class Subscription:
    subscriber: str
    event_type: str
    handler: Callable[[Received[Any]], None]
    reader: type[BaseModel] | None
    versions: frozenset[int]
    compensation: bool = False
    ordered: bool = False
    outside_effects: bool = False

    def read(self, payload: dict) -> Any:
        return self.reader.model_validate(payload) if self.reader else payload

    @property
    def context(self) -> str:
        """The subscriber's context: the label of the app its handler lives in, however deep its module
        (`billing.handling.invoices`), as `atomic()` and the router name it: its inbox must be on the database
        its handler writes to, or the two are not one transaction."""
        module = self.handler.__module__
        if apps.apps_ready and (label := app_label(module)) is not None:
            return label
        # In no installed app: the part of its module path before the last, as Event.source() reads a publisher's.
        parts = module.split(".")
        return parts[-2] if len(parts) > 1 else parts[0]


_subscriptions: dict[str, dict[str, Subscription]] = {}
# Module name -> the label of the installed app it belongs to (None: none), found once per module.
_app_of_module: dict[str, str | None] = {}


def app_label(module: str) -> str | None:
    """The label of the installed app `module` belongs to (None: none), found once per module."""
    if module not in _app_of_module:
        app = apps.get_containing_app_config(module)
        _app_of_module[module] = app.label if app is not None else None
    return _app_of_module[module]


def subscribe(
    subscriber: str,
    event_type: str,
    *,
    # The subscriber's own model of the payload (a tolerant reader), never the publisher's contract.
    reader: type[BaseModel] | None = None,
    # The contract versions the handler understands: older ones are upcast to them first.
    versions: tuple[int, ...] = (1,),
    # A compensation that keeps failing is dead-lettered as `compensation_failed`, so operators see undone work
    # apart from the rest.
    compensation: bool = False,
    # Never sees an event older than one of its stream it already handled (`outbox.handling.ordering`). In a pack it
    # shares the transaction, its streams held from the start; for a subscriber with limits (OUTBOX_SUBSCRIBER_LIMITS)
    # each is committed alone.
    ordered: bool = False,
    # It does what the database cannot take back (sends an e-mail, calls a gateway): never in a pack's shared
    # transaction, each envelope committed before the next starts, so no neighbour's failure can roll its work
    # back and have its effect happen again (`outbox.handling.packs`).
    outside_effects: bool = False,
):
    """Register the decorated function as `subscriber`'s handler for `event_type`, the options saying how it
    reads its payload and how its envelopes are retried, ordered and committed (each told at its parameter)."""
    if not _NAME.match(subscriber):
        raise ValueError(f"subscriber name {subscriber!r} must be lower_snake_case (it names a queue)")

    def register(handler):
        handlers = _subscriptions.setdefault(subscriber, {})
        known = handlers.get(event_type)
        if known is not None and known.handler.__qualname__ != handler.__qualname__:
            raise ValueError(f"{subscriber} already handles {event_type} with {known.handler.__qualname__}")
        handlers[event_type] = Subscription(
            subscriber,
            event_type,
            handler,
            reader,
            frozenset(versions),
            compensation=compensation,
            ordered=ordered,
            outside_effects=outside_effects,
        )
        return handler

    return register


_unprocessable_hooks: dict[str, Callable[[Envelope], None]] = {}


def when_unprocessable(subscriber: str):
    """Register what `subscriber` does when one of its messages can never be processed (its payload unreadable, or
    a value in it that cannot be stored or read): the compensations that keep the rest of the choreography from
    waiting on it forever. Called with the raw envelope, in the transaction that dead-letters it."""

    def register(hook):
        _unprocessable_hooks[subscriber] = hook
        return hook

    return register


def unprocessable_hook(subscriber: str) -> Callable[[Envelope], None] | None:
    return _unprocessable_hooks.get(subscriber)


def subscription(subscriber: str, event_type: str) -> Subscription | None:
    return _subscriptions.get(subscriber, {}).get(event_type)


def context_of(subscriber: str) -> str | None:
    """The context `subscriber`'s handlers live in (one subscriber, one context); None if unknown."""
    handlers = _subscriptions.get(subscriber)
    return next(iter(handlers.values())).context if handlers else None


def subscribers() -> list[str]:
    """Every subscriber with at least one handler: one queue and one actor each."""
    return sorted(_subscriptions)


def subscribers_of(event_type: str) -> list[str]:
    return sorted(s for s, handlers in _subscriptions.items() if event_type in handlers)


def routing_table() -> dict[str, list[Subscription]]:
    """Event type -> its subscriptions, the one place that shows the whole choreography."""
    table: dict[str, list[Subscription]] = {}
    for handlers in _subscriptions.values():
        for sub in handlers.values():
            table.setdefault(sub.event_type, []).append(sub)
    return {t: sorted(subs, key=lambda s: s.subscriber) for t, subs in sorted(table.items())}


def queue_name(subscriber: str) -> str:
    """The subscriber's queue: its name behind OUTBOX_QUEUE_PREFIX (a deployment's, a test run's)."""
    return f"{settings.OUTBOX_QUEUE_PREFIX}{subscriber}"


def actor_name(subscriber: str) -> str:
    return f"dispatch_to_{subscriber}"


def message_to(subscriber: str, envelope: dict) -> dramatiq.Message:
    """The Dramatiq message that carries `envelope` to `subscriber`'s queue, under the event's id."""
    return dramatiq.Message(
        queue_name=queue_name(subscriber),
        actor_name=actor_name(subscriber),
        args=(envelope,),
        kwargs={},
        options={},
        message_id=str(envelope.get("message_id")),
    )


PACK = "pack"  # the keyword argument a pack's envelopes travel in (outbox.handling.packs)
HANDED_ON = "handed_on"  # in a pack's options: how many of its envelopes it enqueued alone, unhandled


def pack_of(copies: list[dramatiq.Message]) -> dramatiq.Message:
    """One broker message carrying several `message_to` copies bound for the same queue, under an
    id of its own: the relay's way of paying the broker and the worker once for them all."""
    first = copies[0]
    envelopes = [copy.args[0] for copy in copies]
    return dramatiq.Message(
        queue_name=first.queue_name, actor_name=first.actor_name, args=(), kwargs={PACK: envelopes}, options={}
    )


def acts_outside(copy: dramatiq.Message) -> bool:
    """Whether a `message_to` copy goes to a handler with `outside_effects`: it travels alone, never
    in a pack, where a slow call out (a webhook's POST) would hold up every envelope after it."""
    subscriber = copy.actor_name.removeprefix(actor_name(""))
    handling = subscription(subscriber, copy.args[0].get("type", "")) if copy.args else None
    return handling is not None and handling.outside_effects


def is_pack(args: tuple, kwargs: dict) -> bool:
    return not args and kwargs.keys() == {PACK} and isinstance(kwargs[PACK], list)


def came_before(message: dramatiq.Message) -> bool:
    """Retried by Dramatiq, or redelivered by RabbitMQ (its worker died or lost its connection): a pack
    that comes again is unpacked, each envelope enqueued alone, and handles none of them itself."""
    return message.options.get("retries", 0) > 0 or bool(getattr(message, "redelivered", False))


def envelopes_handled(message: dramatiq.Message) -> int:
    """How many envelopes a worker handled in processing `message`: its one, or a pack's each but those
    it handed on alone; none for a pack that came again. What goes on alone is counted when it comes."""
    if not is_pack(message.args, message.kwargs):
        return 1
    return 0 if came_before(message) else len(message.kwargs[PACK]) - message.options.get(HANDED_ON, 0)
