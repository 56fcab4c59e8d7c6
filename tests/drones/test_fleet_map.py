"""The console's fleet map: its data (states, flights, waiting pickups, bounded), its page, its library."""

import hashlib
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from drones.fleet_map import fleet_map
from drones.models import Assignment, Drone

LEAFLET = Path(settings.BASE_DIR) / "drones" / "static" / "drones" / "leaflet"
BASE = (47.62, -122.35)


def a_drone(name: str, status: str = Drone.Status.AVAILABLE, *, away: bool = False, **fields) -> Drone:
    lat, lon = BASE
    return Drone.objects.create(
        id=uuid.uuid4(),
        name=name,
        max_payload_kg=5,
        range_km=30,
        speed_kmh=60,
        home_latitude=lat,
        home_longitude=lon,
        latitude=lat + (0.02 if away else 0),
        longitude=lon,
        status=status,
        **fields,
    )


@pytest.fixture
def fleet_in_every_state(db):
    now = timezone.now()
    a_drone("at-home")
    a_drone("flying-home", away=True)
    a_drone("grounded", Drone.Status.MAINTENANCE)
    a_drone("booked", Drone.Status.RESERVED)
    flyer = a_drone("on-a-trip", Drone.Status.IN_FLIGHT)
    trip = dict(pickup_latitude=47.60, pickup_longitude=-122.30, dropoff_latitude=47.70, dropoff_longitude=-122.40)
    Assignment.objects.create(
        delivery_id=uuid.uuid4(),
        drone=flyer,
        status=Assignment.Status.FLYING,
        takeoff_at=now - timedelta(minutes=5),
        eta=now + timedelta(minutes=5),
        **trip,
    )
    waiting = Assignment.objects.create(
        delivery_id=uuid.uuid4(), status=Assignment.Status.WAITING, waiting_since=now - timedelta(minutes=12), **trip
    )
    return now, waiting


def test_the_map_draws_each_drone_in_its_state_and_each_waiting_pickup(
    fleet_in_every_state,
):
    now, waiting = fleet_in_every_state
    drawn = fleet_map(now=now)

    states = {name: state for _, name, state, _, _ in drawn["drones"]}
    assert states == {
        "at-home": "available",
        "flying-home": "returning",
        "grounded": "maintenance",
        "booked": "reserved",
        "on-a-trip": "in_flight",
    }
    [flyer] = [d for d in drawn["drones"] if d[1] == "on-a-trip"]
    assert flyer[3:] == pytest.approx([47.65, -122.35], abs=1e-3)  # half its time flown: half way
    [flight] = drawn["flights"]
    assert flight[1:] == [[47.60, -122.30], [47.70, -122.40]]
    [(delivery, lat, lon, waited)] = drawn["waiting"]
    assert delivery == str(waiting.delivery_id) and (lat, lon) == (47.60, -122.30) and waited == pytest.approx(720)
    assert drawn["truncated"] is False


def test_the_map_of_a_large_fleet_is_bounded(fleet_in_every_state):
    now, _ = fleet_in_every_state
    drawn = fleet_map(now=now, limit=2)

    assert len(drawn["drones"]) == 2 and drawn["truncated"] is True


def test_the_map_serves_leaflet_itself_and_its_data_only_to_who_may_see_drones(
    client, admin_client, fleet_in_every_state, settings
):
    settings.FLEET_MAP_TILE_URL = ""  # the no-tiles mode: a plain grid, no network
    page = admin_client.get("/admin/drones/drone/map/?delivery=abc").content.decode()

    assert "/static/drones/leaflet/leaflet.js" in page and "/static/drones/fleet_map.js" in page
    assert 'data-tiles=""' in page and 'data-delivery="abc"' in page
    assert len(admin_client.get("/admin/drones/drone/map/data.json").json()["drones"]) == 5
    assert "Fleet map" in admin_client.get("/admin/").content.decode()

    clerk = User.objects.create_user("clerk", password="pw", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_delivery"))
    client.force_login(clerk)
    assert client.get("/admin/drones/drone/map/data.json").status_code == 403
    assert "Fleet map" not in client.get("/admin/").content.decode()


def test_the_shipped_leaflet_is_the_release_its_version_file_names():
    version = (LEAFLET / "VERSION").read_text()
    sums = dict(
        line.split()[::-1] for line in version.splitlines() if len(line.split()) == 2 and len(line.split()[0]) == 64
    )

    assert (LEAFLET / "leaflet.js").read_text()[:120].count("Leaflet 1.9.4") == 1 and "leaflet 1.9.4" in version
    assert sums.keys() == {
        "leaflet.js",
        "leaflet.js.map",
        "leaflet.css",
        *(f"images/{p.name}" for p in (LEAFLET / "images").iterdir()),
    }
    for name, digest in sums.items():
        assert hashlib.sha256((LEAFLET / name).read_bytes()).hexdigest() == digest, name
