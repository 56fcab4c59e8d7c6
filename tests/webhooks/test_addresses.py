"""The SSRF guard: which webhook URLs are refused, and why (webhooks/addresses.py)."""

import ipaddress
import socket

import pytest

from webhooks import addresses
from webhooks.addresses import ForbiddenAddress, check

pytestmark = pytest.mark.servers_unused  # resolves literals and localhost only, starts nothing


@pytest.fixture(autouse=True)
def production(settings):
    """As deployed: https only, no private network allowed."""
    settings.DEBUG = False
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = []
    return settings


def refusal(url):
    with pytest.raises(ForbiddenAddress) as caught:
        check(url)
    return caught.value


def test_a_public_address_is_allowed_and_returned():
    assert check("https://93.184.216.34/hooks?x=1") == [ipaddress.ip_address("93.184.216.34")]
    assert check("https://[2606:2800:220:1::1]:8443/") == [ipaddress.ip_address("2606:2800:220:1::1")]


@pytest.mark.parametrize(
    ("url", "reason", "shown"),
    [
        ("https://127.0.0.1/", "loopback", "127.0.0.1"),
        ("https://localhost/", "loopback", "localhost"),
        ("https://10.0.0.5/", "private", "10.0.0.5 is a private address"),
        ("https://192.168.1.1/", "private", "192.168.1.1"),
        ("https://172.16.0.1/", "private", "172.16.0.1"),
        ("https://100.64.0.1/", "private", "100.64.0.1"),  # carrier-grade NAT: not public either
        ("https://169.254.169.254/latest/meta-data", "link_local", "169.254.169.254"),
        ("https://169.254.1.1/", "link_local", "169.254.1.1"),
        ("https://224.0.0.1/", "multicast", "224.0.0.1"),
        ("https://240.0.0.1/", "reserved", "240.0.0.1"),
        ("https://0.0.0.0/", "unspecified", "0.0.0.0"),
        ("https://[::1]/", "loopback", "::1"),
        ("https://[::]/", "unspecified", "::"),
        ("https://[fe80::1]/", "link_local", "fe80::1"),
        ("https://[fc00::1]/", "private", "fc00::1"),
        ("https://[ff02::1]/", "multicast", "ff02::1"),
        ("https://[::ffff:127.0.0.1]/", "loopback", "leads to 127.0.0.1"),
        ("https://[::ffff:10.0.0.5]/", "private", "leads to 10.0.0.5"),
        ("https://[::ffff:169.254.169.254]/", "link_local", "leads to 169.254.169.254"),
        ("https://[2002:7f00:1::1]/", "loopback", "leads to 127.0.0.1"),  # 6to4
        ("https://[64:ff9b::a00:5]/", "private", "leads to 10.0.0.5"),  # NAT64
        ("https://2130706433/", "loopback", "2130706433 resolves to 127.0.0.1"),  # decimal
        ("https://0x7f.1/", "loopback", "0x7f.1 resolves to 127.0.0.1"),  # hexadecimal, short form
        ("https://0177.0.0.1/", "loopback", "resolves to 127.0.0.1"),  # octal
        ("https://0xa9fea9fe/", "link_local", "resolves to 169.254.169.254"),
    ],
)
def test_addresses_that_are_not_public_are_refused_with_their_reason(url, reason, shown):
    error = refusal(url)
    assert error.reason == reason
    assert shown in str(error)
    assert str(error).endswith("webhooks go only to public addresses")


def test_the_message_says_what_the_host_resolved_to():
    assert str(refusal("https://10.0.0.5:8443/hook")) == (
        "the URL's host 10.0.0.5 is a private address: webhooks go only to public addresses"
    )
    assert str(refusal("https://2130706433/")) == (
        "the URL's host 2130706433 resolves to 127.0.0.1, a loopback address: webhooks go only to public addresses"
    )


def test_a_host_is_refused_when_any_of_its_addresses_is_not_public(monkeypatch):
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "mixed.example":  # a made-up name, published with one public and one private address
            return real("93.184.216.34", *args, **kwargs) + real("10.0.0.5", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(addresses.socket, "getaddrinfo", resolve)
    error = refusal("https://mixed.example/")
    assert error.reason == "private"
    assert str(error).startswith("the URL's host mixed.example resolves to 10.0.0.5, a private address")


@pytest.mark.parametrize("url", ["http://93.184.216.34/", "ftp://93.184.216.34/", "file:///etc/passwd", "//x.example/"])
def test_only_https_as_deployed(url):
    error = refusal(url)
    assert error.reason == "scheme"
    assert "webhooks go only to https:// URLs" in str(error)


@pytest.mark.parametrize("setting", ["DEBUG", "WEBHOOKS_ALLOW_HTTP"])
def test_http_where_the_deployment_allows_it(production, setting):
    setattr(production, setting, True)
    assert check("http://93.184.216.34/") == [ipaddress.ip_address("93.184.216.34")]
    assert refusal("ftp://93.184.216.34/").reason == "scheme"
    assert refusal("http://127.0.0.1/").reason == "loopback"  # http is allowed, private addresses still are not


@pytest.mark.parametrize("networks", [["127.0.0.0/8", "10.0.0.0/8"], "127.0.0.0/8, 10.0.0.0/8"])
def test_the_allow_list_lets_its_networks_through(production, networks):
    production.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = networks
    assert check("https://127.0.0.1:8443/") == [ipaddress.ip_address("127.0.0.1")]
    assert check("https://2130706433/") == [ipaddress.ip_address("127.0.0.1")]
    assert check("https://[::ffff:127.0.0.1]/") == [ipaddress.ip_address("::ffff:127.0.0.1")]
    assert check("https://10.1.2.3/") == [ipaddress.ip_address("10.1.2.3")]
    assert refusal("https://192.168.1.1/").reason == "private"
    assert refusal("https://[::1]/").reason == "loopback"


def test_link_local_and_the_metadata_address_are_never_allowed(production):
    production.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = ["169.254.0.0/16", "fe80::/10", "fd00::/8", "0.0.0.0/0"]
    assert refusal("https://169.254.169.254/").reason == "link_local"
    assert refusal("https://[::ffff:169.254.169.254]/").reason == "link_local"
    assert refusal("https://[fe80::1]/").reason == "link_local"
    assert refusal("https://[fd00:ec2::254]/").reason == "link_local"


def test_a_wrong_allow_list_is_a_configuration_error_not_a_refusal(production):
    production.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = ["10.0.0.0/33"]
    with pytest.raises(ValueError, match="WEBHOOKS_ALLOW_PRIVATE_NETWORKS") as caught:
        check("https://10.0.0.5/")
    assert not isinstance(caught.value, ForbiddenAddress)


@pytest.mark.parametrize("url", ["https://user:pass@93.184.216.34/", "https://user@93.184.216.34/"])
def test_credentials_in_the_url_are_refused(url):
    error = refusal(url)
    assert error.reason == "credentials"
    assert "user name or password" in str(error)


@pytest.mark.parametrize("url", ["https:///hooks", "https://", "https://:443/"])
def test_a_url_without_a_host_is_refused(url):
    assert refusal(url).reason == "no_host"


def test_a_host_that_does_not_resolve_is_refused():
    error = refusal("https://no-such-host.invalid/")  # .invalid never resolves (RFC 6761)
    assert error.reason == "unresolvable"
    assert "no-such-host.invalid does not resolve" in str(error)
