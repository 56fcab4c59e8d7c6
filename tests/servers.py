"""The servers a test may need (outbox_tests.servers: the markers, and how a test not given one
says so), and what this project's tests add: PostgreSQL servers of a test's own."""

import pytest
from outbox_tests.servers import NOT_GIVEN, SERVERS, broker_virtual_host, skip_unless_given

from harness.postgres_servers import PG_BIN

__all__ = ["NOT_GIVEN", "POSTGRES_RIG", "SERVERS", "broker_virtual_host", "skip_unless_given"]

# A test that starts PostgreSQL servers of its own (a restart, a failover) needs the server it was
# given and PostgreSQL's binaries on this machine.
POSTGRES_RIG = [
    pytest.mark.postgres,
    pytest.mark.skipif(not (PG_BIN / "postgres").exists(), reason=f"needs PostgreSQL's binaries in {PG_BIN}"),
]
