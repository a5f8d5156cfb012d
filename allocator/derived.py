"""Derived attributes: device attribute values computed by CEL expressions.

Two sources, both evaluated in the selector environment (one variable ``device``):

* **Request derived attributes** (KEP-6080, ``requests[].exactly.derivedAttributes`` and inside
  ``firstAvailable`` subrequests, gate ``DRADerivedAttributes``). Evaluated after the request's selectors
  admitted a device and never visible to selectors; ``constraints[].matchAttribute`` / ``distinctAttribute``
  look up the request's derived attribute first, then the device's static attribute
  (``allocator.constraints``), which evaluates it when it needs it. Names are qualified
  (``app.state.validation`` refuses bare ones, as Kubernetes 1.37): a domain no driver uses keeps one local
  to the claim, a driver's name shadows its attribute. Results: string, int, bool, semver or a list of one
  of those (compared in constraints as static values are: set semantics only with DRAListTypeAttributes). A
  runtime error on a device that reaches the constraint check aborts the pod (``CELEvalError`` naming claim,
  request, attribute, device and expression); a compile error is reported before the search
  (``CELCompileError`` naming claim, request, attribute and expression; the engine's message carries the
  position). Values are cached per (expression, device) by ``SelectorCache.value``.

* **Cluster-wide derived attributes** (this extender's config file, ``app.config.derivedconfig``). An operator
  defines ``name`` (qualified), ``expression`` and optionally ``driver`` / ``deviceClassName`` scopes;
  ``ClusterDerivation.derive`` adds the value to the device's attributes, so selectors, constraints and
  scoring see it like a driver-published attribute (it replaces a static attribute of the same name). The
  inventory derives each device once per slice revision and again when the config or a scoping class
  changes. Rules:

  - every expression sees the device as its driver published it (derived attributes do not see each
    other), and a ``deviceClassName`` scope is decided by that class's selectors on the same view;
  - a name may be defined by several entries (e.g. one per driver, each reading that driver's own
    attribute): for each device the first entry in file order whose scopes admit it gives the value;
  - a scope class that does not exist makes the attribute absent (no error);
  - a runtime error leaves the attribute absent on that device and is recorded (``DerivationError``);
    nothing else follows from it: one expression failing on some devices (a typo, a driver that lacks
    the attribute it reads) must not stop device scheduling. The inventory reports the errors, one line
    per attribute with its device count (``summarize``), for the log, metrics and explanations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from allocator.cel import AttributeValue, CELDevice
from allocator.classmatch import class_outcome
from allocator.errors import CELCompileError, CELError, CELEvalError, FeatureDisabledError
from allocator.features import FeatureGates
from allocator.model import Claim, Device, DeviceClass, DeviceRequest
from allocator.selectors import SelectorCache

__all__ = [
    "NO_DERIVED_VALUES",
    "ClusterAttribute",
    "ClusterDerivation",
    "DerivationError",
    "by_attribute",
    "check_request_derived",
    "request_derived_values",
    "summarize",
]

NO_DERIVED_VALUES: Mapping[str, AttributeValue] = MappingProxyType({})
"""The derived values of a request without derived attributes."""

_SHOWN_EXPRESSION = 200
"""Characters of an expression quoted in error messages (expressions may be 10 Ki long)."""


def _quoted(expression: str) -> str:
    shown = expression if len(expression) <= _SHOWN_EXPRESSION else expression[:_SHOWN_EXPRESSION] + "..."
    return repr(shown)


def _compile_hint(message: str) -> str:
    if "'device.name'" in message:
        return message + " (device.name is not part of the DRA selector environment; KEP-6080 leaves it open)"
    return message


# --- request derived attributes (KEP-6080) --------------------------------------------------------------


def check_request_derived(
    claim: Claim, alt: DeviceRequest, selectors: SelectorCache, gates: FeatureGates
) -> None:
    """Pre-search checks of one request's ``derivedAttributes``: the gate, then each expression compiles.

    Raises FeatureDisabledError (``claim <key>, request <name>: has derivedAttributes, but the
    DRADerivedAttributes feature is disabled``) or CELCompileError (``claim <key>, request <name>: derived
    attribute <attr>: expression '<text>': CEL compile error: <engine message with position>``).
    """
    if not alt.derived_attributes:
        return
    kind = "subrequest" if alt.is_subrequest else "request"
    if not gates.DRADerivedAttributes:
        raise FeatureDisabledError(
            f"claim {claim.key}, {kind} {alt.name}: has derivedAttributes, but the DRADerivedAttributes "
            "feature is disabled"
        )
    for attribute in alt.derived_attributes:
        _compile(
            selectors,
            attribute.expression,
            f"claim {claim.key}, {kind} {alt.name}: derived attribute {attribute.name}",
        )


class RequestDerivedValues(Mapping[str, AttributeValue]):
    """The request's derived attributes on one device, each evaluated when a constraint first looks it up
    (as upstream's allocator does, in the constraint check after the device passed in-use, selector,
    capacity, counter and taint checks): a device rejected before that, or a derived attribute no
    applicable constraint names, is never evaluated, so it cannot fail the pod.

    Looking up a name raises CELEvalError (fatal for the pod): ``claim <key>, request <name>: derived
    attribute <attr> on device <driver>/<pool>/<device>: CEL runtime error: <msg> (expression '<text>')``.
    """

    __slots__ = ("_alt", "_claim", "_device", "_selectors")

    def __init__(self, selectors: SelectorCache, claim: Claim, alt: DeviceRequest, device: Device) -> None:
        self._selectors, self._claim, self._alt, self._device = selectors, claim, alt, device

    def __getitem__(self, name: str) -> AttributeValue:
        attribute = next((a for a in self._alt.derived_attributes if a.name == name), None)
        if attribute is None:
            raise KeyError(name)
        try:
            return self._selectors.value(attribute.expression, self._device)
        except CELEvalError as e:
            driver, pool, device = self._device.id
            kind = "subrequest" if self._alt.is_subrequest else "request"
            expression = _quoted(attribute.expression)
            raise CELEvalError(
                f"claim {self._claim.key}, {kind} {self._alt.name}: derived attribute {name} on device "
                f"{driver}/{pool}/{device}: CEL runtime error: {e} (expression {expression})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return (a.name for a in self._alt.derived_attributes)

    def __len__(self) -> int:
        return len(self._alt.derived_attributes)


def request_derived_values(
    selectors: SelectorCache, claim: Claim, alt: DeviceRequest, device: Device
) -> Mapping[str, AttributeValue]:
    """The request's derived attributes on ``device`` (name -> value, evaluated on lookup)."""
    if not alt.derived_attributes:
        return NO_DERIVED_VALUES
    return RequestDerivedValues(selectors, claim, alt, device)


