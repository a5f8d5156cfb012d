"""The estimated cost of a selector, as Kubernetes' API validation computes it.

API validation (``k8s.io/kubernetes`` v1.37.2 ``pkg/apis/resource/validation/validation.go``) refuses a
selector or derived attribute expression whose estimate is above ``CELSelectorExpressionMaxCost`` and a
claim whose derived attribute expressions sum above ``DeviceClaimDerivedAttributeCELMaxCost``. The estimate
is cel-go v0.29's static estimator (``checker/cost.go``) run by ``k8s.io/dynamic-resource-allocation/cel``
``compile.go`` with Kubernetes' library estimator (``k8s.io/apiserver/pkg/cel/library/cost.go``), the
overload estimators of the extension libraries the environment loads (lists v3, sets; strings v2 has none),
and DRA's size hints: the longest driver name, domain, identifier and attribute value, and the most
attributes or capacities per device (``sizeEstimator``). This module computes the same numbers on the
checked tree of the C++ checker (``allocator.cel.checked``), which expands macros the way cel-go does.

Both bounds of every estimate are kept (``Range``) because some rules read the lower one (a replacement
that never grows the string, an equality on empty values). Numbers saturate at 2^64-1 as cel-go's do.

The run-time limit is another rule upstream (actual cost tracked while evaluating), which
``allocator.cel.worst_case`` stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocator.cel.checked import CheckedAst, Expr, is_bind
from allocator.cel.cost_calls import Call, estimate
from allocator.cel.cost_units import (
    LIST_CREATE,
    MAP_CREATE,
    MAX,
    ONE,
    STRUCT_CREATE,
    UNKNOWN,
    ZERO,
    Entries,
    Range,
    fixed,
    is_scalar,
    kind,
    params,
)
from allocator.cel.expr_libs import HIDDEN_INDEX_OF, HIDDEN_NAMED, HIDDEN_VALIDATE

__all__ = ["MAX", "Range", "estimate_cost"]


@dataclass(slots=True)
class _Local:
    """A local variable (comprehension, accumulator or binding): its path, size and entries."""

    path: tuple[str, ...]
    size: Range | None
    entries: Entries | None


# --------------------------------------------------------------------------------- DRA size hints


@dataclass(frozen=True, slots=True)
class _Decl:
    """A node of the declared ``device`` type (``apiservercel.DeclType``): its most elements (characters
    of a string, entries of a map), fields, keys and values."""

    max_elements: int = 0
    fields: tuple[tuple[str, _Decl], ...] = ()
    key: _Decl | None = None
    value: _Decl | None = None


_ATTRIBUTE = _Decl(64)  # max(DeviceAttributeMaxValueLength 64, ResourceSliceMaxAttributeValuesPerDevice 48)
_DOMAIN, _ID = _Decl(63), _Decl(32)  # DeviceMaxDomainLength, DeviceMaxIDLength
_PER_DEVICE = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_DEVICE = _Decl(
    fields=(
        ("driver", _Decl(63)),  # DriverNameMaxLength
        ("attributes", _Decl(_PER_DEVICE, key=_DOMAIN, value=_Decl(_PER_DEVICE, key=_ID, value=_ATTRIBUTE))),
        ("capacity", _Decl(_PER_DEVICE, key=_DOMAIN, value=_Decl(_PER_DEVICE, key=_ID, value=_Decl()))),
        ("allowMultipleAllocations", _Decl(1)),
    )
)


def _declared_size(path: tuple[str, ...]) -> Range | None:
    """DRA's ``sizeEstimator.EstimateSize``: the most elements of the value at ``path`` below ``device``."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        step: _Decl | None
        if name in ("@items", "@values"):
            step = node.value
        elif name == "@keys":
            step = node.key
        else:
            step = dict(node.fields).get(name)
            if step is None and node.value is _ATTRIBUTE:
                step = _ATTRIBUTE  # any attribute of a domain has the same bound
        if step is None:
            return None
        node = step
    return Range(0, node.max_elements)


# ------------------------------------------------------------------------------------------ coster


_HIDDEN = {
    **{hidden: name for name, hidden in HIDDEN_INDEX_OF.items()},
    HIDDEN_VALIDATE: "validate",
    f"format.{HIDDEN_NAMED}": "format.named",
}
"""The front-end's spellings of library functions (``allocator.cel.expr_libs``), by upstream name."""


