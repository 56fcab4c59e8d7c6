"""The words of the drone-delivery project the kernel was built in, which nothing the kernel ships may name."""

import re

# The domain, as words; a broker's delivery tag, mode and limit are messaging's own, and
# setuptools' table of what a distribution ships (`tool.setuptools.packages`) is packaging's.
DOMAIN = re.compile(
    r"(?<!setuptools\.)\b(drones?|deliver(y|ies)|packages?|fleet)\b(?![ _-](tags?|mode|info|limit)\b)", re.IGNORECASE
)
