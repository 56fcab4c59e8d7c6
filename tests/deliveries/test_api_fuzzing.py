"""Fuzz the customer API from its own OpenAPI schema: whatever a client sends, the
answer is a documented 4xx or 2xx, never a 5xx, and matches the schema.

This runs schemathesis's CLI, as anyone would against a deployment, against a live server on the
test database. CI runs a bounded, seeded run; the long run in docs/reliability.md is the same
test with API_FUZZ_EXAMPLES raised.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deliveries.customers import create_customer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# 20 an operation: the boundary values of every field (the coverage phase) are the same whatever the
# number, and 50 took 92 s of the suite where 20 take 53 s; the long runs raise it to thousands.
EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "20"))
SEEDS = [int(seed) for seed in os.environ.get("API_FUZZ_SEEDS", "1").split(",")]
# Every check schemathesis has, but one: positive_data_acceptance expects a 2xx for any value
# the schema allows, and the schema cannot state "within 90 days from now" for a date-time, so
# a valid-looking pickupTime in 1970 is rightly refused with 422.
CHECKS = ["--checks", "all", "--exclude-checks", "positive_data_acceptance"]


def schemathesis(*args: str) -> subprocess.CompletedProcess:
    executable = Path(sys.executable).with_name("schemathesis")
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.deliveries.fuzz_hooks"}
    return subprocess.run([str(executable), *args], capture_output=True, text=True, timeout=1800, env=env)


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzing_the_api_from_its_schema_finds_no_failure(live_server, seed, tmp_path, settings):
    settings.API_RATE_LIMIT = "100000000/min"  # thousands of calls a minute from one token, all counted
    _, token = create_customer(name=f"fuzzer-{seed}")

    run = schemathesis(
        "--config-file",
        str(Path(__file__).with_name("schemathesis.toml")),
        "run",
        f"{live_server.url}/api/openapi.json",
        *CHECKS,
        "--phases",
        os.environ.get("API_FUZZ_PHASES", "examples,coverage,fuzzing,stateful"),
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(seed),
        "--workers",
        os.environ.get("API_FUZZ_WORKERS", "1"),
        # A seeded run repeats itself: no examples remembered from an earlier run.
        "--generation-database",
        "none",
        "--no-color",
        "--header",
        f"Authorization: Bearer {token}",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    )

    print(run.stdout[-6000:])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout or " passed" in run.stdout