class _Coster:
    """One estimate: cel-go's ``coster`` (paths of values below ``device``, sizes and entry sizes computed
    so far, the local variables in scope)."""

    def __init__(self, ast: CheckedAst) -> None:
        self._ast = ast
        self._paths: dict[int, tuple[str, ...]] = {}
        self._locals: dict[str, list[_Local]] = {}
        self._sizes: dict[int, Range] = {}
        self._entries: dict[int, Entries] = {}

    # -- helpers ---------------------------------------------------------------------------------

    def type_of(self, node: Expr) -> str:
        return self._ast.type_names.get(node.id, "dyn")

    def _local(self, name: str) -> _Local | None:
        stack = self._locals.get(name)
        return stack[-1] if stack else None

    def _push(self, name: str, local: _Local) -> None:
        self._locals.setdefault(name, []).append(local)

    def _pop(self, name: str) -> None:
        self._locals[name].pop()

    def _path(self, node: Expr) -> tuple[str, ...]:
        if node.kind == "ident":
            local = self._local(node.name)
            if local is not None:
                return local.path
        return self._paths.get(node.id, ())

    def size(self, node: Expr) -> Range | None:
        """``computeSize``."""
        known = self._sizes.get(node.id)
        if known is not None:
            return known
        literal = _literal_size(node)
        if literal is not None:
            return literal
        declared = _declared_size(self._path(node))
        if declared is not None:
            self._sizes[node.id] = declared
            return declared
        if is_scalar(self.type_of(node)):
            return ONE
        if node.kind == "ident":
            local = self._local(node.name)
            if local is not None and local.size is not None:
                return local.size
        return None

    def size_or_unknown(self, node: Expr) -> Range:
        size = self.size(node)
        return UNKNOWN if size is None else size

    def entries(self, node: Expr) -> Entries | None:
        """``computeEntrySize``."""
        known = self._entries.get(node.id)
        if known is not None:
            return known
        if node.kind == "ident":
            local = self._local(node.name)
            if local is not None:
                return local.entries
        return None

    def _set_size(self, node: Expr, size: Range | None) -> None:
        if size is not None:
            self._sizes[node.id] = size

    def set_entries(self, node: Expr, entries: Entries | None) -> None:
        if entries is not None:
            self._entries[node.id] = entries

    def element(self, target: Expr) -> tuple[str, Range] | None:
        """Kubernetes' ``listElementNode``: the element type of a parameterized target and the declared size
        of its elements (unknown when not declared)."""
        element_types = params(self.type_of(target))
        if not element_types:
            return None
        path = self._path(target)
        declared = _declared_size((*path, "@items")) if path else None
        return element_types[0], UNKNOWN if declared is None else declared

    # -- expressions -----------------------------------------------------------------------------

    def cost(self, node: Expr) -> Range:
        handler = getattr(self, "_" + node.kind)
        result: Range = handler(node)
        return result

    def _const(self, node: Expr) -> Range:
        return ZERO

    def _ident(self, node: Expr) -> Range:
        local = self._local(node.name)
        if local is not None:
            self._paths[node.id] = local.path
            return ONE
        name = self._ast.references.get(node.id) or node.name
        # The C++ checker resolves ``device.x`` to one name; cel-go reads the variable ``device`` (1) and
        # selects a field of its object type (1).
        self._paths[node.id] = tuple(name.split("."))
        return fixed(1 + name.count(".")) if name.startswith("device.") else ONE

    def _select(self, node: Expr) -> Range:
        assert node.operand is not None
        if node.test_only:
            return self.cost(node.operand)  # Kubernetes: PresenceTestHasCost(false)
        total = self.cost(node.operand)
        if kind(self.type_of(node.operand)) in ("map", "struct"):
            total += ONE
        self._paths[node.id] = (*self._path(node.operand), node.name)
        return total

    def _list(self, node: Expr) -> Range:
        total = ZERO
        items: Range | None = None
        for element in node.args or []:
            total += self.cost(element)
            size = self.size_or_unknown(element)
            items = size if items is None else items.union(size)
        self.set_entries(node, Entries("list", ONE, items or ZERO))
        return total + fixed(LIST_CREATE)

    def _map(self, node: Expr) -> Range:
        total = ZERO
        keys: Range | None = None
        values: Range | None = None
        for key, value in zip(node.keys or [], node.args or [], strict=True):
            total += self.cost(key) + self.cost(value)
            ks, vs = self.size_or_unknown(key), self.size_or_unknown(value)
            keys = ks if keys is None else keys.union(ks)
            values = vs if values is None else values.union(vs)
        self.set_entries(node, Entries("map", keys or ZERO, values or ZERO))
        return total + fixed(MAP_CREATE)

    def _struct(self, node: Expr) -> Range:
        total = ZERO
        for value in node.args or []:
            total += self.cost(value)
        return total + fixed(STRUCT_CREATE)

    def _comprehension(self, node: Expr) -> Range:
        parts = node.parts or {}
        iter_var, iter_var2, accu_var = node.vars
        rng, init = parts["iter_range"], parts["accu_init"]
        total = self.cost(rng) + self.cost(init)
        accu = _Local(self._path(init), self.size(init), self.entries(init))
        if is_bind(node):
            self._push(accu_var, accu)
            total += self.cost(parts["result"])
            self._pop(accu_var)
            result = parts["result"]
            self._set_size(node, self.size(result))
            self.set_entries(node, self.entries(result))
            return total
        self._push(accu_var, accu)
        if iter_var2:
            self._push(iter_var, self._iteration_local(rng, "key"))
            self._push(iter_var2, self._iteration_local(rng, "value"))
        else:
            self._push(iter_var, self._iteration_local(rng, "single"))
        loop = self.cost(parts["loop_condition"])
        step = self.cost(parts["loop_step"])
        self._pop(iter_var)
        if iter_var2:
            self._pop(iter_var2)
        total += self.cost(parts["result"])
        self._pop(accu_var)
        count = self.size_or_unknown(rng)
        total += count * (step + loop)
        if init.kind == "const":
            self._set_size(node, self.size(init))
        elif init.kind in ("list", "map"):
            self._set_size(node, count)
            self.set_entries(node, self.entries(parts["loop_step"]))
        return total

    def _iteration_local(self, rng: Expr, which: str) -> _Local:
        """``pushIterKey`` / ``pushIterValue`` / ``pushIterSingle``."""
        entries = self.entries(rng)
        container = entries.container if entries is not None else kind(self.type_of(rng))
        listed = container == "list"
        if which == "key" or (which == "single" and not listed):
            size = entries.key if entries is not None else None
            sub = "@indices" if listed and which == "key" else "@keys"
        else:
            size = entries.value if entries is not None else None
            sub = "@items" if listed else "@values"
        return _Local((*self._path(rng), sub), size, None)

    def _call(self, node: Expr) -> Range:
        name = _HIDDEN.get(node.name, node.name)
        args = list(node.args or [])
        if name == "dyn" and node.operand is None:
            total = self.cost(args[0]) + ONE
            self._set_size(node, self.size(args[0]))
            self.set_entries(node, self.entries(args[0]))
            return total
        if name == "_[?_]" and args and args[0].kind == "call" and args[0].name in _HIDDEN:
            # ``x.validate(s)`` / ``format.named(s)`` read through ``[?0]`` (front-end spelling only).
            total = self.cost(args[0])
            self._set_size(node, self.size(args[0]))
            return total
        arg_costs = [self.cost(a) for a in args]
        # cel-cpp also lists the optional-index overloads under ``_[_]``; cel-go has them under ``_[?_]``.
        overloads = self._ast.overloads.get(node.id, ())
        if name == "_[_]":
            overloads = tuple(o for o in overloads if not o.startswith("optional_"))
        if not overloads:
            return ZERO
        total = ZERO
        if node.operand is not None:
            total += self.cost(node.operand)
        function_cost: Range | None = None
        result: Range | None = None
        for overload in overloads:
            cost, size = estimate(self, Call(node, name, overload, node.operand, args, arg_costs))
            function_cost = cost if function_cost is None else function_cost.union(cost)
            if size is not None:
                result = size if result is None else result.union(size)
            if overload in ("index_list", "index_map") and args:
                inner = self.entries(args[0])
                result = inner.value if inner is not None else None
                suffix = "@items" if overload == "index_list" else "@values"
                self._paths[node.id] = (*self._path(args[0]), suffix)
            if result is None:
                result = self.size(node)
        self._set_size(node, result)
        assert function_cost is not None
        return total + function_cost


def _literal_size(node: Expr) -> Range | None:
    """``computeExprSize``: the exact size of a literal, a list or a map written in the expression."""
    if node.kind == "const":
        value = node.value
        if isinstance(value, str):
            return fixed(len(value))
        if isinstance(value, bytes):
            return fixed(len(value))
        return ONE
    if node.kind == "list":
        return fixed(len(node.args or []))
    if node.kind == "map":
        return fixed(len(node.args or []))
    return None


def estimate_cost(ast: CheckedAst) -> int:
    """The estimated worst-case cost (cel-go's ``CostEstimate.Max``) of a checked selector or derived
    attribute expression; ``MAX`` when unbounded."""
    return _Coster(ast).cost(ast.root).max
