from datetime import UTC

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from outbox.console.dead_letter_actions import CannotResolve, discard_dead_letter, open_letters, replay_dead_letter
from outbox.console.dead_letter_groups import discard_group, open_groups, replay_group
from outbox.core.dead_letters import Reason
from outbox.core.working_database import kernel_databases, serving
from outbox.management.arguments import kernel_database
from outbox.management.pipes import QuietWhenStdoutCloses
from outbox.models import DeadLetter


class Command(QuietWhenStdoutCloses, BaseCommand):
    help = (
        "Operate on dead letters. `list` shows them (open ones by default) grouped or one per line; "
        "`replay` sends the chosen open ones again through the outbox; `discard` closes them with a note. "
        "`list --groups` shows the open ones grouped by cause, each group with a key that `replay --group` "
        "and `discard --group` take. An id that names no open letter matching the filters refuses the whole "
        "command: nothing is done."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["list", "replay", "discard"])
        kernel_database(
            parser,
            what="dead letters these are (its contexts' subscribers')",
            by_default="by default list shows every database's, and replay and discard act on the one whose "
            "open letters match.",
        )
        parser.add_argument("ids", nargs="*", type=int, help="Dead-letter ids (default: every match of the filters).")
        # The filters a replay or a discard needs one of (or ids); its refusal lists this group's options.
        filters = parser.add_argument_group("filters")
        filters.add_argument("--subscriber", default="")
        filters.add_argument("--reason", default="")
        filters.add_argument("--type", default="", help="Event type, e.g. order.placed.")
        parser.add_argument("--all", action="store_true", help="list: include replayed and discarded ones.")
        parser.add_argument(
            "--groups",
            action="store_true",
            help="list: the open letters in groups of one cause (subscriber, event type, reason, error fingerprint).",
        )
        filters.add_argument("--group", default="", help="replay, discard: every open letter of this group (its key).")
        self.filters = [action.option_strings[0] for action in filters._group_actions]
        parser.add_argument("--note", default="", help="Why (required for discard).")
        parser.add_argument("--by", default="command line", help="Who acts, for the audit trail.")

    def handle(self, *, database, **options):
        if database:
            with serving(database):
                return self._run(**options)
        everywhere = kernel_databases()
        if options["action"] == "list" or len(everywhere) == 1:
            for alias in everywhere:  # the letters of each database, under its name when there are several
                with serving(alias):
                    self._run(**options, heading=f"database {alias}:" if len(everywhere) > 1 else "")
            return
        with serving(self._the_one_database_concerned(everywhere, **options)):
            self._run(**options)

    @staticmethod
    def _the_one_database_concerned(everywhere: list[str], *, ids, subscriber, reason, type, group, **options) -> str:
        """Without --database, a replay or a discard acts where its letters are: the one database
        whose open letters match (a letter's id is its database's own), or it asks which."""
        found = []
        for alias in everywhere:
            with serving(alias):
                letters = open_letters(subscriber=subscriber, reason=reason, type=type)
                if (group and any(g.key == group for g in open_groups())) or (
                    not group and letters.filter(**({"pk__in": ids} if ids else {})).exists()
                ):
                    found.append(alias)
        if len(found) > 1:
            raise CommandError(f"open dead letters match on {', '.join(found)}: say which with --database")
        return found[0] if found else DEFAULT_DB_ALIAS

    def _run(self, *, action, ids, subscriber, reason, type, all, groups, group, note, by, heading="", **options):
        _refuse_an_unknown_reason(reason)
        if heading:
            self.stdout.write(heading)
        if group:
            return self._act_on_group(action, group, ids or subscriber or reason or type, note, by)
        if action == "list" and groups:
            return self._list_groups(open_groups(subscriber=subscriber, reason=reason, event_type=type))
        letters = open_letters(subscriber=subscriber, reason=reason, type=type)
        if all and action == "list":
            letters = DeadLetter.objects.filter(pk__in=letters.values("pk")) | DeadLetter.objects.exclude(status="open")
        if ids:
            letters = letters.filter(pk__in=ids)
        if action == "list":
            return self._list(letters.order_by("id"))
        if not ids and not (subscriber or reason or type):
            raise CommandError(f"{action} needs dead-letter ids or at least one of {', '.join(self.filters)}")
        if action == "discard" and not note.strip():
            raise CommandError("discard needs a --note saying why, for the audit trail")
        if ids:
            self._refuse_unless_all_match(action, ids, letters)
        done, failed = 0, []
        for letter in list(letters):
            try:
                if action == "replay":
                    replay_dead_letter(letter_id=letter.pk, by=by, note=note)
                else:
                    discard_dead_letter(letter_id=letter.pk, by=by, note=note)
                done += 1
            except CannotResolve as error:
                failed.append(str(error))
        for problem in failed:
            self.stderr.write(problem)
        self.stdout.write(
            f"{action}ed {done} dead letter(s)" if action == "discard" else f"replayed {done} dead letter(s)"
        )
        if failed:
            raise CommandError(f"{len(failed)} could not be {action}ed")

    @staticmethod
    def _refuse_unless_all_match(action: str, ids: list[int], letters) -> None:
        """All or nothing: when one of the ids names no open letter that matches the filters, none
        of them is touched. Whoever typed 999999 for 99999 wants to look again, not a half-done
        batch to untangle; and "replayed 0" with exit status 0 would look like success."""
        missing = sorted(set(ids) - set(letters.values_list("pk", flat=True)))
        if not missing:
            return
        statuses = dict(DeadLetter.objects.filter(pk__in=missing).values_list("pk", "status"))
        problems = []
        for pk in missing:
            if pk not in statuses:
                problems.append(f"there is no dead letter {pk}")
            elif statuses[pk] != DeadLetter.Status.OPEN:
                problems.append(f"dead letter {pk} is {statuses[pk]}, not open")
            else:
                problems.append(f"dead letter {pk} does not match the filters")
        raise CommandError(f"nothing {action}ed: {'; '.join(problems)}")

    def _act_on_group(self, action: str, key: str, filters, note: str, by: str) -> None:
        if action == "list":
            raise CommandError("--group is for replay and discard; list --groups shows the groups and their keys")
        if filters:
            raise CommandError("--group takes the whole group: no ids, --subscriber, --reason or --type beside it")
        if action == "discard" and not note.strip():
            raise CommandError("discard needs a --note saying why, for the audit trail")
        try:
            if action == "replay":
                done, problems = replay_group(key=key, by=by, note=note)
            else:
                done, problems = discard_group(key=key, by=by, note=note)
        except CannotResolve as error:
            raise CommandError(str(error)) from error
        for problem in problems:
            self.stderr.write(problem)
        self.stdout.write(f"{action}ed {done} dead letter(s) of group {key}")
        if problems:
            raise CommandError(f"{len(problems)} could not be {action}ed")

    def _list_groups(self, groups) -> None:
        if not groups:
            self.stdout.write("no dead letters match")
            return
        self.stdout.write(
            f"{'letters':>7}  {'group':<10}  {'subscriber':<16} {'reason':<20} {'event type':<26} "
            f"{'first and last failed (UTC)':<36}  error"
        )
        for g in groups:
            again = g.failed_again_after_replay
            first, last = g.first_failed_at.astimezone(UTC), g.last_failed_at.astimezone(UTC)
            self.stdout.write(
                f"{g.letters:>7}  {g.key:<10}  {g.subscriber:<16} {g.reason:<20} {g.event_type or '?':<26} "
                f"{first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M}  {g.error[:80]}"
                + (f"  (failed again after replay: {again})" if again else "")
                + (f"  (new since its replay: {g.new_since_replay})" if g.new_since_replay else "")
            )

    def _list(self, letters) -> None:
        rows = list(letters)
        if not rows:
            self.stdout.write("no dead letters match")
            return
        self.stdout.write(
            f"{'id':>6}  {'status':<9} {'subscriber':<16} {'reason':<22} {'event type':<26} "
            "attempts, last failed (UTC)  error"
        )
        for letter in rows:
            error = " ".join(letter.error.split())  # one row a letter, whatever the error spans
            self.stdout.write(
                f"{letter.pk:>6}  {letter.status:<9} {letter.subscriber:<16} {letter.reason:<22} "
                f"{letter.type or '?':<26} attempts {letter.attempts}, "
                f"last {letter.last_failed_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}  {error[:80]}"
            )


def _refuse_an_unknown_reason(reason: str) -> None:
    """A reason no letter can have is a typo, not an empty answer: the kernel's reasons, and those
    handlers gave with `Rejected`, which only the letters know."""
    if not reason or reason in set(Reason) or DeadLetter.objects.filter(reason=reason).exists():
        return
    given = sorted(set(DeadLetter.objects.values_list("reason", flat=True).distinct()) - set(Reason))
    raise CommandError(f"no such reason: {reason} (the reasons are {', '.join([*Reason, *given])})")
