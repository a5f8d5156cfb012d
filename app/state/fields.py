"""Reading the fields of a plain API object, each error naming the field path (``ConversionError``).

Shared by the conversion to ``resource.k8s.io/v1`` (``app.state.convert``) and the v1 structure check
(``app.state.validation``): each accessor returns the value narrowed to its type or raises
``ConversionError(path, problem)``, rendered ``"<field path>: <problem>"``; the name checks follow
``k8s.io/apimachinery``'s DNS label / subdomain and the DRA qualified names (``DeviceMaxIDLength``,
``DeviceMaxDomainLength``).
"""

from __future__ import annotations

import re
from typing import Any, TypeGuard

from allocator.quantity import QuantityError, parse_quantity

__all__ = [
    "ConversionError",
    "Obj",
    "as_list",
    "as_mapping",
    "as_string",
    "check_dns_label",
    "check_enum",
    "check_qualified_name",
    "check_quantity",
    "is_int",
    "opt_list",
    "opt_mapping",
    "opt_string",
    "req_dns_label",
    "req_mapping",
    "req_string",
    "type_name",
    "unique",
]

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_ID_LENGTH = 32  # DeviceMaxIDLength
_MAX_DOMAIN_LENGTH = 63  # DeviceMaxDomainLength
_MAX_LABEL_LENGTH = 63

Obj = dict[str, Any]


class ConversionError(ValueError):
    """The object cannot be converted to (or is not a valid) ``resource.k8s.io/v1`` object.

    ``path`` is the field path (``spec.devices[0].capacity[memory]``), ``problem`` what is wrong with it.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def as_mapping(value: object, path: str) -> Obj:
    if not isinstance(value, dict):
        raise ConversionError(path, f"must be an object, got {type_name(value)}")
    return value


def as_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConversionError(path, f"must be a list, got {type_name(value)}")
    return value


def as_string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ConversionError(path, f"must be a string, got {type_name(value)}")
    return value


def opt_mapping(holder: Obj, key: str, path: str) -> Obj | None:
    value = holder.get(key)
    return None if value is None else as_mapping(value, path)


def req_mapping(holder: Obj, key: str, path: str) -> Obj:
    value = holder.get(key)
    if value is None:
        raise ConversionError(path, "Required value")
    return as_mapping(value, path)


def opt_list(holder: Obj, key: str, path: str) -> list[Any]:
    """The list at ``holder[key]``, or an empty list when the field is absent or null."""
    value = holder.get(key)
    return [] if value is None else as_list(value, path)


def opt_string(holder: Obj, key: str, path: str) -> str | None:
    value = holder.get(key)
    return None if value is None else as_string(value, path)


def req_string(holder: Obj, key: str, path: str) -> str:
    value = holder.get(key)
    if value is None or value == "":
        raise ConversionError(path, "Required value")
    return as_string(value, path)


def req_dns_label(holder: Obj, key: str, path: str) -> str:
    value = req_string(holder, key, path)
    check_dns_label(value, path)
    return value


def unique(name: str, seen: set[str], path: str) -> None:
    if name in seen:
        raise ConversionError(path, f"Duplicate value: {name!r}")
    seen.add(name)


def check_enum(value: object, path: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConversionError(path, f"Unsupported value: {value!r}: supported values: {', '.join(allowed)}")


def check_dns_label(value: str, path: str) -> None:
    if len(value) > _MAX_LABEL_LENGTH or not _DNS_LABEL.fullmatch(value):
        raise ConversionError(
            path, f"{value!r} is not a DNS label (lower case alphanumerics and '-', at most 63 characters)"
        )


def check_qualified_name(name: object, path: str) -> None:
    """``QualifiedName``: ``<C identifier>`` or ``<DNS subdomain>/<C identifier>`` (validateQualifiedName)."""
    parts = as_string(name, path).split("/")
    if len(parts) > 2:
        # Upstream does not reject names with more than one '/' (a TODO in validation.go); neither do we.
        return
    identifier = parts[-1]
    if len(parts) == 2:
        domain = parts[0]
        if not domain:
            raise ConversionError(path, "the domain must not be empty")
        if len(domain) > _MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.fullmatch(domain):
            raise ConversionError(path, f"domain {domain!r} is not a DNS subdomain of at most 63 characters")
    if len(identifier) > _MAX_ID_LENGTH or not _C_IDENTIFIER.fullmatch(identifier):
        raise ConversionError(
            path,
            f"{identifier!r} is not a C identifier (letters, digits and '_', not starting with a digit, "
            "at most 32 characters)",
        )


def check_quantity(value: object, path: str) -> None:
    if value is None:
        raise ConversionError(path, "Required value")
    try:
        parse_quantity(value)
    except QuantityError as err:
        raise ConversionError(path, str(err)) from err
