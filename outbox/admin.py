"""The operators' console for messaging: dead letters to replay or discard, the outbox's health, timelines."""

import json
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.db.models import Count, Min, Sum
from django.http import HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from outbox import placement
from outbox.console import choreography_map
from outbox.console.database_choice import (
    PARAMETER,
    InChosenDatabase,
    choice,
    in_chosen,
    open_letters_elsewhere,
    reading_chosen_database,
)
from outbox.console.dead_letter_actions import CannotResolve, discard_dead_letter, open_letters, replay_dead_letter
from outbox.console.dead_letter_groups import each_letter, letters_of, open_groups
from outbox.console.timeline import correlation_timeline
from outbox.core.subscriptions import actor_name, queue_name, routing_table
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, StreamCursor
from outbox.relaying import heartbeats


class ReadOnlyAdmin(admin.ModelAdmin):
    """State and messages are facts: operators read them here and change them only through actions."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def audited(self, request, obj, action: str, service, /, **arguments):
        """Call an operator action's service and leave its audit record (Django's admin log: who,
        when, on what, the note) in one transaction, so neither exists without the other."""
        note = arguments.get("note", "")
        # The row's database outermost, so that it commits last: a replay's copy (on its event's
        # database) and the log entry (on default's) are committed before the letter says "replayed".
        with transaction.atomic(using=router.db_for_write(self.model)), transaction.atomic():
            result = service(**arguments)
            self.log_change(request, obj, f"{action}: {note}" if note else action)
        return result

    def _may(self, request, codename: str) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")


def timeline_link(correlation_id: UUID | None, label: str = "timeline") -> str:
    """A link to the console's timeline of a correlation (a whole story), or a dash."""
    if not correlation_id:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse("admin:outbox_timeline", args=[correlation_id]), label)


def _pretty(value) -> str:
    return format_html("<pre style='white-space: pre-wrap'>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


@admin.register(OutboxMessage)
class OutboxMessageAdmin(InChosenDatabase, ReadOnlyAdmin):
    list_display = [
        "id",
        "type",
        "version",
        "source",
        "stream",
        "sequence",
        "available_at",
        "published_at",
        "target_subscriber",
    ]
    list_filter = ["type", "source", ("published_at", admin.EmptyFieldListFilter)]
    search_fields = ["=message_id", "=correlation_id", "stream"]
    readonly_fields = ["pretty_payload", "correlation"]
    exclude = ["payload"]

    @admin.display(description="payload")
    def pretty_payload(self, row):
        return _pretty(row.payload)

    @admin.display(description="correlation")
    def correlation(self, row):
        return timeline_link(row.correlation_id, str(row.correlation_id))

    def get_urls(self):
        def view(function):
            def viewer_only(request, *args, **kwargs):
                if not self.has_view_permission(request):
                    raise PermissionDenied
                return function(request, *args, **kwargs)

            return self.admin_site.admin_view(viewer_only)

        return [
            path("overview/", view(reading_chosen_database(self.overview)), name="outbox_overview"),
            path("timeline/<uuid:correlation_id>/", view(self.timeline), name="outbox_timeline"),
            *super().get_urls(),
        ]

    def overview(self, request):
        """Pending rows and their age per event type, inbox and dead-letter counts, the routing table."""
        now = timezone.now()
        pending = (
            OutboxMessage.objects.filter(published_at__isnull=True)
            .values("type")
            .annotate(count=Count("id"), oldest=Min("available_at"))
            .order_by("-count")
        )
        for row in pending:
            row["due"] = OutboxMessage.objects.filter(
                type=row["type"], published_at__isnull=True, available_at__lte=now
            ).count()
            row["age"] = now - row["oldest"] if row["oldest"] <= now else None
        seen, unanswered = heartbeats.seen_within_a_day()
        context = {
            **self.admin_site.each_context(request),
            "title": "Messaging overview",
            **choice(request),
            "choreography": mark_safe(  # drawn by outbox.console.svg, which escapes every text it is given
                choreography_map.to_svg(
                    choreography_map.graph(),
                    counts=choreography_map.edge_counts(
                        since=now - timedelta(hours=1), database_of=placement.database_of_subscriber
                    ),
                    links=lambda subscriber, event_type: _edge_links(subscriber, event_type, request),
                )
            ),
            "pending": pending,
            "inbox": InboxMessage.objects.values("subscriber")
            .annotate(processed=Count("id"), duplicates=Sum("duplicates"))
            .order_by("subscriber"),
            "ordering": StreamCursor.objects.values("subscriber")
            .annotate(streams=Count("id"), gaps=Sum("gaps"), stale=Sum("stale"))
            .order_by("subscriber"),
            "heartbeats": seen,
            "unanswered": unanswered,
            "dead": open_letters()
            .values("subscriber", "reason", "type")
            .annotate(count=Count("id"))
            .order_by("-count"),
            "dead_elsewhere": open_letters_elsewhere(request),
            "routes": [
                (
                    event_type,
                    [
                        (
                            s.subscriber,
                            queue_name(s.subscriber),
                            actor_name(s.subscriber),
                            f"{s.handler.__module__}.{s.handler.__qualname__}",
                        )
                        for s in subs
                    ],
                )
                for event_type, subs in routing_table().items()
            ],
        }
        return TemplateResponse(request, "admin/outbox/overview.html", context)

    def timeline(self, request, correlation_id: UUID):
        context = {
            **self.admin_site.each_context(request),
            "title": f"Timeline of {correlation_id}",
            "events": correlation_timeline(correlation_id),
            "correlation_id": correlation_id,
        }
        return TemplateResponse(request, "admin/outbox/timeline.html", context)

    def changelist_view(self, request, extra_context=None):
        extra = {"overview_url": in_chosen(reverse("admin:outbox_overview"), request), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)


@admin.register(InboxMessage)
class InboxMessageAdmin(InChosenDatabase, ReadOnlyAdmin):
    list_display = ["subscriber", "type", "message_id", "processed_at", "duplicates"]
    list_filter = ["subscriber", "type"]
    search_fields = ["=message_id", "=correlation_id"]


class DeadLetterStatus(admin.SimpleListFilter):
    """The list opens on the open letters, what needs an operator; "All" is one click away (an
    explicit choice, since Django's own "All" is what a bare URL shows)."""

    title = "status"
    parameter_name = "status"
    ALL = "all"

    def lookups(self, request, model_admin):
        return [*DeadLetter.Status.choices, (self.ALL, "All")]

    def value(self):
        return super().value() or DeadLetter.Status.OPEN

    def choices(self, changelist):
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request, queryset):
        return queryset if self.value() == self.ALL else queryset.filter(status=self.value())


