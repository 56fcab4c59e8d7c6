"""The test settings plus the context docs/adding-a-context.md builds, for its own test run only
(tests/test_adding_a_context.py starts it): the main suite's flows stay as they ship."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, OUTBOX_ASYNCAPI_LEAVE_OUT

INSTALLED_APPS = [*INSTALLED_APPS, "tests.guide.receipts"]
OUTBOX_ASYNCAPI_LEAVE_OUT = [*OUTBOX_ASYNCAPI_LEAVE_OUT, "receipts"]