# --- cluster-wide derived attributes (extender config) --------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterAttribute:
    """One operator-defined attribute: ``name`` is qualified (``domain/id``); empty scopes match every
    device. ``source`` names where it was defined, for messages (``<file>: derivedAttributes[<i>]``)."""

    name: str
    expression: str
    driver: str = ""
    device_class: str = ""
    source: str = ""

    @property
    def label(self) -> str:
        return (
            f"derived attribute {self.name} ({self.source})"
            if self.source
            else f"derived attribute {self.name}"
        )


@dataclass(frozen=True, slots=True)
class DerivationError:
    """A cluster-wide derived attribute that failed on one device: the attribute is absent there."""

    attribute: str
    """The attribute's label (name and source)."""
    device: str
    """``driver/pool/device``."""
    problem: str
    """The error and the expression."""

    def __str__(self) -> str:
        return f"device {self.device}: {self.attribute}: {self.problem}"


def by_attribute(errors: Iterable[DerivationError]) -> dict[str, list[DerivationError]]:
    """The errors per failing attribute (label), sorted by label."""
    grouped: dict[str, list[DerivationError]] = {}
    for error in errors:
        grouped.setdefault(error.attribute, []).append(error)
    return dict(sorted(grouped.items()))


def summarize(errors: Iterable[DerivationError]) -> list[str]:
    """One line per failing attribute: on how many devices, with the first device's error (sorted)."""
    lines = []
    for attribute, failed in by_attribute(errors).items():
        first = min(failed, key=lambda e: e.device)
        count = f"{len(failed)} device{'s' if len(failed) != 1 else ''}"
        lines.append(f"{attribute}: failed on {count}, e.g. device {first.device}: {first.problem}")
    return lines


