"""Engine-neutral semantics of the Kubernetes format CEL library (``format.dns1123Label()`` ...).

Source (behaviour described, not copied): ``k8s.io/apiserver/pkg/cel/library/format.go`` v0.37.2 and the
validators it names: ``k8s.io/apimachinery`` ``NameIsDNSLabel`` / ``NameIsDNSSubdomain`` /
``NameIsDNS1035Label`` (the ``...Prefix`` forms accept a trailing dash), ``IsQualifiedName``,
``IsValidLabelValue``, and kube-openapi ``strfmt`` for ``uri`` (``url.ParseRequestURI``), ``uuid``, ``byte``
(base64), ``date`` (RFC 3339 full-date) and ``datetime``. ``validate`` returns the list of problems, empty
for a valid string (upstream: ``optional.none()``); the messages follow apimachinery's wording.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from allocator.cel.lib_url import is_url

__all__ = ["FORMAT_NAMES", "validate"]

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE)
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")


def _length(text: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(text) > limit else []


def _pattern(text: str, pattern: re.Pattern[str], what: str) -> list[str]:
    return [] if pattern.fullmatch(text) else [f"a {what} must match the regex {pattern.pattern!r}"]


def _dns_label(text: str, prefix: bool, pattern: re.Pattern[str], what: str) -> list[str]:
    if prefix and len(text) > 1 and text.endswith("-"):
        text = text[:-1] + "a"  # a generateName prefix may end with a dash
    return _length(text, 63) + _pattern(text, pattern, what)


def _dns_subdomain(text: str, prefix: bool = False) -> list[str]:
    if prefix and len(text) > 1 and text.endswith("-"):
        text = text[:-1] + "a"
    return _length(text, 253) + _pattern(text, _DNS1123_SUBDOMAIN, "lowercase RFC 1123 subdomain")


def _qualified_name(text: str) -> list[str]:
    parts = text.split("/")
    if len(parts) == 1:
        name = parts[0]
        problems = []
    elif len(parts) == 2:
        prefix, name = parts
        problems = ["prefix part must be non-empty"] if not prefix else _dns_subdomain(prefix)
    else:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.' (optional prefix)"]
    if not name:
        return [*problems, "name part must be non-empty"]
    return problems + _length(name, 63) + _pattern(name, _QUALIFIED_NAME, "qualified name")


def _date(text: str) -> bool:
    if not _DATE.fullmatch(text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _datetime(text: str) -> bool:
    parts = text.lower().split("t")
    if len(text) < 4 or len(parts) < 2 or not _date(parts[0]):
        return False
    match = _TIME.search(parts[1])
    return match is not None and match.group(1) <= "23" and match.group(2) <= "59" and match.group(3) <= "59"


def _check(predicate: Callable[[str], bool], problem: str) -> Callable[[str], list[str]]:
    return lambda text: [] if predicate(text) else [problem]


_VALIDATORS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": lambda s: _dns_label(s, False, _DNS1123_LABEL, "lowercase RFC 1123 label"),
    "dns1123Subdomain": _dns_subdomain,
    "dns1035Label": lambda s: _dns_label(s, False, _DNS1035_LABEL, "DNS-1035 label"),
    "qualifiedName": _qualified_name,
    "dns1123LabelPrefix": lambda s: _dns_label(s, True, _DNS1123_LABEL, "lowercase RFC 1123 label"),
    "dns1123SubdomainPrefix": lambda s: _dns_subdomain(s, True),
    "dns1035LabelPrefix": lambda s: _dns_label(s, True, _DNS1035_LABEL, "DNS-1035 label"),
    "labelValue": lambda s: _length(s, 63) + _pattern(s, _LABEL_VALUE, "valid label"),
    "uri": _check(is_url, "invalid URI for request"),
    "uuid": _check(lambda s: bool(_UUID.fullmatch(s)), "does not match the UUID format"),
    "byte": _check(lambda s: bool(_BASE64.fullmatch(s)), "invalid base64"),
    "date": _check(_date, "invalid date"),
    "datetime": _check(_datetime, "invalid datetime"),
}

FORMAT_NAMES = tuple(_VALIDATORS)
"""The named formats (``format.named(<name>)`` and ``format.<name>()``)."""


def validate(name: str, text: str) -> list[str]:
    """The problems of ``text`` in format ``name`` (one of ``FORMAT_NAMES``); empty when valid."""
    return _VALIDATORS[name](text)
