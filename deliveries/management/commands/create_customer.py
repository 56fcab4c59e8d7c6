from django.core.management.base import BaseCommand, CommandError

from common.arguments import duration_in_days
from deliveries.customers import create_customer
from deliveries.models import Customer


class Command(BaseCommand):
    help = "Create an API customer; its bearer token is printed alone on the last line (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--expires-in-days",
            type=duration_in_days,
            help="The token stops working after this many days (an expired token would be no use).",
        )

    def handle(self, *, name, expires_in_days, **options):
        # Spaces around a name are a slip of the shell; a blank one would name nobody in the admin.
        name, longest = name.strip(), Customer._meta.get_field("name").max_length
        if not name:
            raise CommandError("a customer needs a name")
        if len(name) > longest:
            raise CommandError(f"a customer's name is at most {longest} characters, not {len(name)}")
        if Customer.objects.filter(name=name).exists():
            raise CommandError(f"a customer named {name!r} exists already")
        customer, token = create_customer(name=name, expires_in_days=expires_in_days)
        self.stdout.write(f"created customer {customer.name} ({customer.id}); its token:")
        self.stdout.write(token)
