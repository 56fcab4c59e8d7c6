"""Where each context's data lives, and under which role its code runs: the kernel's one seam for it.

The kernel asks it once at each entry point, as Django's ORM asks its router: a dispatch or a pack
(`handling_for`), a service's transaction (`atomic(context)`), a request (the `context_roles`
middleware), a relay and its sweep (a subscriber's database). Everything below works in the
database the entry point chose (outbox.core.working_database). On the default topology (one
database, no `OUTBOX_CONTEXTS`) each answer is `default` and the project's own role, and nothing
is set. Inside: `databases` (a context on a database of its own, the router), `roles` (who runs as
whom), `grants` and `rows` (what `migrate` makes: schemas, roles, row-level security), `moves`
(`move_context`).
"""

from collections.abc import Iterator
from contextlib import contextmanager

from outbox.core.subscriptions import context_of
from outbox.core.working_database import working_in
from outbox.placement import roles
from outbox.placement.databases import atomic, connection_of, database_of, database_of_subscriber, routed
from outbox.placement.roles import acting_as, role_of

__all__ = [
    "acting_as",
    "atomic",
    "connection_of",
    "database_of",
    "database_of_subscriber",
    "handling_for",
    "role_of",
    "routed",
]


@contextmanager
def handling_for(subscriber: str, *, keep_role: bool) -> Iterator[None]:
    """A subscriber's work: the kernel working in its context's database (its inbox, cursors and letters are beside
    its tables), its code under its context's role (through a pooler each transaction's, on-commit work's too).
    `keep_role`: a worker's thread keeps the role for its next message, most often of the same context."""
    context = context_of(subscriber)
    before = roles.enter(context)
    try:
        with working_in(database_of(context)), roles.each_transaction_acting_as(context):
            yield
    finally:
        if not keep_role:
            roles.leave(before)
