import math

from django.core.management.base import BaseCommand, CommandError

from common.arguments import whole_number
from drones.services import FLEET_MAX, seed_fleet

KM_PER_DEGREE = 111.32


class Command(BaseCommand):
    help = (
        f"Place N drones (drone-001..., at most {FLEET_MAX:,}) around a base location, all or none; "
        "running it again duplicates none."
    )

    def add_arguments(self, parser):
        parser.add_argument("count", type=whole_number(at_least=1, at_most=FLEET_MAX), nargs="?", default=20)
        parser.add_argument("--latitude", type=float, default=47.6205, help="Base latitude (default: Seattle).")
        parser.add_argument("--longitude", type=float, default=-122.3493, help="Base longitude.")
        parser.add_argument("--spread-km", type=float, default=3.0, help="Farthest a drone's home is from the base.")

    def handle(self, *, count, latitude, longitude, spread_km, **options):
        where_the_fleet_goes(latitude=latitude, longitude=longitude, spread_km=spread_km)
        created, existing = seed_fleet(
            count=count, latitude=latitude, longitude=longitude, spread_km=spread_km, progress=self._progress
        )
        self.stdout.write(f"fleet: {created} drones added, {existing} already there")

    def _progress(self, placed: int, count: int) -> None:
        """On a terminal, one line redrawn; into a pipe or a log, a line a tenth of the way (none for a small fleet)."""
        if count <= 1000:
            return
        line = f"placing drones: {placed:,} of {count:,}"
        if self.stdout.isatty():
            self.stdout.write(f"\r{line}", ending="\n" if placed == count else "")
            self.stdout.flush()
        elif placed == count or placed * 10 // count > (placed - 1000) * 10 // count:
            self.stdout.write(line)


def where_the_fleet_goes(*, latitude: float, longitude: float, spread_km: float) -> None:
    """Refuse a base off the globe, or a spread that would put a drone's home past a pole or the
    antimeridian: its coordinates would be ones no delivery could ever be near. Checked here, not as
    argparse types, because callers such as the chaos rig pass them to call_command as values (and
    written so that nan fails every comparison)."""
    if not -90 <= latitude <= 90:
        raise CommandError(f"--latitude must be between -90 and 90, not {latitude:g}")
    if not -180 <= longitude <= 180:
        raise CommandError(f"--longitude must be between -180 and 180, not {longitude:g}")
    if not spread_km >= 0:
        raise CommandError(f"--spread-km must be at least 0, not {spread_km:g}")
    reach = spread_km / KM_PER_DEGREE
    if abs(latitude) + reach > 90:
        raise CommandError(f"a fleet spread {spread_km:g} km around latitude {latitude:g} would reach past the pole")
    if spread_km and abs(longitude) + reach / math.cos(math.radians(latitude)) > 180:
        raise CommandError(
            f"a fleet spread {spread_km:g} km around longitude {longitude:g} would cross the antimeridian"
        )
