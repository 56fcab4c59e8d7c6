import pytest

from drones.services import seed_fleet
from tests.deliveries.conftest import BASE, choreography, customer, fleet, other_customer  # noqa: F401 (fixtures)


@pytest.fixture
def one_drone(db):
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
