"""The event catalogue as an AsyncAPI 3.0 document, generated from the registry and the contracts.

One channel per event type (its address the envelope's `type`), one message per version (its
payload the envelope around that version's contract, defined once in `components.messages`), a
`send` operation for the publishing context and a `receive` operation for each subscriber (its
queue, handler, versions, and whether it is ordered, a compensation or has outside effects).
`manage.py export_asyncapi` writes it; the title, version and servers come from the
OUTBOX_ASYNCAPI_* settings (`from_settings()`), and a server's URL keeps its scheme, host, port
and path, never its credentials.
"""

import inspect
import json
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from django.conf import settings

from outbox.core.contracts import Event, contracts
from outbox.core.envelope import Envelope
from outbox.core.subscriptions import Subscription, actor_name, routing_table

ASYNCAPI_VERSION = "3.0.0"
_KEY = re.compile(r"[^A-Za-z0-9_\-]")  # AsyncAPI's keys for channels, messages and operations
# What a broker speaks, where its URL's scheme does not say it all: pika's AMQP is 0-9-1.
_PROTOCOL_VERSIONS = {"amqp": "0-9-1", "amqps": "0-9-1"}


def key(*parts: object) -> str:
    """`order.placed`, 2 -> `order_placed_v2`: a name AsyncAPI accepts as a key."""
    return "_".join(_KEY.sub("_", str(part)) for part in parts)


def from_settings(
    *, title: str | None = None, version: str | None = None, servers: Mapping[str, str | dict] | None = None
) -> dict:
    """The document as the settings describe it (OUTBOX_ASYNCAPI_*), `title`, `version` and
    `servers` overriding theirs when given (the command's options)."""
    return document(
        title=title or settings.OUTBOX_ASYNCAPI_TITLE or default_title(),
        version=version or settings.OUTBOX_ASYNCAPI_VERSION,
        servers=settings.OUTBOX_ASYNCAPI_SERVERS if servers is None else servers,
        leave_out=frozenset(settings.OUTBOX_ASYNCAPI_LEAVE_OUT),
    )


def default_title() -> str:
    """`<project> events`, the project being the first name of its settings module's path (`mysite.settings`:
    `mysite events`): what the document is about, until OUTBOX_ASYNCAPI_TITLE says better."""
    # SETTINGS_MODULE is None inside override_settings() and under settings.configure(): the variable says it then.
    module = getattr(settings, "SETTINGS_MODULE", None) or os.environ.get("DJANGO_SETTINGS_MODULE", "")
    return f"{module.split('.')[0]} events" if module else "Events"


def server_name(name: str) -> str:
    """`name`, if AsyncAPI's tools accept it as a server's key."""
    if not name or _KEY.search(name):
        raise ValueError(f"a server's name is letters, digits, '_' and '-', not {name!r}")
    return name


def server(url: str) -> dict:
    """An AsyncAPI Server Object from a broker's URL: its scheme (the protocol), host and port, and
    path (a RabbitMQ virtual host, a Redis database). The user, the password and the query are left
    out: whatever the URL carries, the document names no credential."""
    parts = urlsplit(url.strip())
    host = parts.netloc.rpartition("@")[2]
    if not parts.scheme or not host:
        raise ValueError(f"a server needs a URL with a scheme and a host, not {parts.scheme or url!r}")
    found = {"host": host, "protocol": parts.scheme}
    if parts.scheme in _PROTOCOL_VERSIONS:
        found["protocolVersion"] = _PROTOCOL_VERSIONS[parts.scheme]
    if parts.path not in ("", "/"):
        found["pathname"] = parts.path
    return found


def servers_of_broker(urls: str | Iterable[str]) -> dict[str, dict]:
    """The servers of Dramatiq's broker as `outbox.core.brokers` configures it (DRAMATIQ_BROKER's
    `url`: one, or each node of a cluster): `broker`, or `broker_1`, `broker_2`... in the URLs'
    order, sorted (each process shuffles its nodes). No credentials, as `server()`."""
    listed = sorted([urls] if isinstance(urls, str) else urls)
    if len(listed) == 1:
        return {"broker": server(listed[0])}
    return {f"broker_{number}": server(url) for number, url in enumerate(listed, start=1)}


