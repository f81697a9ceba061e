"""Outbound HTTP to a URL a customer gave (webhook endpoints, any future callback): checked so
it cannot reach inside, and sent pinned to the address that was checked.

    target = check_url(url)            # OutboundRefused names the problem (API 400, form error)
    status = post_pinned(target, body=..., headers=..., timeout=...)   # checks again first

A URL is refused when its host, resolved, has ANY address that is not public: loopback,
private, link-local, shared (100.64/10), multicast, reserved, unspecified, the cloud metadata
addresses, and the IPv6 forms that carry an IPv4 address inside (mapped, compatible, NAT64,
6to4) whose IPv4 address is not public. Hosts are read the way the OS resolver reads them:
every IPv4 spelling `inet_aton` accepts (0x7f000001, 0177.0.0.1, 2130706433, 127.1), IPv6
zone ids, a trailing dot, IDNA. The address classes are Python's `ipaddress` (the IANA
special-purpose registries); docs/decisions.md says why no SSRF library.

`settings.GEO_OUTBOUND_ALLOW` (CIDRs and host names) lets tests and private deployments reach
named destinations; plain http:// is accepted only to those. The metadata endpoints are refused
even then. `settings.GEO_OUTBOUND_RESOLVE` ({name: [addresses]}) answers for a name before DNS
does (as curl's --resolve; tests use it, so no test touches the network): its answers are
checked like any other.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import certifi
import idna
import urllib3
from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_NAMES = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data.ec2.internal"}
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_SPELLING = re.compile(r"^[0-9a-fx.]+$", re.IGNORECASE)

CONNECTION_FAILED = "connection failed"  # one class for every network error: no port scanner


class OutboundRefused(ValueError):
    """The URL may not be called; the message says why, for the person who gave it."""


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (`address`, `port`) and what to say there (`host`,
    the Host header and TLS name, and `path`)."""

    scheme: str
    host: str  # ASCII (IDNA), lowercase, no trailing dot, no brackets
    port: int
    path: str  # path and query, as given
    address: str  # the first checked address: the connection goes there, and only there

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def check_url(url: str) -> Target:
    """`url` parsed, its host resolved and every address checked (OutboundRefused if not)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise OutboundRefused("url: write the full URL, starting with https://")
    if parts.username is not None or parts.password is not None:
        raise OutboundRefused("url: credentials in the URL are not accepted")
    host = normalise_host(parts.hostname or "")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OutboundRefused("url: the port is not a number from 1 to 65535") from None
    if host in METADATA_NAMES or host.endswith(".metadata.google.internal"):
        raise OutboundRefused("url: the host is a cloud metadata service")
    allowed_name = host in _allowed_names()
    if (host == "localhost" or host.endswith(".localhost")) and not allowed_name:
        raise OutboundRefused("url: the host is a loopback address")
    addresses = resolve(host, port)
    for address in addresses:
        problem = refusal(address)
        if (problem and not (allowed_name or _allowed_address(address))) or _metadata(address):
            raise OutboundRefused(f"url: the host resolves to {problem or 'a metadata address'}")
    trusted = allowed_name or all(_allowed_address(a) for a in addresses)
    if parts.scheme == "http" and not trusted:
        raise OutboundRefused("url: plain http:// is not accepted; use https://")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme=parts.scheme, host=host, port=port, path=path, address=str(addresses[0]))


def normalise_host(raw: str) -> str:
    """The host as the resolver sees it: zone id and one trailing dot dropped, IPv4 in its
    dotted form whatever its spelling, names in IDNA ASCII."""
    host = raw.strip().lower().split("%", 1)[0]
    host = host[:-1] if host.endswith(".") else host
    if not host:
        raise OutboundRefused("url: the URL has no host")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if _IPV4_SPELLING.match(host):
        try:  # what the resolver does with 0x7f000001, 0177.0.0.1, 2130706433, 127.1
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            pass
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        raise OutboundRefused("url: the host is not a valid host name") from None


def resolve(host: str, port: int) -> list[Address]:
    """Every address of `host` (an address resolves to itself); GEO_OUTBOUND_RESOLVE first."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    overrides: Mapping[str, list[str]] = settings.GEO_OUTBOUND_RESOLVE
    if host in overrides:
        return [ipaddress.ip_address(a) for a in overrides[host]]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise OutboundRefused("url: the host name does not resolve") from None
    found = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not found:
        raise OutboundRefused("url: the host name does not resolve")
    return list(dict.fromkeys(found))


def refusal(address: Address) -> str | None:
    """Why `address` is not a public destination, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = refusal(embedded)
            return f"{inner} (inside an IPv6 address)" if inner else None
    if _metadata(address):
        return "a cloud metadata address"
    for name, test in (
        ("a loopback address", address.is_loopback),
        ("an unspecified address", address.is_unspecified),
        ("a link-local address", address.is_link_local),
        ("a multicast address", address.is_multicast),
        ("a reserved address", address.is_reserved),
        ("a private address", address.is_private),
    ):
        if test:
            return name
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a site-local address"
    if not address.is_global:
        return "a shared or special-purpose address"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, for the forms that reach it."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _metadata(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return embedded in METADATA_ADDRESSES
    return address in METADATA_ADDRESSES


def _allowed_names() -> set[str]:
    return {entry for entry in _allow_entries() if not _is_network(entry)}


def _allowed_address(address: Address) -> bool:
    networks = [ipaddress.ip_network(e, strict=False) for e in _allow_entries() if _is_network(e)]
    return any(address.version == net.version and address in net for net in networks)


def _allow_entries() -> list[str]:
    entries: list[str] = settings.GEO_OUTBOUND_ALLOW
    return [entry.strip().lower().rstrip(".") for entry in entries if entry.strip()]


def _is_network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True


# --- sending --------------------------------------------------------------------------------


def post_pinned(
    url: str, *, body: bytes, headers: Mapping[str, str], timeout: float
) -> tuple[int | None, str]:
    """POST `body` to `url`, checked again now and connected to the address just checked
    (a name that resolved public at registration and inside now is refused: no DNS
    rebinding). TLS is verified against the host name (SNI and certificate), redirects are
    not followed and the response body is not read. Returns (status, "") or (None, why):
    "refused: ..." from the check, or CONNECTION_FAILED for any network error, whatever it
    was, so the log does not tell closed, silent and non-TLS ports apart."""
    try:
        target = check_url(url)
    except OutboundRefused as error:
        return None, f"refused: {str(error).removeprefix('url: ')}"
    pool = _pool(target, timeout)
    try:
        response = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers={**headers, "Host": target.host_header},
            redirect=False,
            retries=False,
            preload_content=False,
            assert_same_host=False,
        )
    except (urllib3.exceptions.HTTPError, OSError, ValueError):
        return None, CONNECTION_FAILED
    finally:
        pool.close()
    status = int(response.status)
    response.release_conn()
    return status, ""


def _pool(target: Target, timeout: float) -> urllib3.HTTPConnectionPool:
    limits = urllib3.Timeout(connect=timeout, read=timeout)
    if target.scheme == "http":
        return urllib3.HTTPConnectionPool(target.address, target.port, timeout=limits, maxsize=1)
    return urllib3.HTTPSConnectionPool(
        target.address,
        target.port,
        timeout=limits,
        maxsize=1,
        cert_reqs="CERT_REQUIRED",
        ca_certs=certifi.where(),  # the CA bundle requests uses
        server_hostname=target.host,  # SNI: the name, while the socket goes to the address
        assert_hostname=target.host,  # the certificate must be the name's
    )
