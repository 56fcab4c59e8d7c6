"""Which of the kernel's databases an operator's page of the admin reads.

With a context on a database of its own (`OUTBOX_CONTEXT_DATABASES`), each database has its own
outbox, inbox and dead letters, and the relay, the sweep and the commands serve one at a time
(`--database`). The admin's pages of those tables do the same: a `database` in the query string
chooses, the lists' "database" filter sets it, and the admin keeps it in the links it makes from a
list (`_changelist_filters`), so a letter opened, replayed or discarded is the one listed. With one
database nothing shows and nothing changes. Django's models, users and audit log stay on `default`.
"""

from functools import wraps

from django.contrib import admin
from django.http import QueryDict
from django.utils.http import urlencode

from outbox.core.context_databases import current, kernel_databases, working_in

PARAMETER = "database"


def chosen_database(request) -> str:
    """The page's `database`, or the one of the list it was opened from; where the kernel works
    if neither names one of the kernel's databases."""
    kept = QueryDict(request.GET.get("_changelist_filters", ""))
    chosen = request.GET.get(PARAMETER) or kept.get(PARAMETER)
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
    and act in the chosen database."""

    def get_queryset(self, request):
        return super().get_queryset(request).using(chosen_database(request))

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
