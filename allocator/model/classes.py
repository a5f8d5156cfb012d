"""The ``DeviceClass`` kind: the selectors every device of the class matches and the config copied into
allocation results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocator.model.fields import object_name, read_list, read_mapping, read_selectors, read_str

__all__ = ["DeviceClass", "parse_device_class"]


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """``DeviceClass``: selectors all devices of the class match, config copied into results."""

    name: str
    selectors: tuple[str, ...]
    config: tuple[Mapping[str, Any], ...]
    extended_resource_name: str


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """Convert a resource.k8s.io/v1 DeviceClass dict. Raises InvalidInputError naming the field."""
    _, name, at = object_name("DeviceClass", obj)
    spec = read_mapping(obj.get("spec"), at / "spec")
    return DeviceClass(
        name=name,
        selectors=read_selectors(spec.get("selectors"), at / "spec" / "selectors"),
        config=tuple(
            read_mapping(c, at / "spec" / "config" / i, required=True)
            for i, c in enumerate(read_list(spec.get("config"), at / "spec" / "config"))
        ),
        extended_resource_name=read_str(
            spec.get("extendedResourceName"), at / "spec" / "extendedResourceName"
        ),
    )
