"""Engine-neutral semantics of the Kubernetes IP and CIDR CEL libraries.

Sources (behaviour described, not copied): ``k8s.io/apiserver/pkg/cel/library/ip.go`` and ``cidr.go``
v0.37.2, which parse with Go's ``net/netip`` (``ParseAddr``: dotted IPv4 without leading zeros, RFC 4291
IPv6; ``ParsePrefix``: ``<addr>/<bits>``) and refuse zones and IPv4-mapped IPv6 addresses. Values are kept
as their canonical text (``netip.Addr.String()``, RFC 5952 for IPv6; a prefix keeps its unmasked address),
so two values are equal exactly when their texts are (upstream compares ``Addr`` / ``Prefix`` values).
Errors are ``LibraryError`` with upstream's wording.
"""

from __future__ import annotations

import functools
import ipaddress

from allocator.cel.library import LibraryError

__all__ = [
    "cidr_contains_cidr",
    "cidr_contains_ip",
    "cidr_ip",
    "cidr_masked",
    "cidr_prefix_length",
    "ip_family",
    "ip_is_canonical",
    "ip_is_global_unicast",
    "ip_is_link_local_multicast",
    "ip_is_link_local_unicast",
    "ip_is_loopback",
    "ip_is_unspecified",
    "is_cidr",
    "is_ip",
    "parse_cidr",
    "parse_ip",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=1024)
def _address(text: str) -> Address:
    """``netip.ParseAddr`` plus upstream's refusals. Raises LibraryError."""
    # netip accepts a zone; upstream refuses it (Python would too, with another message).
    if "%" in text and _plain_address(text.split("%", 1)[0]) is not None:
        raise LibraryError(f"IP address {text!r} with zone value is not allowed")
    address = _plain_address(text)
    if address is None:
        raise LibraryError(f"IP Address {text!r} parse error during conversion from string")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise LibraryError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return address


def _plain_address(text: str) -> Address | None:
    if not text or text != text.strip():
        return None
    try:
        return ipaddress.ip_address(text)  # rejects IPv4 octets with leading zeros, as netip does
    except ValueError:
        return None


def parse_ip(text: str) -> str:
    """``ip(text)``: the canonical text. Raises LibraryError."""
    return str(_address(text))


def is_ip(text: str) -> bool:
    try:
        _address(text)
    except LibraryError:
        return False
    return True


def ip_is_canonical(text: str) -> bool:
    """``ip.isCanonical(text)``: the text is the address's canonical form. Raises LibraryError."""
    return str(_address(text)) == text


def ip_family(ip: str) -> int:
    return _address(ip).version


def ip_is_unspecified(ip: str) -> bool:
    return _address(ip).is_unspecified


def ip_is_loopback(ip: str) -> bool:
    address = _address(ip)
    if isinstance(address, ipaddress.IPv4Address):
        return address in _V4_LOOPBACK
    return int(address) == 1


def ip_is_link_local_multicast(ip: str) -> bool:
    address = _address(ip)
    if isinstance(address, ipaddress.IPv4Address):
        return address in _V4_LINK_LOCAL_MULTICAST
    return (int(address) >> 112) & 0xFF0F == 0xFF02  # ff02::/16 with any flags nibble


def ip_is_link_local_unicast(ip: str) -> bool:
    address = _address(ip)
    if isinstance(address, ipaddress.IPv4Address):
        return address in _V4_LINK_LOCAL
    return address in _V6_LINK_LOCAL


def ip_is_global_unicast(ip: str) -> bool:
    """Go's ``IsGlobalUnicast``: not unspecified, loopback, multicast, link-local or the IPv4 broadcast
    address (private ranges count as global unicast)."""
    address = _address(ip)
    if address.is_unspecified or address.is_multicast or ip_is_loopback(ip) or ip_is_link_local_unicast(ip):
        return False
    return not (isinstance(address, ipaddress.IPv4Address) and int(address) == 0xFFFFFFFF)


_V4_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_V4_LINK_LOCAL_MULTICAST = ipaddress.IPv4Network("224.0.0.0/24")
_V4_LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")
_V6_LINK_LOCAL = ipaddress.IPv6Network("fe80::/10")


@functools.lru_cache(maxsize=1024)
def _prefix(text: str) -> tuple[Address, int]:
    """``netip.ParsePrefix`` plus upstream's refusal of IPv4-mapped addresses: the (unmasked) address and
    the prefix length. Raises LibraryError."""
    problem = f"network address parse error during conversion from string: {text!r}"
    address_text, slash, bits_text = text.partition("/")
    if not slash or "%" in address_text:
        raise LibraryError(problem)
    address = _plain_address(address_text)
    if address is None or not bits_text.isdigit() or (len(bits_text) > 1 and bits_text[0] == "0"):
        raise LibraryError(problem)
    bits = int(bits_text)
    if bits > address.max_prefixlen:
        raise LibraryError(problem)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise LibraryError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return address, bits


def parse_cidr(text: str) -> str:
    """``cidr(text)``: the canonical text ``<address>/<bits>`` (address not masked). Raises LibraryError."""
    address, bits = _prefix(text)
    return f"{address}/{bits}"


def is_cidr(text: str) -> bool:
    try:
        _prefix(text)
    except LibraryError:
        return False
    return True


def _network(cidr: str) -> Network:
    address, bits = _prefix(cidr)
    return ipaddress.ip_network(f"{address}/{bits}", strict=False)


def cidr_contains_ip(cidr: str, ip: str) -> bool:
    """Same family and inside the masked prefix (an IP string must parse: LibraryError otherwise)."""
    address = _address(ip)
    network = _network(cidr)
    return address.version == network.version and address in network


def cidr_contains_cidr(cidr: str, other: str) -> bool:
    """``other`` lies inside ``cidr``: they overlap and ``other`` is at least as long a prefix."""
    outer, inner = _network(cidr), _network(other)
    return outer.version == inner.version and outer.overlaps(inner) and outer.prefixlen <= inner.prefixlen


def cidr_ip(cidr: str) -> str:
    return str(_prefix(cidr)[0])


def cidr_masked(cidr: str) -> str:
    return str(_network(cidr))


def cidr_prefix_length(cidr: str) -> int:
    return _prefix(cidr)[1]
