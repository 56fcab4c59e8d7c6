import pytest

from drones.services import seed_fleet
from tests.factories import BASE


@pytest.fixture
def one_drone(db):
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
