"""What the admin's index lists under "Needs attention": for each database with the kernel's tables,
its open dead letters and its relays and workers gone silent (as the messaging overview judges
them). A few counts, no row read; a database that does not answer gives "unknown", not an error.
A project adds its own concerns (`Concern`) and renders the lot with `admin/outbox/needs_attention.html`.
"""

from dataclasses import dataclass

from django.db import DatabaseError
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import urlencode

from outbox.console.database_choice import PARAMETER
from outbox.core.working_database import kernel_databases
from outbox.models import DeadLetter
from outbox.relaying import heartbeats


@dataclass(frozen=True)
class Concern:
    """One line of the block: `count` things (None: unknown, its database did not answer), each a link."""

    name: str  # for the page's ids and the tests: "dead-letters", "silent-processes", ...
    count: int | None
    what: str  # "open dead letter(s)", shown after the count
    href: str
    where: str = ""  # the database, when there are several
    also: tuple[tuple[str, str], ...] = ()  # (label, href): other pages that show them


def needs_attention(user) -> list[Concern]:
    """The kernel's concerns that `user` may see: those present, and those unknown."""
    letters_seen, processes_seen = user.has_perm("outbox.view_deadletter"), user.has_perm("outbox.view_outboxmessage")
    if not (letters_seen or processes_seen):
        return []
    databases = kernel_databases()
    found = []
    for database in databases:
        chosen = urlencode({PARAMETER: database}) if len(databases) > 1 else ""
        where = database if chosen else ""
        try:  # two counts; a database that does not answer the first is not asked the second
            letters = (
                DeadLetter.objects.using(database).filter(status=DeadLetter.Status.OPEN).count() if letters_seen else 0
            )
            silent = heartbeats.silent_in(database) if processes_seen else 0
        except DatabaseError:
            letters, silent = None, None
        if letters != 0 and letters_seen:
            found.append(
                Concern(
                    name="dead-letters",
                    count=letters,
                    what=f"open dead letter{pluralize(letters or 0)}",
                    href=_url("admin:outbox_deadletter_changelist", f"status={DeadLetter.Status.OPEN}", chosen),
                    where=where,
                    also=(("in groups of one cause", _url("admin:outbox_deadletter_groups", chosen)),),
                )
            )
        if silent != 0 and processes_seen:
            found.append(
                Concern(
                    name="silent-processes",
                    count=silent,
                    what="silent relay or worker" if silent == 1 else "silent relays or workers",
                    href=_url("admin:outbox_overview", chosen) + "#relays-and-workers",
                    where=where,
                )
            )
    return found


def _url(name: str, *queries: str) -> str:
    query = "&".join(q for q in queries if q)
    return reverse(name) + (f"?{query}" if query else "")