class ClusterDerivation:
    """Compiled cluster-wide derived attributes; ``derive`` computes them for one device.

    Raises CELCompileError at construction when an expression does not compile (naming the attribute, its
    source and the expression).
    """

    def __init__(self, attributes: Sequence[ClusterAttribute], selectors: SelectorCache) -> None:
        self.attributes = tuple(attributes)
        self.selectors = selectors
        for attribute in self.attributes:
            _compile(selectors, attribute.expression, attribute.label)
        self.class_names = frozenset(a.device_class for a in self.attributes if a.device_class)
        """DeviceClasses that scope an attribute: a change to one of them re-derives every device."""

    def derive(
        self, device: Device, classes: Mapping[str, DeviceClass]
    ) -> tuple[Device, tuple[DerivationError, ...]]:
        """``device`` with the attributes in scope added (the same object when none applies), and the
        runtime errors (one message per failed attribute; the attribute is then absent)."""
        probe: CELDevice | None = None
        values: dict[str, AttributeValue] = {}
        errors: list[DerivationError] = []
        class_matches: dict[str, bool | str] = {}
        decided: set[str] = set()
        for attribute in self.attributes:
            if attribute.name in decided or (attribute.driver and attribute.driver != device.driver):
                continue
            if probe is None:
                # A private view: engine caches keyed on it die with it, so the published device (kept by
                # the inventory as the base of re-derivation) never holds converted copies.
                cel = device.cel
                probe = CELDevice(cel.driver, cel.attributes, cel.capacity, cel.allow_multiple_allocations)
            scope: bool | str | None = True
            if attribute.device_class:
                scope = class_matches.get(attribute.device_class)
                if scope is None:
                    scope = class_matches[attribute.device_class] = self._in_class(
                        classes.get(attribute.device_class), probe
                    )
                if not scope:
                    continue
            decided.add(attribute.name)  # the first entry in scope decides, even when it fails
            if isinstance(scope, str):
                errors.append(self._error(attribute, device, scope))
                continue
            try:
                values[attribute.name] = self.selectors.evaluate_value(attribute.expression, probe)
            except CELError as e:
                errors.append(self._error(attribute, device, f"CEL runtime error: {e}"))
        if not values:
            return device, tuple(errors)
        return _with_attributes(device, values), tuple(errors)

    def _in_class(self, device_class: DeviceClass | None, probe: CELDevice) -> bool | str:
        if device_class is None:
            return False
        ran, outcome = class_outcome(self.selectors, device_class, probe)
        if isinstance(outcome, CELError):
            kind = "compile" if isinstance(outcome, CELCompileError) else "runtime"
            return f"deviceClassName {device_class.name}: selector #{ran - 1}: CEL {kind} error: {outcome}"
        return outcome

    @staticmethod
    def _error(attribute: ClusterAttribute, device: Device, problem: str) -> DerivationError:
        return DerivationError(
            attribute.label, "/".join(device.id), f"{problem} (expression {_quoted(attribute.expression)})"
        )


def _with_attributes(device: Device, values: Mapping[str, AttributeValue]) -> Device:
    """A copy of ``device`` whose attributes include ``values``."""
    cel_attributes = dict(device.cel.attributes)  # only the domains that gain a value are copied
    for qualified, value in values.items():
        domain, _, ident = qualified.rpartition("/")
        cel_attributes[domain] = {**cel_attributes.get(domain, {}), ident: value}
    return dataclasses.replace(device, cel=dataclasses.replace(device.cel, attributes=cel_attributes))


def _compile(selectors: SelectorCache, expression: str, owner: str) -> None:
    """Compile a derived-attribute expression now. Raises CELCompileError naming ``owner``, the
    expression and the position."""
    try:
        selectors.value_program(expression)
    except CELCompileError as e:
        raise CELCompileError(
            f"{owner}: expression {_quoted(expression)}: CEL compile error: {_compile_hint(str(e))}"
        ) from None
