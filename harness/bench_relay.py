"""A relay process for `manage.py bench`, started by multiprocessing's spawn: it sets Django up
itself (importing nothing of the project first), then waits for the start signal."""

import os


def relay_process(env: dict[str, str], ready, go, done) -> None:
    os.environ.update(env)
    import django

    django.setup()
    from outbox.models import OutboxMessage
    from outbox.relaying.relay import Relay

    relay = Relay()
    OutboxMessage.objects.exists()  # connect before the clock starts
    ready.set()
    go.wait()
    done.put(relay.drain())
