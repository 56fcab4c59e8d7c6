"""What the project that runs the kernel uses of it, beside `outbox.api` (its contexts' messaging) and
`outbox.configuration` (its settings): health checks and metrics (the broker's nodes, every
database with the kernel's tables, the counters, the sweep's lag, the dead-letter groups), its
processes and queues, and the admin's wiring (ReadOnlyAdmin, timeline_link, acting_as, the index's
needs_attention). The guide's Operations page says what each does. Each name loads on first use, as `outbox.api`'s do.
"""

from typing import TYPE_CHECKING

from outbox.core.surfaces import Surface

# name -> (module, attribute): the one list of what the kernel promises the deployable.
SURFACE: dict[str, tuple[str, str]] = {
    "broker_urls": ("outbox.core.brokers", "broker_urls"),
    "amqp_parameters": ("outbox.core.rabbitmq", "amqp_parameters"),
    "describe_broker": ("outbox.core.brokers", "describe"),
    "kernel_databases": ("outbox.core.working_database", "kernel_databases"),
    "working_in": ("outbox.core.working_database", "working_in"),
    "counters": ("outbox.observability.metrics", "counters"),
    "sweep_lag_seconds": ("outbox.relaying.sweep", "lag_seconds"),
    "open_groups_everywhere": ("outbox.console.dead_letter_groups", "open_groups_everywhere"),
    "needs_attention": ("outbox.console.attention", "needs_attention"),
    "Concern": ("outbox.console.attention", "Concern"),
    "OutboxMessage": ("outbox.models", "OutboxMessage"),
    "DeadLetter": ("outbox.models", "DeadLetter"),
    "QueueTypeRabbitmqBroker": ("outbox.core.rabbitmq", "QueueTypeRabbitmqBroker"),
    "queue_name": ("outbox.core.subscriptions", "queue_name"),
    "routing_table": ("outbox.core.subscriptions", "routing_table"),
    "acting_as": ("outbox.placement", "acting_as"),
    "ReadOnlyAdmin": ("outbox.admin", "ReadOnlyAdmin"),
    "timeline_link": ("outbox.admin", "timeline_link"),
}

__all__ = [  # SURFACE's names, written out so that tools reading the source see them too
    "broker_urls",
    "amqp_parameters",
    "describe_broker",
    "kernel_databases",
    "working_in",
    "counters",
    "sweep_lag_seconds",
    "open_groups_everywhere",
    "needs_attention",
    "Concern",
    "OutboxMessage",
    "DeadLetter",
    "QueueTypeRabbitmqBroker",
    "queue_name",
    "routing_table",
    "acting_as",
    "ReadOnlyAdmin",
    "timeline_link",
]


_SURFACE = Surface(__name__, SURFACE, offers="it offers")


def __getattr__(name: str) -> object:
    return _SURFACE.load(name)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and editors; at run time each name loads on first use
    from outbox.admin import ReadOnlyAdmin, timeline_link
    from outbox.console.attention import Concern, needs_attention
    from outbox.console.dead_letter_groups import open_groups_everywhere
    from outbox.core.brokers import broker_urls
    from outbox.core.brokers import describe as describe_broker
    from outbox.core.rabbitmq import QueueTypeRabbitmqBroker, amqp_parameters
    from outbox.core.subscriptions import queue_name, routing_table
    from outbox.core.working_database import kernel_databases, working_in
    from outbox.models import DeadLetter, OutboxMessage
    from outbox.observability.metrics import counters
    from outbox.placement import acting_as
    from outbox.relaying.sweep import lag_seconds as sweep_lag_seconds
