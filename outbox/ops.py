"""What the deployable that runs the kernel uses of it, beside `outbox.api` (the contexts' messaging)
and `outbox.configuration` (its settings): health checks, metrics, its processes and queues, the
admin's wiring. The rest of the kernel is its inside and may change; an import contract
(pyproject.toml) refuses the deployable and the contexts any other module of it.

Health and metrics
    broker_urls, amqp_parameters   the broker's nodes from BROKER_URL, as the workers reach them
    describe_broker                BROKER_URL for a log line, its password left out
    kernel_databases               every database with the kernel's tables (a context may have its own)
    working_in                     the kernel working in one of them, for a block
    counters                       the kernel's Prometheus counters
    sweep_lag_seconds              how far behind the redelivery sweep is
    open_groups_everywhere         the open dead letters in groups of one cause, every database's
    OutboxMessage, DeadLetter      the outbox and the dead letters, to count

Processes and queues
    QueueTypeRabbitmqBroker        the RabbitMQ broker that declares each queue's type
    queue_name, routing_table      a subscriber's queue, and who subscribes to what

Wiring
    acting_as                      code that crosses contexts on purpose, under each context's role in turn
    ReadOnlyAdmin, timeline_link   the console's pieces for an app's own admin pages

Each name is loaded on first use, as `outbox.api`'s are.
"""

from importlib import import_module
from typing import TYPE_CHECKING

# name -> (module, attribute): the one list of what the kernel promises the deployable.
SURFACE: dict[str, tuple[str, str]] = {
    "broker_urls": ("outbox.core.brokers", "broker_urls"),
    "amqp_parameters": ("outbox.core.brokers", "amqp_parameters"),
    "describe_broker": ("outbox.core.brokers", "describe"),
    "kernel_databases": ("outbox.core.working_database", "kernel_databases"),
    "working_in": ("outbox.core.working_database", "working_in"),
    "counters": ("outbox.observability.metrics", "counters"),
    "sweep_lag_seconds": ("outbox.relaying.sweep", "lag_seconds"),
    "open_groups_everywhere": ("outbox.console.dead_letter_groups", "open_groups_everywhere"),
    "OutboxMessage": ("outbox.models", "OutboxMessage"),
    "DeadLetter": ("outbox.models", "DeadLetter"),
    "QueueTypeRabbitmqBroker": ("outbox.core.brokers", "QueueTypeRabbitmqBroker"),
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
    "OutboxMessage",
    "DeadLetter",
    "QueueTypeRabbitmqBroker",
    "queue_name",
    "routing_table",
    "acting_as",
    "ReadOnlyAdmin",
    "timeline_link",
]


def __getattr__(name: str):
    try:
        module, attribute = SURFACE[name]
    except KeyError:
        raise AttributeError(f"outbox.ops has no {name!r}: it offers {', '.join(__all__)}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and editors; at run time each name loads on first use
    from outbox.admin import ReadOnlyAdmin, timeline_link
    from outbox.console.dead_letter_groups import open_groups_everywhere
    from outbox.core.brokers import QueueTypeRabbitmqBroker, amqp_parameters, broker_urls
    from outbox.core.brokers import describe as describe_broker
    from outbox.core.subscriptions import queue_name, routing_table
    from outbox.core.working_database import kernel_databases, working_in
    from outbox.models import DeadLetter, OutboxMessage
    from outbox.observability.metrics import counters
    from outbox.placement import acting_as
    from outbox.relaying.sweep import lag_seconds as sweep_lag_seconds
