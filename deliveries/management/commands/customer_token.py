from django.core.management.base import BaseCommand, CommandError

from common.arguments import duration_in_days, number
from deliveries.customers import revoke_customer_tokens, rotate_customer_token
from deliveries.models import Customer


class Command(BaseCommand):
    help = (
        "Rotate or revoke a customer's bearer tokens, or list them (never their values). "
        "rotate prints the new token alone on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["rotate", "revoke", "list"])
        parser.add_argument("name", help="The customer's name.")
        parser.add_argument(
            "--expires-in-days",
            type=duration_in_days,
            help="rotate: the new token stops working after this many days.",
        )
        parser.add_argument(
            "--grace-minutes",
            type=number(at_least=0, at_most=525_600),  # a year
            default=0,
            help="rotate: the old tokens go on working this long, so clients can switch (default: revoked at once).",
        )

    def handle(self, *, action, name, expires_in_days, grace_minutes, **options):
        if action != "rotate" and (expires_in_days is not None or grace_minutes):
            # A revoke "with 30 minutes' grace" that revoked at once would surprise whoever typed it.
            raise CommandError(f"--expires-in-days and --grace-minutes are for rotate, not {action}")
        customer = Customer.objects.filter(name=name).first()
        if customer is None:
            raise CommandError(f"no customer named {name!r}")
        if action == "list":
            for token in customer.tokens.order_by("created_at"):
                self.stdout.write(f"{token.prefix}…  created {token.created_at:%Y-%m-%d %H:%M}  {token.state}")
        elif action == "revoke":
            count = revoke_customer_tokens(customer=customer)
            self.stdout.write(f"revoked {count} token(s) of {customer.name}; the API now answers 401 to them")
        else:
            token, secret = rotate_customer_token(
                customer=customer, expires_in_days=expires_in_days, grace_minutes=grace_minutes
            )
            self.stdout.write(f"new token {token.prefix}… for {customer.name} ({token.state}); its value:")
            self.stdout.write(secret)
