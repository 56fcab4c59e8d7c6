"""Modules of one subject each: a product module that grows past the bound is split by subject
(as `deliveries` splits its services), not left to become the next six-job file."""

from pathlib import Path

from django.conf import settings

from tests.factories import PRODUCT_PACKAGES as PRODUCT

MAX_LINES = 450


def test_no_product_module_is_over_the_bound():
    too_long = {}
    for package in sorted(PRODUCT | {"outbox"}):  # the kernel's modules too, though it ships apart
        for module in (Path(settings.BASE_DIR) / package).rglob("*.py"):
            if "migrations" in module.parts:
                continue
            lines = len(module.read_text().splitlines())
            if lines > MAX_LINES:
                too_long[str(module.relative_to(settings.BASE_DIR))] = lines
    assert too_long == {}
