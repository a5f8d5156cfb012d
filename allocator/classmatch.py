"""The class-match index: per DeviceClass, the devices its selectors admit, computed when slices or classes
arrive instead of in filter.

The inventory calls ``add_devices`` / ``remove_devices`` for every ResourceSlice it stores or drops, and
``set_class`` / ``remove_class`` for every DeviceClass; the search asks ``matches`` (a set lookup). A class's
selectors run in order on each device until one is false or fails, as upstream evaluates them; the outcome
is one of *match*, *no match* or *error* (compile or runtime error of selector #i). Errors are recorded,
not raised: ``matches`` raises them (fatal for the pod, upstream wording) only when the search reaches
that device, so a broken selector fails pods exactly where upstream's lazy evaluation would.

Memory: one set entry per (class, matching device) plus one entry per (class, device with an error); no
entry for non-matching devices. Bounded by classes x devices in the inventory, independent of the number
of requests. Evaluating costs classes x devices selector runs per full rebuild; a slice update costs
classes x its devices; a class update costs that class x all devices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from allocator.cel import CELDevice
from allocator.errors import CELCompileError, CELError, CELEvalError
from allocator.model import Device, DeviceClass
from allocator.selectors import SelectorCache, selector_error

__all__ = ["ClassMatchIndex", "class_outcome"]


def class_outcome(
    selectors: SelectorCache, device_class: DeviceClass, device: CELDevice
) -> tuple[int, bool | CELError]:
    """Run the class's selectors on ``device`` in order until one is false or fails, as upstream (uncached).
    Returns how many ran and the outcome: True (all admit the device), False, or the last one's error."""
    for ran, expression in enumerate(device_class.selectors, 1):
        try:
            if not selectors.evaluate(expression, device):
                return ran, False
        except (CELCompileError, CELEvalError) as e:
            return ran, e
    return len(device_class.selectors), True


@dataclass(slots=True)
class _ClassState:
    device_class: DeviceClass
    matching: set[Device] = field(default_factory=set)
    errors: dict[Device, tuple[int, CELError]] = field(default_factory=dict)


class ClassMatchIndex:
    """Which devices each DeviceClass matches. Not thread-safe by itself (the inventory's caller locks)."""

    def __init__(self, selectors: SelectorCache) -> None:
        self.selectors = selectors
        self._classes: dict[str, _ClassState] = {}
        self.evaluations = 0
        """Selector evaluations done by the index (tests and benchmarks read it)."""

    # --- updates --------------------------------------------------------------------------------------

    def set_class(self, device_class: DeviceClass, devices: Iterable[Device]) -> None:
        """Add or replace a class and evaluate it on ``devices`` (every device of the inventory). A class
        with the same selectors as the indexed one keeps its results."""
        current = self._classes.get(device_class.name)
        if current is not None and current.device_class.selectors == device_class.selectors:
            current.device_class = device_class
            return
        state = _ClassState(device_class)
        for device in devices:
            self._evaluate(state, device)
        self._classes[device_class.name] = state

    def remove_class(self, name: str) -> None:
        self._classes.pop(name, None)

    def add_devices(self, devices: Iterable[Device]) -> None:
        """Evaluate every class on newly stored devices."""
        states = list(self._classes.values())
        if not states:
            return
        for device in devices:
            for state in states:
                self._evaluate(state, device)

    def remove_devices(self, devices: Iterable[Device]) -> None:
        states = list(self._classes.values())
        for device in devices:
            for state in states:
                state.matching.discard(device)
                state.errors.pop(device, None)

    def _evaluate(self, state: _ClassState, device: Device) -> None:
        ran, outcome = class_outcome(self.selectors, state.device_class, device.cel)
        self.evaluations += ran
        if outcome is True:
            state.matching.add(device)
        elif outcome is not False:
            state.errors[device] = (ran - 1, outcome)

    # --- queries --------------------------------------------------------------------------------------

    def indexes(self, device_class: DeviceClass) -> bool:
        """Whether ``matches`` can answer for this class object (the one last given to ``set_class``)."""
        state = self._classes.get(device_class.name)
        return state is not None and state.device_class is device_class

    def matches(self, device_class: DeviceClass, device: Device) -> bool:
        """True when every selector of the class admits the device. Raises the recorded error:
        ``class <name>: selector #<i>: CEL compile error: <msg>`` or ``class <name>: selector #<i> on
        device <driver>/<pool>/<device>: CEL runtime error: <msg>``."""
        state = self._classes[device_class.name]
        if device in state.matching:
            return True
        error = state.errors.get(device)
        if error is None:
            return False
        index, cause = error
        raise selector_error(f"class {device_class.name}", index, device, cause)

    def matching(self, name: str) -> frozenset[Device]:
        """The devices class ``name`` matches (empty for an unknown class)."""
        state = self._classes.get(name)
        return frozenset(state.matching) if state is not None else frozenset()

    def report(self) -> dict[str, int]:
        """Sizes: ``classes``, ``matches`` (class x device entries), ``errors`` and ``evaluations``."""
        return {
            "classes": len(self._classes),
            "matches": sum(len(s.matching) for s in self._classes.values()),
            "errors": sum(len(s.errors) for s in self._classes.values()),
            "evaluations": self.evaluations,
        }