def document(
    *,
    title: str,
    version: str,
    servers: Mapping[str, str | dict] | None = None,
    routes: Mapping[str, list[Subscription]] | None = None,
    declared: Mapping[tuple[str, int], type[Event]] | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> dict:
    """The AsyncAPI document of `declared` (the contracts) and `routes` (the routing table), without
    the contexts in `leave_out` (the test suite's probe). `servers` maps each server's name to a
    URL (see `server()`) or to a Server Object of AsyncAPI's, used as it is."""
    routes = routing_table() if routes is None else routes
    declared = contracts() if declared is None else declared
    schemas: dict[str, dict] = {"Envelope": _envelope_schema()}
    messages: dict[str, dict] = {}
    channels: dict[str, dict] = {}
    operations: dict[str, dict] = {}
    for (event_type, version_number), contract in sorted(declared.items()):
        if contract.source() in leave_out:
            continue
        channel = channels.setdefault(
            key(event_type),
            {"address": event_type, "title": event_type, "messages": {}},
        )
        payload = _contract_schema(contract, schemas)
        message_key = key(event_type, f"v{version_number}")
        channel["messages"][message_key] = {"$ref": f"#/components/messages/{message_key}"}
        messages[message_key] = {
            "name": event_type,
            "title": f"{event_type} v{version_number}",
            "summary": _first_line(contract.__doc__),
            "contentType": "application/json",
            "payload": {
                "allOf": [
                    {"$ref": "#/components/schemas/Envelope"},
                    {
                        "type": "object",
                        "properties": {
                            "type": {"const": event_type},
                            "version": {"const": version_number},
                            "payload": payload,
                        },
                    },
                ]
            },
        }
    for channel_key, channel in sorted(channels.items()):
        event_type = channel["address"]
        versions = sorted(declared_versions(declared, event_type))
        publisher = declared[(event_type, versions[-1])].source()
        operations[key(publisher, "sends", event_type)] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{channel_key}"},
            "title": f"{publisher} publishes {event_type}",
            "messages": [{"$ref": f"#/channels/{channel_key}/messages/{name}"} for name in channel["messages"]],
            "x-context": publisher,
        }
        for subscription in sorted(routes.get(event_type, []), key=lambda s: s.subscriber):
            if subscription.context in leave_out:
                continue
            read = [v for v in versions if v in subscription.versions] or versions  # upcast to what it reads
            operations[key(subscription.subscriber, "receives", event_type)] = {
                "action": "receive",
                "channel": {"$ref": f"#/channels/{channel_key}"},
                "title": f"{subscription.subscriber} handles {event_type}",
                "summary": _first_line(subscription.handler.__doc__),
                "messages": [{"$ref": f"#/channels/{channel_key}/messages/{key(event_type, f'v{v}')}"} for v in read],
                "x-context": subscription.context,
                "x-queue": subscription.subscriber,
                "x-actor": actor_name(subscription.subscriber),
                "x-handler": f"{subscription.handler.__module__}.{subscription.handler.__qualname__}",
                "x-versions-read": sorted(subscription.versions),
                "x-ordered": subscription.ordered,
                "x-compensation": subscription.compensation,
                "x-outside-effects": subscription.outside_effects,
            }
    named = {
        server_name(name): server(given) if isinstance(given, str) else dict(given)
        for name, given in sorted((servers or {}).items())
    }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": title,
            "version": version,
            "description": (
                "Every event the contexts publish through the transactional outbox, and who handles it. "
                "Generated from the code (outbox.console.asyncapi); each message is the envelope around one "
                "version of its event's contract."
            ),
        },
        **({"servers": named} if named else {}),
        "defaultContentType": "application/json",
        "channels": dict(sorted(channels.items())),
        "operations": dict(sorted(operations.items())),
        "components": {"schemas": dict(sorted(schemas.items())), "messages": dict(sorted(messages.items()))},
    }


def declared_versions(declared: Mapping[tuple[str, int], type[Event]], event_type: str) -> set[int]:
    return {version for (each, version) in declared if each == event_type}


def render(document: dict) -> str:
    return json.dumps(document, indent=2) + "\n"


def _first_line(doc: str | None) -> str:
    """A docstring's first paragraph on one line, its words one space apart: the same text whether
    the interpreter keeps the indentation of docstrings (3.12 and before) or strips it (3.13)."""
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def _envelope_schema() -> dict:
    return Envelope.model_json_schema()  # described by its docstring


def _contract_schema(contract: type[Event], schemas: dict[str, dict]) -> dict:
    """The contract's JSON Schema with its `$defs` moved into the document's components (a local
    `#/$defs/...` reference means nothing inside another document); a name two contracts define
    differently is qualified by the contract's."""
    schema = contract.model_json_schema()
    renamed = {}
    for name, definition in schema.pop("$defs", {}).items():
        target = name if schemas.get(name, definition) == definition else f"{contract.__name__}{name}"
        schemas[target], renamed[name] = definition, target
    text = json.dumps(schema)
    for name, target in renamed.items():
        text = text.replace(f'"#/$defs/{name}"', f'"#/components/schemas/{target}"')
    return json.loads(text)
