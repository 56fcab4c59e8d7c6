from datetime import UTC

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count

from outbox.console.dead_letter_actions import CannotResolve, discard_dead_letter, open_letters, replay_dead_letter
from outbox.core.dead_letters import Reason
from outbox.models import DeadLetter


class Command(BaseCommand):
    help = (
        "Operate on dead letters. `list` shows them (open ones by default) grouped or one per line; "
        "`replay` sends the chosen open ones again through the outbox; `discard` closes them with a note. "
        "An id that names no open letter matching the filters refuses the whole command: nothing is done."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["list", "replay", "discard"])
        parser.add_argument("ids", nargs="*", type=int, help="Dead-letter ids (default: every match of the filters).")
        parser.add_argument("--subscriber", default="")
        parser.add_argument("--reason", default="")
        parser.add_argument("--type", default="", help="Event type, e.g. order.placed.")
        parser.add_argument("--all", action="store_true", help="list: include replayed and discarded ones.")
        parser.add_argument("--groups", action="store_true", help="list: count per subscriber, reason and type.")
        parser.add_argument("--note", default="", help="Why (required for discard).")
        parser.add_argument("--by", default="command line", help="Who acts, for the audit trail.")

    def handle(self, *, action, ids, subscriber, reason, type, all, groups, note, by, **options):
        _refuse_an_unknown_reason(reason)
        letters = open_letters(subscriber=subscriber, reason=reason, type=type)
        if all and action == "list":
            letters = DeadLetter.objects.filter(pk__in=letters.values("pk")) | DeadLetter.objects.exclude(status="open")
        if ids:
            letters = letters.filter(pk__in=ids)
        if action == "list":
            return self._list(letters.order_by("id"), groups)
        if not ids and not (subscriber or reason or type):
            raise CommandError(f"{action} needs dead-letter ids or at least one of --subscriber, --reason, --type")
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

    def _list(self, letters, groups: bool) -> None:
        if groups:
            rows = list(letters.values("subscriber", "reason", "type").annotate(n=Count("id")).order_by("-n"))
            if rows:
                self.stdout.write(f"{'count':>6}  {'subscriber':<16} {'reason':<22} event type")
            for row in rows:
                self.stdout.write(f"{row['n']:>6}  {row['subscriber']:<16} {row['reason']:<22} {row['type'] or '?'}")
        else:
            rows = list(letters)
            if rows:
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
        if not rows:
            self.stdout.write("no dead letters match")


def _refuse_an_unknown_reason(reason: str) -> None:
    """A reason no letter can have is a typo, not an empty answer: the kernel's reasons, and those
    handlers gave with `Rejected`, which only the letters know."""
    if not reason or reason in set(Reason) or DeadLetter.objects.filter(reason=reason).exists():
        return
    given = sorted(set(DeadLetter.objects.values_list("reason", flat=True).distinct()) - set(Reason))
    raise CommandError(f"no such reason: {reason} (the reasons are {', '.join([*Reason, *given])})")
