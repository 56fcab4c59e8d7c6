"""The kernel is for any Django project (issue 34): its code, templates and static files name none
of this project's contexts or their things; where it needs an example, it is an order's."""

import re
from pathlib import Path

from django.conf import settings

KERNEL = Path(settings.BASE_DIR) / "outbox"
# This project's domain, as words; a broker's delivery tag, mode and limit are messaging's own.
DOMAIN = re.compile(r"\b(drones?|deliver(y|ies)|packages?|fleet)\b(?![ _-](tags?|mode|info|limit)\b)", re.IGNORECASE)


def test_the_kernel_names_nothing_of_the_drone_delivery_domain():
    found = [
        f"{path.relative_to(KERNEL.parent)}:{number}: {line.strip()}"
        for path in sorted(KERNEL.rglob("*"))
        if path.suffix in (".py", ".html", ".js", ".css", ".txt", ".md") and "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if DOMAIN.search(line)
    ]
    assert found == []
