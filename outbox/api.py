"""The outbox kernel's public surface: everything a bounded context may import from it.

A context declares its events, publishes them with the state change they announce, subscribes
handlers to other contexts' events, and shows its records in the console, through these names
and no others. The rest of the kernel (the relay, dispatch, the stores, the sweep, the console's
own pages) is its inside and may change: an import contract (pyproject.toml) refuses a context any
other module of it but `outbox.ops` (the admin's wiring, health and metrics, for the deployable).

Publishing: state and its events in one transaction
    publish             append an event to the outbox in the caller's transaction; relayed after commit
    publish_many        several events on one stream, in order, in one statement (a schedule of timers)
    atomic              the transaction a service's change and its events share (joins a handler's)
    connection_of       a context's connection for its own SQL, on whichever database its tables are
    locked_row          the row a service changes, read by its key and locked (its statement written once)
    save_fields         save(update_fields=...) of that row, its UPDATE written once per set of fields
    insert_row          save(force_insert=True) of a new row, its INSERT written once per model
    withdraw_scheduled  take back a stream's events still scheduled for later (timers made moot)
    PublishOutsideTransaction, EventTooLarge   what publish refuses

Contracts: the published language
    Event               a fact a context publishes: subclass it with `type`, `version` and the fields
    Reader              a subscriber's own tolerant view of a payload
    upcaster            how a payload of one version becomes the next, for messages still queued

Handling: the other side
    subscribe           register a handler for an event type (idempotent, retried, ordered if asked)
    when_unprocessable  what a subscriber does when a message can never be processed
    Received            what a handler is given: the envelope and its payload, read
    Envelope            what every message carries around its payload
    Rejected            raise it for a message that can never succeed: a dead letter at once

Stories: what a context's own pages show of one
    correlation_timeline, sequence_diagram

Each name is loaded on first use, so a context's `events.py` may import this module before
Django's apps are ready (only the publishing and console names need the models).
"""

from importlib import import_module
from typing import TYPE_CHECKING

# name -> (module, attribute): the one list of what the kernel promises its contexts.
SURFACE: dict[str, tuple[str, str]] = {
    "publish": ("outbox.core.publishing", "publish"),
    "publish_many": ("outbox.core.publishing", "publish_many"),
    "atomic": ("outbox.placement", "atomic"),
    "connection_of": ("outbox.placement", "connection_of"),
    "locked_row": ("outbox.core.locking", "locked_row"),
    "save_fields": ("outbox.core.saving", "save_fields"),
    "insert_row": ("outbox.core.saving", "insert_row"),
    "withdraw_scheduled": ("outbox.core.publishing", "withdraw_scheduled"),
    "PublishOutsideTransaction": ("outbox.core.publishing", "PublishOutsideTransaction"),
    "EventTooLarge": ("outbox.core.publishing", "EventTooLarge"),
    "Event": ("outbox.core.contracts", "Event"),
    "Reader": ("outbox.core.contracts", "Reader"),
    "upcaster": ("outbox.core.contracts", "upcaster"),
    "subscribe": ("outbox.core.subscriptions", "subscribe"),
    "when_unprocessable": ("outbox.core.subscriptions", "when_unprocessable"),
    "Received": ("outbox.core.subscriptions", "Received"),
    "Envelope": ("outbox.core.envelope", "Envelope"),
    "Rejected": ("outbox.core.dead_letters", "Rejected"),
    "correlation_timeline": ("outbox.console.timeline", "correlation_timeline"),
    "sequence_diagram": ("outbox.console.sequence_diagram", "render"),
}

__all__ = [  # SURFACE's names, written out so that tools reading the source see them too
    "publish",
    "publish_many",
    "atomic",
    "connection_of",
    "locked_row",
    "save_fields",
    "insert_row",
    "withdraw_scheduled",
    "PublishOutsideTransaction",
    "EventTooLarge",
    "Event",
    "Reader",
    "upcaster",
    "subscribe",
    "when_unprocessable",
    "Received",
    "Envelope",
    "Rejected",
    "correlation_timeline",
    "sequence_diagram",
]


def __getattr__(name: str):
    try:
        module, attribute = SURFACE[name]
    except KeyError:
        raise AttributeError(f"outbox.api has no {name!r}: the kernel's surface is {', '.join(__all__)}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and editors; at run time each name loads on first use
    from outbox.console.sequence_diagram import render as sequence_diagram
    from outbox.console.timeline import correlation_timeline
    from outbox.core.contracts import Event, Reader, upcaster
    from outbox.core.dead_letters import Rejected
    from outbox.core.envelope import Envelope
    from outbox.core.locking import locked_row
    from outbox.core.publishing import (
        EventTooLarge,
        PublishOutsideTransaction,
        publish,
        publish_many,
        withdraw_scheduled,
    )
    from outbox.core.saving import insert_row, save_fields
    from outbox.core.subscriptions import Received, subscribe, when_unprocessable
    from outbox.placement import atomic, connection_of
