"""Reading API-shaped dicts field by field, with the field path for errors: each reader checks one value's
type and raises ``InvalidInputError`` naming the object and the path
(``ResourceClaim demo/x: spec.devices.requests[0].exactly.count: must be an integer``). Paths are formatted
only when an error is raised: parsing builds many and almost never needs one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.errors import InvalidInputError
from allocator.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "FieldPath",
    "object_name",
    "read_amount",
    "read_bool",
    "read_int",
    "read_list",
    "read_mapping",
    "read_quantity",
    "read_selectors",
    "read_str",
    "read_strings",
]


class FieldPath:
    """Field paths for error messages (``spec.devices.requests[0].name``), formatted only when an error
    is raised: parsing builds many paths and almost never needs one."""

    __slots__ = ("name", "obj", "parent")

    def __init__(self, obj: str, parent: FieldPath | None = None, name: str | int | None = None) -> None:
        self.obj = obj
        self.parent = parent
        self.name = name

    def __truediv__(self, name: str | int) -> FieldPath:
        return FieldPath(self.obj, self, name)

    @property
    def path(self) -> str:
        parts: list[str] = []
        node: FieldPath | None = self
        while node is not None and node.name is not None:
            parts.append(f"[{node.name}]" if isinstance(node.name, int) else f".{node.name}")
            node = node.parent
        return "".join(reversed(parts)).lstrip(".")

    def __str__(self) -> str:
        return f"{self.obj}: {self.path}" if self.path else self.obj

    def error(self, problem: str) -> InvalidInputError:
        return InvalidInputError(f"{self}: {problem}")


def read_mapping(value: Any, at: FieldPath, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise at.error("required field is missing")
        return {}
    if not isinstance(value, Mapping):
        raise at.error(f"must be an object, got {type(value).__name__}")
    return value


def read_list(value: Any, at: FieldPath) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise at.error(f"must be a list, got {type(value).__name__}")
    return value


def read_str(value: Any, at: FieldPath, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise at.error("required field is missing")
        return ""
    if not isinstance(value, str):
        raise at.error(f"must be a string, got {type(value).__name__}")
    return value


def read_bool(value: Any, at: FieldPath) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise at.error(f"must be a boolean, got {type(value).__name__}")
    return value


def read_int(value: Any, at: FieldPath, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise at.error(f"must be an integer, got {type(value).__name__}")
    return value


def read_quantity(value: Any, at: FieldPath) -> Quantity:
    try:
        return parse_quantity(value)
    except QuantityError as e:
        raise at.error(str(e)) from e


def read_amount(value: Any, at: FieldPath) -> Quantity:
    """A capacity or counter value: a quantity that is not negative."""
    quantity = read_quantity(value, at)
    if quantity.value < 0:
        raise at.error(f"must not be negative, got {quantity.text}")
    return quantity


def read_strings(value: Any, at: FieldPath) -> tuple[str, ...]:
    return tuple(read_str(v, at / i, required=True) for i, v in enumerate(read_list(value, at)))


def object_name(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, FieldPath]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = raw if isinstance(raw := meta.get("name"), str) else ""
    namespace = raw if isinstance(raw := meta.get("namespace"), str) else ""
    label = f"{namespace}/{name}" if namespace else name
    at = FieldPath(f"{kind} {label or '<unnamed>'}")
    if not isinstance(obj, Mapping):
        raise at.error(f"must be an object, got {type(obj).__name__}")
    if not name:
        raise (at / "metadata.name").error("required field is missing")
    return namespace, name, at


def read_selectors(raw: Any, at: FieldPath) -> tuple[str, ...]:
    """Selector expressions; a selector without ``cel`` is reported by the caller (upstream, fatal)."""
    expressions = []
    for i, selector in enumerate(read_list(raw, at)):
        data = read_mapping(selector, at / i, required=True)
        cel = data.get("cel")
        expressions.append(
            read_str(read_mapping(cel, at / i / "cel").get("expression"), at / i / "cel" / "expression")
            if cel is not None
            else ""
        )
    return tuple(expressions)
