"""Failed messages in groups: when a downstream system breaks, hundreds of letters share one cause.

A group is the open dead letters of one subscriber, event type and reason whose errors share a
fingerprint (`outbox.core.fingerprints`: the error's type and its message with ids, numbers and
times taken out). Operators replay or discard a whole group at once, from the admin or
`manage.py dead_letters`, with the safety one letter has: only open letters, a discard needs a
note, and a letter replayed is no longer open, so a second replay of the group finds nothing to
send twice. A group that reappears after its replay says so: letters that were replayed and failed
again (the cause is not fixed), and letters that failed for the first time after the group's last
replay (they joined while the replay was under way, or since: the replay did not cover them).
Each database with the kernel's tables has its own letters, hence its own groups: `open_groups()`
reads the one the kernel works in, `open_groups_everywhere()` every one (what pages someone).
"""

import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db import DatabaseError
from django.db.models import Count, Max, Min, Q

from outbox.console.dead_letter_actions import CannotResolve, discard_dead_letter, replay_dead_letter
from outbox.core.dead_letters import Reason
from outbox.core.subscriptions import subscription
from outbox.core.working_database import kernel_databases, working_in
from outbox.models import DeadLetter


@dataclass(frozen=True)
class Group:
    key: str  # ten hex digits naming (subscriber, event type, reason, fingerprint): a group's id
    database: str  # the one its letters are on: its subscriber's context's
    subscriber: str
    event_type: str
    reason: str
    fingerprint: str
    letters: int
    failed_again_after_replay: int  # open letters that had been replayed: the cause is not fixed
    last_replayed_at: datetime | None  # the group's latest replay, of any of its letters, open or not
    new_since_replay: int  # open letters never replayed that first failed after that replay
    first_failed_at: datetime
    last_failed_at: datetime
    sample_id: int  # the latest letter, to read its envelope and traceback
    exception_type: str
    error: str  # the sample's, on one line

    @property
    def replayable(self) -> bool:
        """Whether a replay could send its letters again: each holds an envelope (not `unreadable` or
        `invalid_envelope`), to a subscriber that still handles its type."""
        return self.reason not in NO_ENVELOPE and subscription(self.subscriber, self.event_type) is not None

    def as_json(self) -> dict:
        fields = asdict(self)
        fields["first_failed_at"] = self.first_failed_at.isoformat()
        fields["last_failed_at"] = self.last_failed_at.isoformat()
        fields["last_replayed_at"] = self.last_replayed_at.isoformat() if self.last_replayed_at else None
        return fields


NO_ENVELOPE = (Reason.UNREADABLE, Reason.INVALID_ENVELOPE)  # letters with nothing a replay could send
_KEY = ("subscriber", "type", "reason", "fingerprint")  # what makes a group, as DeadLetter's fields


def group_key(subscriber: str, event_type: str, reason: str, fingerprint: str) -> str:
    return hashlib.sha256(f"{subscriber}\n{event_type}\n{reason}\n{fingerprint}".encode()).hexdigest()[:10]


def open_groups(*, subscriber: str = "", reason: str = "", event_type: str = "") -> list[Group]:
    """The groups of open letters, the largest first; one aggregate, then one read of each sample."""
    letters = DeadLetter.objects.filter(status=DeadLetter.Status.OPEN)
    for field, value in (("subscriber", subscriber), ("reason", reason), ("type", event_type)):
        if value:
            letters = letters.filter(**{field: value})
    rows = (
        letters.values(*_KEY)
        .annotate(
            letters=Count("id"),
            again=Count("id", filter=Q(replays__gt=0)),
            first=Min("first_failed_at"),
            last=Max("last_failed_at"),
            sample=Max("id"),
        )
        .order_by("-letters", "-last")
    )
    rows = list(rows)
    samples = DeadLetter.objects.in_bulk([row["sample"] for row in rows])
    replayed = _last_replays()
    groups = []
    for row in rows:
        key = tuple(row[field] for field in _KEY)
        last_replay = replayed.get(key)
        groups.append(
            Group(
                key=group_key(*key),
                database=letters.db,
                subscriber=row["subscriber"],
                event_type=row["type"],
                reason=row["reason"],
                fingerprint=row["fingerprint"],
                letters=row["letters"],
                failed_again_after_replay=row["again"],
                last_replayed_at=last_replay,
                new_since_replay=_new_since(key, last_replay, letters) if last_replay else 0,
                first_failed_at=row["first"],
                last_failed_at=row["last"],
                sample_id=row["sample"],
                exception_type=samples[row["sample"]].exception_type,
                error=" ".join(samples[row["sample"]].error.split())[:300],
            )
        )
    return groups


def open_groups_everywhere(**filters) -> tuple[list[Group], list[str]]:
    """Every kernel database's groups, the largest first, and the databases that did not answer:
    one away leaves the others' groups listed, rather than none."""
    groups, unanswered = [], []
    for database in kernel_databases():
        try:
            with working_in(database):
                groups += open_groups(**filters)
        except DatabaseError:
            unanswered.append(database)
    return sorted(groups, key=lambda group: (group.letters, group.last_failed_at), reverse=True), unanswered


def _last_replays() -> dict[tuple, datetime]:
    """The latest replay of each group that has had one, whatever its letters' status now."""
    rows = (
        DeadLetter.objects.filter(last_replayed_at__isnull=False).values(*_KEY).annotate(last=Max("last_replayed_at"))
    )
    return {tuple(row[field] for field in _KEY): row["last"] for row in rows}


def _new_since(key: tuple, last_replay: datetime, letters) -> int:
    return letters.filter(**dict(zip(_KEY, key, strict=True)), replays=0, first_failed_at__gt=last_replay).count()


class NoSuchGroup(CannotResolve):
    """No open letter is in a group of that key (it was replayed or discarded meanwhile, or mistyped)."""


def letters_of(key: str):
    """The open letters of the group `key`, oldest first."""
    for group in open_groups():
        if group.key == key:
            return DeadLetter.objects.filter(
                status=DeadLetter.Status.OPEN,
                subscriber=group.subscriber,
                type=group.event_type,
                reason=group.reason,
                fingerprint=group.fingerprint,
            ).order_by("id")
    raise NoSuchGroup(f"no open dead letters in a group {key!r}")


def replay_group(*, key: str, by: str, note: str = "") -> tuple[int, list[str]]:
    """Replay every open letter of the group; (how many, what could not be replayed and why)."""
    return each_letter(letters_of(key), lambda letter: replay_dead_letter(letter_id=letter.pk, by=by, note=note))


def discard_group(*, key: str, by: str, note: str) -> tuple[int, list[str]]:
    """Discard every open letter of the group, with the note the audit trail needs."""
    if not note.strip():
        raise CannotResolve("a discard needs a note saying why")
    return each_letter(letters_of(key), lambda letter: discard_dead_letter(letter_id=letter.pk, by=by, note=note))


def each_letter(letters, act) -> tuple[int, list[str]]:
    """`act` on each letter: (how many, what could not be done and why)."""
    done, problems = 0, []
    for letter in list(letters):
        try:
            act(letter)
            done += 1
        except CannotResolve as error:  # closed meanwhile by someone else, or no longer replayable
            problems.append(str(error))
    return done, problems
