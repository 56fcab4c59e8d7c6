from django.core.management.base import BaseCommand

from drones.services import seed_fleet


class Command(BaseCommand):
    help = "Place N drones (drone-001...) around a base location; running it again duplicates none."

    def add_arguments(self, parser):
        parser.add_argument("count", type=int, nargs="?", default=20)
        parser.add_argument("--latitude", type=float, default=47.6205, help="Base latitude (default: Seattle).")
        parser.add_argument("--longitude", type=float, default=-122.3493, help="Base longitude.")
        parser.add_argument("--spread-km", type=float, default=3.0, help="Farthest a drone's home is from the base.")

    def handle(self, *, count, latitude, longitude, spread_km, **options):
        created, existing = seed_fleet(count=count, latitude=latitude, longitude=longitude, spread_km=spread_km)
        self.stdout.write(f"fleet: {created} drones added, {existing} already there")
