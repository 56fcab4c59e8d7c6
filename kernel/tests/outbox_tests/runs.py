"""What makes a test run its own on shared servers, and the kernel's timings at test speed; both
test settings modules (the kernel's and this project's) start from it."""

import os
import uuid


def this_run() -> tuple[str, str | None]:
    """This run's id (its throwaway databases' suffix) and its pytest-xdist worker, if any; its queue
    prefix set in the environment, where the processes a test starts find it."""
    os.environ.setdefault("OUTBOX_QUEUE_PREFIX", f"test-{uuid.uuid4().hex[:8]}-")
    # pytest-django adds `_gw0` and so on to the database's name under pytest-xdist.
    run_id = os.environ["OUTBOX_QUEUE_PREFIX"].strip("-").replace("-", "_")
    # Each pytest-xdist worker is a run of its own: its own queues. The processes it starts inherit
    # the prefix as it left it, and OUTBOX_QUEUE_PREFIX_OF says it is no longer the whole session's.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get("OUTBOX_QUEUE_PREFIX_OF") != worker:
        os.environ["OUTBOX_QUEUE_PREFIX"] += f"{worker}-"
        os.environ["OUTBOX_QUEUE_PREFIX_OF"] = worker
    return run_id, worker


# Few and quick retries, a relay that polls and a heartbeat that beats often.
AT_TEST_SPEED = {
    "OUTBOX_MAX_RETRIES": 3,
    "OUTBOX_MIN_BACKOFF_MS": 20,
    "OUTBOX_MAX_BACKOFF_MS": 200,
    "OUTBOX_MAX_HOPS": 8,
    "OUTBOX_RELAY_POLL_SECONDS": 0.2,
    "OUTBOX_HEARTBEAT_SECONDS": 0.5,
}
