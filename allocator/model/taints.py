"""Device taints and tolerations (``DeviceTaint``, ``DeviceToleration``) and the ``DeviceTaintRule`` kind
that adds a taint to the devices it selects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.model.fields import FieldPath, object_name, read_mapping, read_str

__all__ = [
    "DeviceTaintRule",
    "Taint",
    "Toleration",
    "parse_device_taint_rule",
    "parse_taint",
    "parse_toleration",
]


@dataclass(frozen=True, slots=True)
class Taint:
    """``DeviceTaint``: effects NoSchedule and NoExecute block allocation; None and unknown do not."""

    key: str
    value: str
    effect: str
    source: str = ""
    """Where the taint comes from: empty for the device's own, else ``DeviceTaintRule <name>``."""

    @property
    def blocks_allocation(self) -> bool:
        return self.effect in ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Toleration:
    """``DeviceToleration``; ``raw`` is copied into allocation results as written."""

    key: str
    operator: str
    value: str
    effect: str
    raw: Mapping[str, Any] = field(compare=False)

    def tolerates(self, taint: Taint) -> bool:
        """Upstream ``resourceclaim.ToleratesTaint``: effect, then key, then operator/value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return False


def parse_taint(raw: Any, at: FieldPath, source: str = "") -> Taint:
    data = read_mapping(raw, at, required=True)
    return Taint(
        key=read_str(data.get("key"), at / "key", required=True),
        value=read_str(data.get("value"), at / "value"),
        effect=read_str(data.get("effect"), at / "effect", required=True),
        source=source,
    )


def parse_toleration(raw: Any, at: FieldPath) -> Toleration:
    data = read_mapping(raw, at, required=True)
    operator = read_str(data.get("operator"), at / "operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise (at / "operator").error(f"unsupported operator {operator!r} (Equal or Exists)")
    return Toleration(
        key=read_str(data.get("key"), at / "key"),
        operator=operator,
        value=read_str(data.get("value"), at / "value"),
        effect=read_str(data.get("effect"), at / "effect"),
        raw=dict(data),
    )


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """``DeviceTaintRule``: adds ``taint`` to every device matching the set selector fields; a rule without
    ``deviceSelector`` (``selects`` False) taints nothing."""

    name: str
    driver: str
    pool: str
    device: str
    taint: Taint
    selects: bool = True

    def matches(self, device_id: tuple[str, str, str]) -> bool:
        """Whether the rule selects the device (driver, pool, device)."""
        driver, pool, name = device_id
        return (
            self.selects
            and (not self.driver or self.driver == driver)
            and (not self.pool or self.pool == pool)
            and (not self.device or self.device == name)
        )


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    """Convert a v1 DeviceTaintRule. A missing ``deviceSelector`` matches no device, as the scheduler's
    ResourceSlice tracker applies rules (``applyPatches`` in dynamic-resource-allocation v0.37.2 skips such a
    rule); an empty one matches every device."""
    _, name, at = object_name("DeviceTaintRule", obj)
    spec = read_mapping(obj.get("spec"), at / "spec", required=True)
    selector = read_mapping(spec.get("deviceSelector"), at / "spec" / "deviceSelector")
    for removed in ("deviceClassName", "selectors"):
        if selector.get(removed):
            raise (at / "spec" / "deviceSelector" / removed).error("field was removed in Kubernetes 1.35")
    return DeviceTaintRule(
        name=name,
        driver=read_str(selector.get("driver"), at / "spec" / "deviceSelector" / "driver"),
        pool=read_str(selector.get("pool"), at / "spec" / "deviceSelector" / "pool"),
        device=read_str(selector.get("device"), at / "spec" / "deviceSelector" / "device"),
        taint=parse_taint(spec.get("taint"), at / "spec" / "taint", source=f"DeviceTaintRule {name}"),
        selects=spec.get("deviceSelector") is not None,
    )
