"""The words of the drone-delivery project the kernel was built in, which nothing the kernel ships may name."""

import re

# The domain, as words; a broker's delivery tag, mode and limit are messaging's own, and
# setuptools' table of what a distribution ships (`tool.setuptools.packages`) is packaging's.
# Beside them, its modules and commands, which a word boundary would miss inside their names.
DOMAIN = re.compile(
    r"(?<!setuptools\.)\b(drones?|deliver(y|ies)|packages?|fleet)\b(?![ _-](tags?|mode|info|limit)\b)"
    r"|delivery_project|seed_fleet|create_customer|\brun_all\b|\bmove_queues\b|\bharness\b",
    re.IGNORECASE,
)
