"""Which of the kernel's databases an operator's page of the admin reads.

With a context on a database of its own (`OUTBOX_CONTEXT_DATABASES`), each database has its own
outbox, inbox and dead letters, and the relay, the sweep and the commands serve one at a time
(`--database`). The admin's pages of those tables do the same: a `database` in the query string
chooses, the lists' "database" filter sets it, and the admin keeps it in every link it makes from a
list or a row's page (`_changelist_filters`), so a letter opened, replayed or discarded is the one
listed. Ids are each database's own, so a row elsewhere than on `default` is named `<id>@<database>`
where a name must say it alone: in the audit log (Django's, on `default`), and in the links the
console makes to it from a story that spans the databases. With one database nothing shows and
nothing changes.
"""

from functools import wraps

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db import DEFAULT_DB_ALIAS, DatabaseError
from django.http import QueryDict
from django.utils.http import urlencode

from outbox.core.working_database import current, kernel_databases, working_in
from outbox.models import DeadLetter

PARAMETER = "database"


def admin_id(row) -> str:
    """How the admin names a row of the kernel's tables: its id, with its database if not `default`."""
    database = row._state.db or DEFAULT_DB_ALIAS
    return str(row.pk) if database == DEFAULT_DB_ALIAS else f"{row.pk}@{database}"


def chosen_database(request) -> str:
    """The page's `database`, or the one of the list it was opened from, or the one its row's name
    says (`<id>@<database>`); where the kernel works if none names one of the kernel's databases."""
    kept = QueryDict(request.GET.get("_changelist_filters", ""))
    object_id = unquote(str((request.resolver_match.kwargs if request.resolver_match else {}).get("object_id", "")))
    chosen = request.GET.get(PARAMETER) or kept.get(PARAMETER) or object_id.partition("@")[2]
    return chosen if chosen in kernel_databases() else current()


def reading_chosen_database(view):
    """`view` works in the chosen database: its queries, its actions' services, and its page, which
    is rendered here (a TemplateResponse renders after the view returns, outside the block)."""

    @wraps(view)
    def working_in_chosen(request, *args, **kwargs):
        with working_in(chosen_database(request)):
            response = view(request, *args, **kwargs)
            if hasattr(response, "render") and not response.is_rendered:
                response.render()
        return response

    return working_in_chosen


def choice(request) -> dict:
    """What a page's template needs to offer each database and to keep the chosen one in its
    links: nothing with one database."""
    databases = kernel_databases()
    if len(databases) < 2:
        return {"databases": [], "database_query": ""}
    chosen = chosen_database(request)
    return {
        "databases": [(alias, "?" + urlencode({PARAMETER: alias}), alias == chosen) for alias in databases],
        "database_query": urlencode({PARAMETER: chosen}),
    }


def open_letters_elsewhere(request) -> list[tuple[str, int, str]]:
    """The other databases with open dead letters, each with their count and the query that chooses
    it: a page of one database says where else to look. One that does not answer is left out."""
    chosen, found = chosen_database(request), []
    for alias in kernel_databases():
        if alias == chosen:
            continue
        try:
            with working_in(alias):
                count = DeadLetter.objects.filter(status=DeadLetter.Status.OPEN).count()
        except DatabaseError:
            continue
        if count:
            found.append((alias, count, "?" + urlencode({PARAMETER: alias})))
    return found


class DatabaseFilter(admin.SimpleListFilter):
    """The lists' choice of database (one of them always chosen: there is no "all", since rows of
    two databases cannot be listed, counted or acted on as one query)."""

    title = "database"
    parameter_name = PARAMETER

    def __init__(self, request, params, model, model_admin):
        self.chosen = chosen_database(request)
        super().__init__(request, params, model, model_admin)

    def lookups(self, request, model_admin):
        databases = kernel_databases()
        return [(alias, alias) for alias in databases] if len(databases) > 1 else []

    def choices(self, changelist):
        for alias, title in self.lookup_choices:
            yield {
                "selected": alias == self.chosen,
                "query_string": changelist.get_query_string({self.parameter_name: alias}),
                "display": title,
            }

    def queryset(self, request, queryset):
        return queryset.using(self.chosen)


class InChosenDatabase:
    """For a ModelAdmin of one of the kernel's tables: its list, its pages and its actions read
    and act in the chosen database, and its audit log names the row with its database."""

    def get_queryset(self, request):
        return super().get_queryset(request).using(chosen_database(request))

    def get_object(self, request, object_id, from_field=None):
        row_id, _, database = object_id.partition("@")  # the database, if named, chose the queryset's
        return super().get_object(request, row_id, from_field) if database in ("", chosen_database(request)) else None

    def get_preserved_filters(self, request):
        """Django's, with the chosen database in them on a row's pages (opened from a story, or
        from the audit log), so that its history link and its way back to the list keep it."""
        preserved = super().get_preserved_filters(request)
        database, match = chosen_database(request), request.resolver_match
        if database == DEFAULT_DB_ALIAS or match is None or (match.url_name or "").endswith("_changelist"):
            return preserved
        filters = QueryDict(QueryDict(preserved).get("_changelist_filters", ""), mutable=True)
        filters[PARAMETER] = database
        return urlencode({"_changelist_filters": filters.urlencode()})

    def history_view(self, request, object_id, extra_context=None):
        row_id, database = unquote(object_id).partition("@")[0], chosen_database(request)
        named = row_id if database == DEFAULT_DB_ALIAS else f"{row_id}@{database}"  # as log_change names it
        return reading_chosen_database(super().history_view)(request, named, extra_context)

    def log_change(self, request, obj, message):
        if admin_id(obj) == str(obj.pk):
            return super().log_change(request, obj, message)
        from django.contrib.admin.models import CHANGE, LogEntry
        from django.contrib.admin.options import get_content_type_for_model

        return LogEntry.objects.create(
            user_id=request.user.pk,
            content_type=get_content_type_for_model(obj),
            object_id=admin_id(obj),
            object_repr=f"{obj} (in {obj._state.db})"[:200],
            action_flag=CHANGE,
            change_message=message,
        )

    def get_list_filter(self, request):
        return [DatabaseFilter, *super().get_list_filter(request)]

    def changelist_view(self, request, extra_context=None):
        return reading_chosen_database(super().changelist_view)(request, extra_context=extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return reading_chosen_database(super().change_view)(request, object_id, form_url, extra_context)


def in_chosen(url: str, request) -> str:
    """`url` with the chosen database in its query string, if there is a choice."""
    query = choice(request)["database_query"]
    return f"{url}{'&' if '?' in url else '?'}{query}" if query else url
