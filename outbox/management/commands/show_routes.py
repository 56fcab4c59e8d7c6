from django.core.management.base import BaseCommand

from outbox.subscriptions import actor_name, queue_name, routing_table


class Command(BaseCommand):
    help = "Print the routing table: each event type, its subscribers, their queues and handlers."

    def handle(self, **options):
        table = routing_table()
        if not table:
            self.stdout.write("no subscriptions")
            return
        for event_type, subs in table.items():
            self.stdout.write(event_type)
            for sub in subs:
                handler = f"{sub.handler.__module__}.{sub.handler.__qualname__}"
                versions = ",".join(str(v) for v in sorted(sub.versions))
                self.stdout.write(
                    f"  -> {sub.subscriber:<16} queue {queue_name(sub.subscriber)}, actor {actor_name(sub.subscriber)},"
                    f" v{versions}: {handler}"
                )
