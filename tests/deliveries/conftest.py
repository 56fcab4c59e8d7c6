from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from deliveries.customers import create_customer
from drones.services import seed_fleet
from tests.choreography import Choreography

BASE = (47.6205, -122.3493)


def delivery_request(**overrides) -> dict:
    """A valid Fabrikam ingestion body, near the test fleet's base."""
    body = {
        "pickupLocation": {"latitude": BASE[0] + 0.01, "longitude": BASE[1], "altitude": 0},
        "dropOffLocation": {"latitude": BASE[0] - 0.01, "longitude": BASE[1] + 0.01},
        "pickupTime": timezone.now().isoformat(),
        "deadline": (timezone.now() + timedelta(hours=2)).isoformat(),
        "expedited": False,
        "confirmationRequired": "None",
        "packageInfo": {"size": "Small", "weight": 1.5, "tag": "books"},
    }
    body.update(overrides)
    return body


class Customer:
    """A customer with a token, calling the API through Django's test client."""

    def __init__(self, name: str):
        self.customer, self.token = create_customer(name=name)
        self.client = Client(headers={"Authorization": f"Bearer {self.token}"})

    def request(self, body: dict | None = None, **headers):
        return self.client.post(
            "/api/deliveryrequests", body or delivery_request(), content_type="application/json", headers=headers
        )

    def get(self, path: str):
        return self.client.get(f"/api{path}")

    def cancel(self, delivery_id):
        return self.client.delete(f"/api/deliveryrequests/{delivery_id}")


@pytest.fixture
def customer(db):
    return Customer("alice")


@pytest.fixture
def other_customer(db):
    return Customer("mallory")


@pytest.fixture
def fleet(db):
    seed_fleet(count=3, latitude=BASE[0], longitude=BASE[1])


@pytest.fixture
def choreography(db):
    return Choreography()
