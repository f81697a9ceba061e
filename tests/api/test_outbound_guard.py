"""connectors/outbound.py: customer-given URLs reach public addresses only, in every spelling
the OS resolver accepts. Names are answered by GEO_OUTBOUND_RESOLVE (no DNS, no network)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors import outbound
from connectors.outbound import OutboundRefused, check_url

PUBLIC = "93.184.216.34"


@pytest.fixture(autouse=True)
def names(settings: Any) -> None:
    settings.GEO_OUTBOUND_ALLOW = []
    settings.GEO_OUTBOUND_RESOLVE = {
        "hooks.example.com": [PUBLIC],
        "inside.example.com": ["127.0.0.1"],
        "half.example.com": [PUBLIC, "10.0.0.7"],
        "v6.example.com": ["2606:2800:220:1:248:1893:25c8:1946"],
    }


REFUSED = {
    "https://127.0.0.1:5432/": "loopback",
    "https://localhost:6379/": "loopback",
    "https://localhost./": "loopback",
    "https://api.localhost/": "loopback",
    "https://[::1]/": "loopback",
    "https://169.254.169.254/latest/meta-data/": "metadata",
    "https://[fd00:ec2::254]/": "metadata",
    "https://[::ffff:169.254.169.254]/": "metadata",
    "https://metadata.google.internal/computeMetadata/v1/": "metadata",
    "https://METADATA.google.internal./": "metadata",
    "https://10.1.2.3/": "private",
    "https://192.168.1.20/": "private",
    "https://172.16.0.1/": "private",
    "https://inside.example.com/": "loopback",  # a name resolving to 127.0.0.1
    "https://half.example.com/": "private",  # any address inside refuses the URL
    "https://0x7f000001/": "loopback",  # hex
    "https://0177.0.0.1/": "loopback",  # octal
    "https://2130706433/": "loopback",  # decimal
    "https://127.1/": "loopback",  # short form
    "https://0x7f.0.0.1/": "loopback",
    "https://[::ffff:127.0.0.1]/": "loopback",  # IPv4-mapped
    "https://[::7f00:1]/": "loopback",  # IPv4-compatible
    "https://[64:ff9b::a00:1]/": "private",  # NAT64 of 10.0.0.1
    "https://[2002:c0a8:101::1]/": "private",  # 6to4 of 192.168.1.1
    "https://[fe80::1%25eth0]/": "link-local",  # with a zone id
    "https://169.254.10.1/": "link-local",
    "https://100.64.1.1/": "shared",
    "https://224.0.0.1/": "multicast",
    "https://[ff02::1]/": "multicast",
    "https://0.0.0.0/": "unspecified",
    "https://[::]/": "unspecified",
    "https://240.0.0.1/": "reserved",
    "https://\u24dbocalhost/": "loopback",  # IDNA maps the circled l to "l"
}


@pytest.mark.parametrize("url", sorted(REFUSED))
def test_urls_that_reach_inside_are_refused_naming_the_problem(url: str) -> None:
    with pytest.raises(OutboundRefused) as refused:
        check_url(url)
    assert REFUSED[url] in str(refused.value)
    assert str(refused.value).startswith("url: ")


def test_public_hosts_pass_and_the_connection_goes_to_the_checked_address() -> None:
    target = check_url("https://Hooks.Example.com./geo?x=1")
    assert (target.host, target.address, target.port) == ("hooks.example.com", PUBLIC, 443)
    assert target.path == "/geo?x=1" and target.host_header == "hooks.example.com"
    assert check_url("https://v6.example.com:8443/").host_header == "v6.example.com:8443"
    assert check_url("https://8.8.8.8/").address == "8.8.8.8"
    assert check_url("https://[2606:4700:4700::1111]/").address == "2606:4700:4700::1111"


def test_a_bare_host_or_another_scheme_is_refused() -> None:
    for url in ("169.254.169.254/latest", "hooks.example.com/x", "ftp://hooks.example.com/",
                "file:///etc/passwd", "https://user:pw@hooks.example.com/"):  # fmt: skip
        with pytest.raises(OutboundRefused):
            check_url(url)


def test_plain_http_only_to_the_allow_list(settings: Any) -> None:
    with pytest.raises(OutboundRefused, match="https://"):
        check_url("http://hooks.example.com/")
    with pytest.raises(OutboundRefused, match="loopback"):
        check_url("http://127.0.0.1:8000/")
    settings.GEO_OUTBOUND_ALLOW = ["127.0.0.0/8", "inside.example.com"]
    assert check_url("http://127.0.0.1:8000/").address == "127.0.0.1"
    assert check_url("https://inside.example.com/").address == "127.0.0.1"
    with pytest.raises(OutboundRefused, match="loopback"):
        check_url("https://[::1]/")  # an IPv4 network does not admit IPv6 loopback


def test_the_metadata_service_is_refused_even_when_allow_listed(settings: Any) -> None:
    settings.GEO_OUTBOUND_ALLOW = ["169.254.0.0/16", "metadata.google.internal"]
    assert check_url("https://169.254.10.1/").address == "169.254.10.1"
    for url in ("https://169.254.169.254/", "https://metadata.google.internal/"):
        with pytest.raises(OutboundRefused, match="metadata"):
            check_url(url)


def test_an_unresolvable_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dns(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no such name")

    monkeypatch.setattr(outbound.socket, "getaddrinfo", no_dns)
    with pytest.raises(OutboundRefused, match="does not resolve"):
        check_url("https://nowhere.example.net/")
