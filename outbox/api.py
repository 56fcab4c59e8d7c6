"""The outbox kernel's public surface for a bounded context: its messaging, and nothing else.

A context declares its events (Event, Reader, upcaster), publishes them with the state change they
announce (publish, publish_many, atomic, connection_of, locked_row, save_fields, insert_row,
withdraw_scheduled, and what publish refuses), subscribes handlers to other contexts' events
(subscribe, when_unprocessable, Received, Envelope, Rejected), and shows a story on its own pages
(correlation_timeline, sequence_diagram). The guide's "The public API" page says what each does.
The rest of the kernel is its inside: an import contract (pyproject.toml) refuses a context any
other module of it but `outbox.ops`. Each name loads on first use, so a context's `events.py` may
import this module before Django's apps are ready.
"""

from typing import TYPE_CHECKING

from outbox.core.surfaces import Surface

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


_SURFACE = Surface(__name__, SURFACE, offers="the kernel's surface is")


def __getattr__(name: str) -> object:
    return _SURFACE.load(name)


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
