from tests.deliveries.conftest import choreography, customer, fleet, other_customer  # noqa: F401
