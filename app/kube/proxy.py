"""The proxy, if any, between the extender and the API server: the environment read the way Go's net/http
reads it (``http.ProxyFromEnvironment``), and so the way client-go and kubectl do.

* ``HTTPS_PROXY`` for an https API server, ``HTTP_PROXY`` for an http one; each upper-case name first, its
  lower-case form when that is unset or empty. ``HTTP_PROXY`` is ignored when ``REQUEST_METHOD`` is set (a
  CGI environment, where a request header can set it; Go fails such requests, here they go direct). A value
  without a scheme is an ``http://`` URL; one Go cannot parse (a leading space, a control character) is none.
* Never for ``localhost`` or a loopback address.
* Not for a server ``NO_PROXY`` (or ``no_proxy``) names. It is a comma-separated list of ``*`` (nothing is
  proxied), IP addresses, CIDR ranges and domain names. ``example.com`` names it and its subdomains;
  ``.example.com`` and ``*.example.com`` name its subdomains only. An address or a domain may carry a
  ``:port``, and then names the server only on that port. Entries that fit no form are skipped.

Python's own reading (``urllib.request``, which aiohttp's ``trust_env`` uses) differs: it knows no CIDR
ranges, ports or ``*.`` entries and proxies loopback addresses, so an in-cluster extender whose
``NO_PROXY`` lists the Service range would send its API traffic through the proxy."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["proxy_for"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443}

_CIDR = re.compile(r"[0-9a-f:.]+/[0-9]+")
"""An address range as Go reads one: a prefix length, never a netmask."""


def proxy_for(server: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The proxy URL (credentials included) for requests to the API server at ``server``, or None."""
    url = urlsplit(server)
    if url.scheme == "https":
        proxy = _first_set(environ, "HTTPS_PROXY", "https_proxy")
    elif url.scheme == "http" and not environ.get("REQUEST_METHOD"):
        proxy = _first_set(environ, "HTTP_PROXY", "http_proxy")
    else:
        return None
    try:
        port = str(url.port or _DEFAULT_PORTS[url.scheme])
    except ValueError:  # not a port number: the request fails, it needs no proxy
        return None
    if not proxy or _unparsable(proxy) or not url.hostname or _bypassed(url.hostname, port, environ):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _first_set(environ: Mapping[str, str], *names: str) -> str:
    return next((environ[name] for name in names if environ.get(name)), "")


def _unparsable(proxy: str) -> bool:
    """A value Go's URL parser refuses, with or without ``http://`` before it (a leading space, a control
    character such as the newline of a value written from a file): Go then uses no proxy."""
    return proxy.startswith(" ") or any(c < " " or c == "\x7f" for c in proxy)


def _bypassed(host: str, port: str, environ: Mapping[str, str]) -> bool:
    if host == "localhost":
        return True
    ip = _address(host)
    if ip is not None and ip.is_loopback:
        return True
    entries = (e.strip().lower() for e in _first_set(environ, "NO_PROXY", "no_proxy").split(","))
    return any(entry == "*" or _names(entry, host, ip, port) for entry in entries if entry)


def _names(entry: str, host: str, ip: IPAddress | None, port: str) -> bool:
    """Whether the NO_PROXY ``entry`` names the server ``host`` (``ip`` when it is an address) on ``port``."""
    if _CIDR.fullmatch(entry):
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
        return ip is not None and ip.version == network.version and ip in network
    name, entry_port = _split_port(entry)
    if entry_port and entry_port != port:
        return False
    entry_ip = _address(name)
    if entry_ip is not None:
        return ip == entry_ip
    if ip is not None or not name:
        return False
    if name.startswith("*."):  # only "*." is a wildcard: "*corp.example" names nothing real
        name = name[1:]
    subdomains_only = name.startswith(".")
    name = name.removeprefix(".")
    return host.endswith(f".{name}") or (not subdomains_only and host == name)


def _split_port(entry: str) -> tuple[str, str]:
    """``host:port``, ``[v6]:port`` or a bare host / IPv6 address, as (host, port or ""). Brackets without
    a port stay (as in Go, such an entry names no address)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return (host, rest[1:]) if rest.startswith(":") else (entry, "")
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
