"""The SSRF guard: which URLs a webhook may be sent to.

A customer names the URL, and our servers make the request from inside our network, so the URL's host
is resolved here and refused unless every address it resolves to is public (or inside a network the
deployment allows). The caller connects to exactly the addresses returned, never resolving again.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never allowed, whatever the deployment lists: link-local networks and the cloud metadata addresses.
NEVER_ALLOWED: tuple[Network, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS's metadata service over IPv6
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")

DESCRIPTIONS = {
    "loopback": "a loopback address",
    "private": "a private address",
    "link_local": "a link-local address (where cloud metadata services answer)",
    "multicast": "a multicast address",
    "reserved": "a reserved address",
    "unspecified": "the unspecified address",
}


class ForbiddenAddress(ValueError):
    """A URL webhooks must not be sent to: str(e) is a sentence for the client, e.reason a short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check(url: str) -> list[Address]:
    """Resolve the URL's host and refuse it (ForbiddenAddress) unless its scheme is allowed and every
    address is public or inside settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS (never link-local).
    Returns the addresses, to connect to exactly those."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    allowed_schemes = ("https", "http") if _http_allowed() else ("https",)
    if scheme not in allowed_schemes:
        named = f"'{scheme}'" if scheme else "missing"
        raise ForbiddenAddress(
            "scheme",
            f"the URL's scheme is {named}: webhooks go only to {' or '.join(s + '://' for s in allowed_schemes)} URLs",
        )
    if "@" in parts.netloc:
        raise ForbiddenAddress(
            "credentials",
            "the URL holds a user name or password before its host: webhooks prove themselves with their "
            "signature, so give the URL without credentials",
        )
    host = parts.hostname
    if not host:
        raise ForbiddenAddress("no_host", "the URL has no host: give an absolute URL, such as https://example.com/hook")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ForbiddenAddress("no_host", "the URL's port is not a number from 1 to 65535") from None
    addresses = _resolve(host, port)
    allowed = _allowed_networks()
    for address in addresses:
        forbidden = _forbidden(address, allowed)
        if forbidden:
            reason, culprit = forbidden
            shown = "is" if _same(host, address) else f"resolves to {address},"
            if culprit != address:
                shown = f"{'is an address' if shown == 'is' else shown.rstrip(',')} that leads to {culprit},"
            raise ForbiddenAddress(
                reason,
                f"the URL's host {host} {shown} {DESCRIPTIONS[reason]}: webhooks go only to public addresses",
            )
    return addresses


def _http_allowed() -> bool:
    return bool(getattr(settings, "DEBUG", False) or getattr(settings, "WEBHOOKS_ALLOW_HTTP", False))


def _allowed_networks() -> list[Network]:
    configured = getattr(settings, "WEBHOOKS_ALLOW_PRIVATE_NETWORKS", None) or []
    entries = configured.split(",") if isinstance(configured, str) else configured
    networks = []
    for entry in entries:
        if str(entry).strip():
            try:
                networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
            except ValueError:
                raise ValueError(f"WEBHOOKS_ALLOW_PRIVATE_NETWORKS: {entry!r} is not a network in CIDR form") from None
    return networks


def _resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ForbiddenAddress(
            "unresolvable",
            f"the URL's host {host} does not resolve to an address ({why}): check its spelling and its DNS records",
        ) from None
    addresses: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ForbiddenAddress("unresolvable", f"the URL's host {host} resolves to no address")
    return addresses


def _forbidden(address: Address, allowed: list[Network]) -> tuple[str, Address] | None:
    """The reason code that forbids the address and the address it names, or None when it may be connected to.
    An IPv6 address that leads to an IPv4 one (mapped, 6to4, Teredo, NAT64) is judged by that."""
    judged: list[Address] = [*_embedded_ipv4(address)] or [address]
    for candidate in (address, *judged):
        if candidate.is_link_local or any(candidate in network for network in NEVER_ALLOWED):
            return "link_local", candidate
    for candidate in judged:
        if any(candidate in network or address in network for network in allowed):
            continue
        reason = _kind(candidate)
        if reason:
            return reason, candidate
    return None


def _embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    embedded = [address.ipv4_mapped, address.sixtofour, address.teredo[1] if address.teredo else None]
    if address in NAT64:
        embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [ipv4 for ipv4 in embedded if ipv4 is not None]


def _kind(address: Address) -> str | None:
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private or not address.is_global:  # not global: also the shared 100.64.0.0/10
        return "private"
    return None


def _same(host: str, address: Address) -> bool:
    try:
        return ipaddress.ip_address(host) == address
    except ValueError:
        return False
