"""What the messaging kernel counts, for Prometheus (prometheus_client).

Counters and histograms live in the process that does the work (relay, worker). With
PROMETHEUS_MULTIPROC_DIR set to a directory the processes of a host share, each writes its own
file there and any `/metrics` on that host (the web's, or a relay's `--metrics-port`) sums them.
Values that are state rather than events (backlog, dead letters open) are read from the database
when scraped, by the project's metrics view (the guide's Operations page: `outbox.ops.counters`).
"""

import os

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, multiprocess, start_http_server

RELAYED = Counter(
    "outbox_relayed_events", "Outbox rows the broker confirmed (every copy), by event type", ["event_type"]
)
SEND_FAILURES = Counter(
    "outbox_send_failures",
    "Failed sends: a row the broker refused or that could not be encoded (row), or a broker outage (broker)",
    ["kind"],
)
HANDLED = Counter(
    "outbox_handled_messages",
    "Messages a subscriber took from its queue, by outcome: processed, duplicate (skipped by the inbox), "
    "stale (older than one applied on its stream), dead_lettered, retried",
    ["subscriber", "event_type", "outcome"],
)
SWEPT = Counter(
    "outbox_swept_rows",
    "The redelivery sweep's work: unsettled rows it looked at, settled (every recipient acknowledged), "
    "copies it sent again, and events dead-lettered as never_acknowledged",
    ["outcome"],
)
QUEUE_UNAVAILABLE = Gauge(
    "outbox_queue_unavailable",
    "1 while the broker returns a relay's copies for this queue as unroutable (missing, or its node down)",
    ["queue"],
    multiprocess_mode="max",
)
NOTIFY_UNHEARD = Gauge(
    "outbox_relay_notify_unheard",
    "1 while a relay's LISTEN does not hear the NOTIFY it sends itself through DATABASE_URL "
    "(behind a transaction pooler without OUTBOX_LISTEN_CONNECTION): it wakes only by polling",
    multiprocess_mode="max",
)
PACKS_REDONE = Counter(
    "outbox_pack_transactions_redone",
    "A pack's shared transaction rolled back at a failed handler, and its envelopes handled again without it",
    ["subscriber"],
)
HANDLER_SECONDS = Histogram(
    "outbox_handler_seconds",
    "Time from taking a message to its outcome (inbox check, handler and commit), by subscriber and event type",
    ["subscriber", "event_type"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def counters() -> CollectorRegistry:
    """This process's counters; in multiprocess mode, those of every process sharing the directory."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def serve_metrics(port: int) -> None:
    """Serve the counters on `port` from a thread (a relay on a host without a web process)."""
    start_http_server(port, registry=counters())