@admin.register(DeadLetter)
class DeadLetterAdmin(InChosenDatabase, ReadOnlyAdmin):
    # Five narrow columns: nine (each field its own) ran past the page at 1280 px beside the filters.
    list_display = ["letter", "reason_and_attempts", "status_and_replays", "last_failed", "timeline"]
    list_display_links = ["letter"]
    list_filter = [DeadLetterStatus, "subscriber", "reason", "type", "last_failed_at"]
    search_fields = ["=message_id", "=correlation_id", "error"]
    actions = ["replay", "replay_group", "discard"]
    readonly_fields = [
        "subscriber",
        "type",
        "reason",
        "status",
        "attempts",
        "replays",
        "first_failed_at",
        "last_failed_at",
        "exception_type",
        "error",
        "timeline",
        "pretty_envelope",
        "pretty_traceback",
        "note",
        "resolved_at",
        "resolved_by",
    ]
    fields = tuple(readonly_fields)

    @admin.display(description="timeline")
    def timeline(self, letter):
        return timeline_link(letter.correlation_id, "timeline")

    def get_urls(self):
        groups = self.admin_site.admin_view(reading_chosen_database(self.groups))
        return [path("groups/", groups, name="outbox_deadletter_groups"), *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        extra = {"groups_url": in_chosen(reverse("admin:outbox_deadletter_groups"), request), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def groups(self, request):
        """The open letters in groups of one cause, each replayed or discarded whole (a POST)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            self._act_on_group(request)
            return HttpResponseRedirect(request.get_full_path())  # the database chosen kept
        context = {
            **self.admin_site.each_context(request),
            "title": "Dead letters in groups",
            **choice(request),
            "groups": open_groups(),
            "may_replay": self.has_replay_permission(request),
            "may_discard": self.has_discard_permission(request),
            "opts": self.model._meta,
            "changelist_url": in_chosen(reverse("admin:outbox_deadletter_changelist"), request),
        }
        return TemplateResponse(request, "admin/outbox/dead_letter_groups.html", context)

    def _act_on_group(self, request) -> None:
        action, key, note = (
            request.POST.get("action"),
            request.POST.get("key", ""),
            request.POST.get("note", "").strip(),
        )
        service: Callable[..., object]
        if action == "replay" and self.has_replay_permission(request):
            service, note = replay_dead_letter, note or "replayed with its group from the admin"
        elif action == "discard" and self.has_discard_permission(request):
            service = discard_dead_letter
        else:
            raise PermissionDenied
        try:
            if not note:
                raise CannotResolve("a discard needs a note saying why")
            letters = letters_of(key)
        except CannotResolve as error:
            self.message_user(request, str(error), messages.WARNING)
            return
        # Each letter with its audit entry, as the list's actions leave them (the group's services,
        # which the command line uses, record who and why on the letters alone).
        done, problems = each_letter(
            letters,
            lambda letter: self.audited(
                request,
                letter,
                f"{action}ed with its group",
                service,
                letter_id=letter.pk,
                by=self._who(request),
                note=note,
            ),
        )
        if done or not problems:
            self.message_user(
                request, f"{action.capitalize()}ed {done} dead letter(s) of group {key}.", messages.SUCCESS
            )
        else:
            self.message_user(request, f"{action.capitalize()}ed none of group {key}'s letters.", messages.ERROR)
        for problem in problems:
            self.message_user(request, problem, messages.WARNING)

    @admin.display(description="envelope")
    def pretty_envelope(self, letter):
        return _pretty(letter.envelope)

    @admin.display(description="letter", ordering="type")
    def letter(self, letter):
        return format_html(
            "{}<br><small>to {} · #{}</small>", letter.type or "(no event type)", letter.subscriber, letter.pk
        )

    @admin.display(description="reason", ordering="reason")
    def reason_and_attempts(self, letter):
        attempts = letter.attempts
        return format_html("{} <small>after {} attempt{}</small>", letter.reason, attempts, pluralize(attempts))

    @admin.display(description="status", ordering="status")
    def status_and_replays(self, letter):
        replays = format_html(" <small>{} replay{}</small>", letter.replays, pluralize(letter.replays))
        return format_html("{}{}", letter.get_status_display(), replays if letter.replays else "")

    @admin.display(description="last failed", ordering="last_failed_at")
    def last_failed(self, letter):
        return format_html('<span title="{}">{} ago</span>', letter.last_failed_at, timesince(letter.last_failed_at))

    @admin.display(description="traceback")
    def pretty_traceback(self, letter):
        """One click away: the error above says what failed; the traceback is for whoever fixes it."""
        if not letter.traceback:
            return "-"
        lines = letter.traceback.count("\n") + 1
        return format_html(
            "<details><summary>Traceback ({} lines): show</summary>"
            "<pre style='white-space: pre-wrap'>{}</pre></details>",
            lines,
            letter.traceback,
        )

    def _who(self, request) -> str:
        return request.user.get_username()

    def has_replay_permission(self, request) -> bool:
        return self._may(request, "replay_deadletter")

    def has_discard_permission(self, request) -> bool:
        return self._may(request, "discard_deadletter")

    def _replay(self, request, letters, action: str) -> None:
        done, problems = 0, []
        note = "replayed from the admin"
        for letter in letters:
            try:
                self.audited(
                    request, letter, action, replay_dead_letter, letter_id=letter.pk, by=self._who(request), note=note
                )
                done += 1
            except CannotResolve as error:
                problems.append(str(error))
        self.message_user(request, f"Replayed {done} dead letter(s) through the outbox.", messages.SUCCESS)
        for problem in problems:
            self.message_user(request, problem, messages.WARNING)

    @admin.action(description="Replay selected dead letters", permissions=["replay"])
    def replay(self, request, queryset):
        self._replay(request, queryset.order_by("id"), "replayed")

    @admin.action(
        description="Replay every open letter of the same subscriber, reason and event type", permissions=["replay"]
    )
    def replay_group(self, request, queryset):
        groups = set(queryset.values_list("subscriber", "reason", "type"))
        letters = [letter for s, r, t in groups for letter in open_letters(subscriber=s, reason=r, type=t)]
        self._replay(request, letters, "replayed with its group")

    @admin.action(description="Discard selected dead letters (with a note)", permissions=["discard"])
    def discard(self, request, queryset):
        note = request.POST.get("note", "").strip()
        if "apply" in request.POST and note:
            done = 0
            for letter in queryset:
                try:
                    self.audited(
                        request,
                        letter,
                        "discarded",
                        discard_dead_letter,
                        letter_id=letter.pk,
                        by=self._who(request),
                        note=note,
                    )
                    done += 1
                except CannotResolve as error:
                    self.message_user(request, str(error), messages.WARNING)
            self.message_user(request, f"Discarded {done} dead letter(s).", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Discard dead letters",
            "letters": queryset,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "note_missing": "apply" in request.POST,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/outbox/discard.html", context)


def _edge_links(subscriber: str, event_type: str, request) -> tuple[str, str]:
    """The choreography map's counts link to the messages they count: those handled on the
    subscriber's database, the open letters on the page's."""
    handled = {"subscriber": subscriber, "type": event_type}
    if choice(request)["databases"]:
        handled[PARAMETER] = placement.database_of_subscriber(subscriber)
    query = urlencode({"status__exact": "open", "subscriber": subscriber, "type": event_type})
    return (
        reverse("admin:outbox_inboxmessage_changelist") + "?" + urlencode(handled),
        in_chosen(reverse("admin:outbox_deadletter_changelist") + "?" + query, request),
    )
