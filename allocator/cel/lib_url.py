"""Engine-neutral semantics of the Kubernetes URL CEL library.

Source (behaviour described, not copied): ``k8s.io/apiserver/pkg/cel/library/urls.go`` v0.37.2. ``url(s)``
accepts what Go's ``url.ParseRequestURI`` accepts (an absolute URL, or an absolute path; no relative
reference), then reads the parts as ``url.Parse`` does (a ``#fragment`` is split off). A value is kept as
its text; the accessors parse it again (cached). Errors are ``LibraryError``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from urllib.parse import unquote, unquote_plus

from allocator.cel.library import LibraryError

__all__ = [
    "is_url",
    "parse_url",
    "url_escaped_path",
    "url_host",
    "url_hostname",
    "url_port",
    "url_query",
    "url_scheme",
]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_PORT = re.compile(r":[0-9]*")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Characters Go's EscapedPath keeps as they are (unreserved, sub-delims, ':', '@', '/'), besides '%XX'.
_PATH_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/[]%")


@dataclass(frozen=True, slots=True)
class _Parts:
    scheme: str
    host: str
    raw_path: str
    raw_query: str


def _error(text: str, why: str) -> LibraryError:
    return LibraryError(f'URL parse error during conversion from string: parse "{text}": {why}')


@functools.lru_cache(maxsize=1024)
def _parse(text: str, request: bool) -> _Parts:
    """Go's ``url.parse`` for what the library reads: scheme, host, path, query. ``request``: the rules of
    ``ParseRequestURI`` (no fragment split, a rootless reference is an error). Raises LibraryError."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise _error(text, "net/url: invalid control character in URL")
    rest = text
    if not request:
        rest = rest.split("#", 1)[0]
    if request and not rest:
        raise _error(text, "empty url")
    scheme = ""
    match = _SCHEME.match(rest)
    if match:
        scheme, rest = match.group(0)[:-1].lower(), rest[match.end() :]
    elif rest.startswith(":"):
        raise _error(text, "missing protocol scheme")
    query = ""
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    elif "?" in rest:
        rest, query = rest.split("?", 1)
    if not rest.startswith("/"):
        if scheme:
            return _Parts(scheme, "", "", query)  # an opaque URL such as mailto:x@example.com
        if request:
            raise _error(text, "invalid URI for request")
    host = ""
    if (scheme or not request) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        host = _host(text, authority.rpartition("@")[2])
    if _ESCAPE.search(rest):
        raise _error(text, "invalid URL escape")
    return _Parts(scheme, host, rest, query)


def _host(text: str, host: str) -> str:
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise _error(text, "missing ']' in host")
        if not _PORT.fullmatch(host[end + 1 :]) and host[end + 1 :]:
            raise _error(text, f"invalid port {host[end + 1 :]!r} after host")
        return host
    _, colon, port = host.rpartition(":")
    if colon and not port.isdigit() and port:
        raise _error(text, f"invalid port {':' + port!r} after host")
    if _ESCAPE.search(host):
        raise _error(text, "invalid URL escape")
    return host


def parse_url(text: str) -> str:
    """``url(text)``: the text, once it parses. Raises LibraryError."""
    _parse(text, True)
    return text


def is_url(text: str) -> bool:
    try:
        _parse(text, True)
    except LibraryError:
        return False
    return True


def url_scheme(url: str) -> str:
    return _parse(url, False).scheme


def url_host(url: str) -> str:
    return _parse(url, False).host


def url_hostname(url: str) -> str:
    """The host without port and without the brackets of an IPv6 literal."""
    host = _parse(url, False).host
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rpartition(":")[0] if ":" in host else host


def url_port(url: str) -> str:
    host = _parse(url, False).host
    if host.startswith("["):
        host = host[host.find("]") + 1 :]
    return host.rpartition(":")[2] if ":" in host else ""


def url_escaped_path(url: str) -> str:
    """The path as written when it is validly escaped, else re-escaped (Go's ``EscapedPath``)."""
    raw = _parse(url, False).raw_path
    if all(c in _PATH_KEEP for c in raw):
        return raw
    return "".join(
        c if c in _PATH_KEEP and c != "%" else "".join(f"%{b:02X}" for b in c.encode()) for c in unquote(raw)
    )


def url_query(url: str) -> dict[str, list[str]]:
    """The query as a map of keys to their values in order; malformed pairs are skipped (Go's ``Query``)."""
    values: dict[str, list[str]] = {}
    for pair in _parse(url, False).raw_query.split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        values.setdefault(unquote_plus(key), []).append(unquote_plus(value))
    return values
