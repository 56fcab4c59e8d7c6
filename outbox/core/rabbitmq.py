"""Dramatiq's RabbitMQ broker as the kernel declares its queues (classic, or quorum for a cluster),
and pika's parameters for a list of nodes: what needs RabbitMQ's client (the `rabbitmq` extra)."""

import re

import pika
from dramatiq.brokers.rabbitmq import DEAD_MESSAGE_TTL, RabbitmqBroker
from dramatiq.common import xq_name

QUEUE_TYPES = ("classic", "quorum")
# What a quorum queue needs to keep Dramatiq's promises. Dead-lettering (a message Dramatiq
# rejects goes to the .XQ queue) is at-most-once on a quorum queue unless its strategy is
# at-least-once, which RabbitMQ allows only with overflow reject-publish. No x-max-priority:
# RabbitMQ 3.x quorum queues have no priorities (the project sets none).
QUORUM_ARGUMENTS = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


class QueueTypeRabbitmqBroker(RabbitmqBroker):
    """Dramatiq's RabbitMQ broker declaring every queue (.DQ and .XQ included) as `queue_type`, which Dramatiq has no
    public option for (`_build_queue_arguments` and `_declare_xq_queue` are overridden). A queue's type is fixed when
    it is declared: moving from classic to quorum queues means moving their messages (or new queue names)."""

    def __init__(self, *, queue_type: str = "classic", connection_name: str = "", **options):
        if queue_type not in QUEUE_TYPES:
            raise ValueError(f"queue_type is {queue_type!r}: one of {', '.join(QUEUE_TYPES)}")
        super().__init__(**options)
        self.queue_type = queue_type
        if connection_name:  # every connection this broker opens, the relay's publisher's included
            for parameters in self.parameters if isinstance(self.parameters, list) else [self.parameters]:
                parameters.client_properties = {"connection_name": connection_name}

    def _build_queue_arguments(self, queue_name):
        arguments = super()._build_queue_arguments(queue_name)
        if self.queue_type == "quorum":
            arguments.update(QUORUM_ARGUMENTS)
            arguments.update(self._no_delivery_limit())
        return arguments

    def _declare_xq_queue(self, queue_name):
        if self.queue_type != "quorum":
            return super()._declare_xq_queue(queue_name)
        arguments = {"x-queue-type": "quorum", "x-message-ttl": DEAD_MESSAGE_TTL}  # as Dramatiq's own .XQ
        return self.channel.queue_declare(queue=xq_name(queue_name), durable=True, arguments=arguments)

    def _no_delivery_limit(self) -> dict:
        """From RabbitMQ 4.0 a quorum queue drops (or dead-letters) a message handed out 20 times
        unless told otherwise; a message Dramatiq holds for its delay and hands back at every worker
        restart would be lost so. RabbitMQ 3.x has no default limit, and no -1 for "none"."""
        version = (self.connection._impl.server_properties or {}).get("version", b"0")
        major = re.match(rb"\d+", version if isinstance(version, bytes) else version.encode())
        return {"x-delivery-limit": -1} if major and int(major.group()) >= 4 else {}


def amqp_parameters(urls: list[str]) -> list[pika.URLParameters]:
    """pika's parameters for a list of nodes; a BlockingConnection tries them in turn."""
    return [pika.URLParameters(url) for url in urls]
