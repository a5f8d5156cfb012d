"""Feature gates, by their upstream names, passed into the allocator as data (never read from globals).

Defaults follow Kubernetes 1.37: GA and beta-on gates are on; DRADerivedAttributes is on in this product
(upstream alpha). Source: the kube feature-gate table, see shared reference allocator-semantics.md §1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["FeatureGates", "parse_feature_gates"]


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """Enabled state of every DRA gate the allocator honours. Field names are the upstream gate names."""

    DRAPrioritizedList: bool = True
    DRAAdminAccess: bool = True
    DRADeviceTaints: bool = True
    DRADeviceTaintRules: bool = True
    DRAPartitionableDevices: bool = True
    DRAConsumableCapacity: bool = True
    DRADeviceBindingConditions: bool = True
    DRAResourceClaimDeviceStatus: bool = True
    DRAExtendedResource: bool = True
    DRAFractionalCapacityRange: bool = True
    DRAListTypeAttributes: bool = False
    DRADerivedAttributes: bool = True
    DRADeviceCompatibilityGroups: bool = False
    DRAOptionalNodeOperations: bool = False
    DRANodeAllocatableResources: bool = False
    GenericWorkload: bool = False
    DRAWorkloadResourceClaims: bool = False

    @property
    def workload_claims(self) -> bool:
        """PodGroup-level ResourceClaims: ``DRAWorkloadResourceClaims`` needs ``GenericWorkload`` (the
        PodGroup API) as upstream's gate dependency says; both beta and off in 1.37."""
        return self.DRAWorkloadResourceClaims and self.GenericWorkload

    @property
    def stable_allocator(self) -> bool:
        """Whether kube-scheduler's allocator is upstream's "stable" implementation, picked when no gate
        beyond the four it supports (admin access, prioritized list, partitionable devices, taints) is on.
        It differs where it lacks a feature: distinctAttribute is an empty constraint, capacity requests
        are ignored instead of refused."""
        return not (
            self.DRAConsumableCapacity
            or (self.DRADeviceBindingConditions and self.DRAResourceClaimDeviceStatus)
            or self.DRAFractionalCapacityRange
            or self.experimental_allocator
        )

    @property
    def experimental_allocator(self) -> bool:
        """Whether it is upstream's "experimental" implementation, the only one knowing derived attributes,
        list-typed attributes, compatibility groups and optional node operations (the others never look
        at ``skipNodeOperations``)."""
        return (
            self.DRAListTypeAttributes
            or self.DRADerivedAttributes
            or self.DRADeviceCompatibilityGroups
            or self.DRAOptionalNodeOperations
        )

    def describe(self) -> str:
        """``Name=true,Other=false`` for every gate, in declaration order."""
        return ",".join(f"{f.name}={str(getattr(self, f.name)).lower()}" for f in fields(self))


_NAMES = {f.name for f in fields(FeatureGates)}


def parse_feature_gates(text: str, base: FeatureGates | None = None) -> FeatureGates:
    """Parse ``--feature-gates Name=true,Other=false`` on top of ``base`` (default: 1.37 defaults).

    Raises ValueError naming the bad entry: unknown gate, missing ``=``, or a value other than true/false.
    """
    gates = base or FeatureGates()
    changes: dict[str, bool] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep:
            raise ValueError(f"feature gate {entry!r}: expected Name=true|false")
        if name not in _NAMES:
            raise ValueError(f"unknown feature gate {name!r} (known: {', '.join(sorted(_NAMES))})")
        if value not in ("true", "false"):
            raise ValueError(f"feature gate {name}: value must be true or false, got {value!r}")
        changes[name] = value == "true"
    return replace(gates, **changes)
