"""`manage.py move_queues`: declare every subscriber queue anew as RABBITMQ_QUEUE_TYPE says,
keeping its messages (delivery_project/queue_moves.py). Stop relays and workers first."""

import dramatiq
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from delivery_project.queue_moves import QueueInUse, move_queues
from outbox.ops import QueueTypeRabbitmqBroker, queue_name, routing_table


class Command(BaseCommand):
    help = (
        "Move every subscriber queue (and its .DQ and .XQ) to the queue type RABBITMQ_QUEUE_TYPE names, "
        "messages included. Stop the relays and workers first; running it again after a failure is safe."
    )

    def handle(self, **options):
        broker = dramatiq.get_broker()
        if not isinstance(broker, QueueTypeRabbitmqBroker):
            raise CommandError("move_queues moves RabbitMQ queues: set BROKER_URL=amqp://...")
        subscribers = sorted({sub.subscriber for subs in routing_table().values() for sub in subs})
        self.stdout.write(f"moving {len(subscribers)} subscriber queues to {settings.RABBITMQ_QUEUE_TYPE} queues")
        try:
            moved = move_queues(broker, [queue_name(s) for s in subscribers], progress=self.stdout.write)
        except QueueInUse as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"done: {sum(moved.values())} messages kept")
