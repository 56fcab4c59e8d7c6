"""The operators' roles, as Django groups: what each may see and do in the admin.

`manage.py create_roles` (and every `migrate`) makes the groups hold exactly these
permissions; an operator is a staff user put in one of them.
"""

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

# What operators and auditors may look at: every context's state, the messaging kernel, the audit log.
VIEWED_APPS = ["admin", "outbox", "packages", "drones", "deliveries", "notifications", "webhooks"]
OPERATOR_ACTIONS = [
    "deliveries.cancel_delivery_as_operator",
    "outbox.replay_deadletter",
    "outbox.discard_deadletter",
    "drones.ground_drone",
    "drones.return_drone",
    "webhooks.replay_message",
]
ROLES = {
    "operators": "view everything; replay and discard dead letters; ground drones and return them to service; "
    "cancel deliveries before dispatch; replay webhook messages",
    "auditors": "view everything, change nothing",
}


def _permissions(names: list[str]) -> list[Permission]:
    found = []
    for name in names:
        app_label, codename = name.split(".")
        found.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return found


def create_roles() -> dict[str, int]:
    """Create or update the groups; returns how many permissions each holds."""
    for app_config in apps.get_app_configs():  # on a fresh database, before auth's own signal reaches every app
        create_permissions(app_config, verbosity=0)
    viewing = list(Permission.objects.filter(content_type__app_label__in=VIEWED_APPS, codename__startswith="view_"))
    grants = {"operators": viewing + _permissions(OPERATOR_ACTIONS), "auditors": viewing}
    for name, permissions in grants.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(permissions)
    return {name: len(permissions) for name, permissions in grants.items()}
