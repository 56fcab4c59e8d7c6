from django.core.management.base import BaseCommand

from delivery_project.roles import ROLES, create_roles


class Command(BaseCommand):
    help = "Create or update the operators and auditors groups (migrate does it too)."

    def handle(self, **options):
        counts = create_roles()
        for name, count in counts.items():
            self.stdout.write(f"{name}: {count} permissions ({ROLES[name]})")
