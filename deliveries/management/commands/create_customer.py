from django.core.management.base import BaseCommand, CommandError

from deliveries.customers import create_customer
from deliveries.models import Customer


class Command(BaseCommand):
    help = "Create an API customer; its bearer token is printed alone on the last line (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--expires-in-days", type=float, help="The token stops working after this many days.")

    def handle(self, *, name, expires_in_days, **options):
        if Customer.objects.filter(name=name).exists():
            raise CommandError(f"a customer named {name!r} exists already")
        customer, token = create_customer(name=name, expires_in_days=expires_in_days)
        self.stdout.write(f"created customer {customer.name} ({customer.id}); its token:")
        self.stdout.write(token)
