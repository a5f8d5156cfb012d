"""Hypothesis strategies for API-valid allocation states, as the oracle program reads them.

A state is what kube-scheduler's DRA plugin hands the allocator for one node: feature gates, the node,
DeviceClasses, ResourceSlices, DeviceTaintRules, the claims of one pod and the allocation results of
claims already allocated; and the claims' Namespace, whose admin-access label the product checks before
allocating (upstream leaves that to admission). Objects are written as the API server stores them
(defaults filled in: an ``exactly`` request has allocationMode and count, a toleration has an operator),
because upstream's allocator reads stored objects. Names come from small fixed sets so that selectors,
constraints, taint rules and allocated results often refer to something that exists.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

__all__ = ["GATES", "NODE", "large_states", "states"]

DRIVERS = ("a.example.com", "b.example.com")
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
"""The claims' namespace has it (value "true") three times in four: admission admits adminAccess only there;
upstream's scheduler never looks (issue 36 item 12)."""
NODE = {"metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1", "zone": "z1"}}}
DECLARING_NODE = NODE | {"status": {"declaredFeatures": ["DRAOptionalNodeOperations"]}}
"""A node whose kubelet declares DRAOptionalNodeOperations (may run devices that skip node operations)."""

GATES = (
    "DRAPrioritizedList",
    "DRAAdminAccess",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
    "DRAPartitionableDevices",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus",
    "DRAListTypeAttributes",
    "DRADeviceCompatibilityGroups",
    "DRAFractionalCapacityRange",
    "DRADerivedAttributes",
    "DRAOptionalNodeOperations",
)
"""Gates drawn on or off (mostly on): with them upstream also picks its stable, incubating or experimental
allocator."""

Obj = dict[str, Any]

STABLE_GATES = (
    "DRAPrioritizedList",
    "DRAAdminAccess",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
    "DRAPartitionableDevices",
)
"""What upstream's stable implementation supports (v0.37.2 structured/internal/stable SupportedFeatures, and
the scheduler-side taint rules): with every other gate off, NewAllocator picks it."""
EXPERIMENTAL_GATES = (
    "DRAListTypeAttributes",
    "DRADerivedAttributes",
    "DRADeviceCompatibilityGroups",
    "DRAOptionalNodeOperations",
)
"""What only the experimental implementation supports: with these off (and a beta gate beyond the stable
ones on), NewAllocator picks incubating."""


@st.composite
def _gates(draw: st.DrawFn) -> dict[str, bool]:
    """Gates by profile: everything on (the 1.37 defaults and then some, 7 in 20), at random (each off one
    time in three, 7 in 20), the stable allocator's (every beta gate beyond its four off but maybe one of
    the binding pair, 3 in 20) or the incubating allocator's (the experimental-only gates off, 3 in 20)."""
    profile = draw(st.integers(0, 19))
    if profile < 7:
        return dict.fromkeys(GATES, True)
    if profile < 14:
        return {g: not _one_in(draw, 3) for g in GATES}
    if profile < 17:
        gates = {g: g in STABLE_GATES and not _one_in(draw, 5) for g in GATES}
        # One gate of the binding pair alone leaves the allocator's DeviceBindingAndStatus off: still stable.
        alone = draw(st.sampled_from(("", "DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus")))
        if alone:
            gates[alone] = True
        return gates
    return {g: g not in EXPERIMENTAL_GATES for g in GATES}


_VERSIONS = ("1.0.0", "1.2.0", "2.0.0-rc.1", "2.0.0")
_SCALARS: dict[str, st.SearchStrategy[Obj]] = {
    "model": st.sampled_from(("x", "y", "xy")).map(lambda v: {"string": v}),
    "mem": st.integers(0, 3).map(lambda v: {"int": v}),
    "fast": st.booleans().map(lambda v: {"bool": v}),
    "ver": st.sampled_from(_VERSIONS).map(lambda v: {"version": v}),
    "common.example.com/rack": st.sampled_from(("r1", "r2")).map(lambda v: {"string": v}),
}
_LISTS: dict[str, st.SearchStrategy[Obj]] = {
    "ids": st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda v: {"ints": v}),
    "tags": st.lists(st.sampled_from(("p", "q")), min_size=1, max_size=2).map(lambda v: {"strings": v}),
}
ATTRIBUTES = (*_SCALARS, *_LISTS)
_QUANTITIES = ("1Gi", "2Gi", "4Gi", "8Gi")


def _one_in(draw: st.DrawFn, n: int) -> bool:
    """True about one time in ``n``. The middle value stands for the rare case: hypothesis draws the bounds of
    a range far more often than the rest, and shrinks towards the lower one (here: the common case)."""
    return draw(st.integers(0, n - 1)) == n // 2


def _qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


# --- CEL selectors --------------------------------------------------------------------------------


def _attr(driver: str, name: str) -> str:
    domain, _, ident = _qualified(name, driver).rpartition("/")
    return f'device.attributes["{domain}"].{ident}'


def _has(driver: str, name: str) -> str:
    domain, _, ident = _qualified(name, driver).rpartition("/")
    return f'"{ident}" in device.attributes["{domain}"]'


CEL_LIBRARY: dict[str, tuple[str, ...]] = {
    "ip/cidr": (
        'ip("10.0.0.1").family() == 4',
        'isIP("10.0.0.1")',
        'ip("::1").isLoopback()',
        'ip.isCanonical("10.0.0.1")',
        'cidr("10.0.0.0/8").containsIP(ip("10.1.2.3"))',
        'cidr("10.0.0.0/8").prefixLength() == 8',
    ),
    "url": ('url("https://example.com/x").getHost() == "example.com"', 'isURL("https://example.com")'),
    "format": (
        '!format.dns1123Label().validate("abc").hasValue()',
        'format.named("dns1123Label").hasValue()',
    ),
    "k8s lists": (
        "[1, 2, 3].isSorted()",
        "[1, 2].sum() == 3",
        "[3, 1].min() == 1",
        "[1, 2, 3].indexOf(2) == 1",
    ),
    "ext lists": (
        "lists.range(3).size() == 3",
        "[3, 1, 2].sort() == [1, 2, 3]",
        '["b", "a"].sortBy(x, x) == ["a", "b"]',
        "[1, 2].slice(0, 1) == [1]",
        "[[1], [2]].flatten().size() == 2",
        "[1, 2, 2].distinct().size() == 2",
        "[1, 2].reverse() == [2, 1]",
    ),
    "sets": (
        "sets.contains([1, 2, 3], [2])",
        "sets.equivalent([1, 2], [2, 1])",
        "sets.intersects([1], [1, 2])",
    ),
    "ext strings": (
        '"abc".charAt(1) == "b"',
        '"a,b".split(",").size() == 2',
        '" x ".trim() == "x"',
        '"%d".format([3]) == "3"',
        '"%e".format([1234.5]) != ""',
        '"%d".format([1.5]) != ""',
        'strings.quote("a") != ""',
        '["a", "b"].join("-") == "a-b"',
        '"abc".reverse() == "cba"',
        '"abc".lastIndexOf("c") == 2',
    ),
    "regex": ('"abc".matches("^a")', '"abc123".find("[0-9]+") == "123"'),
    "quantity": (
        'quantity("1Gi").isGreaterThan(quantity("1Mi"))',
        'quantity("1.5Gi").isInteger()',
        'quantity("1Ei").asInteger() > 0',
        'isQuantity("1Gi")',
        'quantity("1").sign() == 1',
        'quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")',
    ),
    "semver": (
        'semver("1.2.3").major() == 1',
        'isSemver("1.2.3")',
        'semver("1.2.0").compareTo(semver("1.10.0")) < 0',
        'semver("2.0.0") == "2.0.0"',
    ),
    "two-variable comprehensions": (
        "[1, 2].all(i, v, v > i)",
        '{"a": 1}.exists(k, v, v == 1)',
        "[1, 2].transformList(i, v, v * 2) == [2, 4]",
        "[1, 2].transformMap(i, v, v).size() == 2",
    ),
    "type checking": ('[1, "a"].size() == 2', "1 < 1.5", "1u < 2", "type(1) == int"),
}
"""Selector tests from each library of upstream's CEL environment (k8s.io/apiserver v0.37.2
pkg/cel/environment/base.go, StoredExpressions) and its type-checking options, some valid and some that
upstream refuses: each compiles or fails, evaluates or errs as upstream decides (issue 36 items 6-9)."""


def _library_atom(draw: st.DrawFn, driver: str) -> str:
    """One library test, on a constant or, one time in three, with a device attribute in it."""
    family = draw(st.sampled_from(sorted(CEL_LIBRARY)))
    if not _one_in(draw, 3):
        return draw(st.sampled_from(CEL_LIBRARY[family]))
    mem, ids, model = _attr(driver, "mem"), _attr(driver, "ids"), _attr(driver, "model")
    return draw(
        st.sampled_from(
            (
                f"{_has(driver, 'mem')} && [{mem}, 5].isSorted()",
                f"{_has(driver, 'mem')} && [0, {mem}].exists(i, v, v == i)",
                f"{_has(driver, 'ids')} && sets.contains({ids}, [1])",
                f"{_has(driver, 'ids')} && {ids}.sort().size() > 0",
                f'{_has(driver, "model")} && {model}.matches("^x")',
                f"{_has(driver, 'mem')} && type({mem}) == int",
            )
        )
    )


@st.composite
def _selector_atom(draw: st.DrawFn) -> str:
    """One test of a device; most guard the attribute they read with ``in``, one in ten does not (a device
    without it gives a CEL runtime error, fatal upstream)."""
    driver = draw(st.sampled_from(DRIVERS))
    name = draw(st.sampled_from(ATTRIBUTES))
    quantity = draw(st.sampled_from(_QUANTITIES))
    version = draw(st.sampled_from(_VERSIONS))
    tests = {
        "model": f'{_attr(driver, "model")} == "x" || {_attr(driver, "model")}.lowerAscii().contains("y")',
        "mem": f"{_attr(driver, 'mem')} >= 1",
        "fast": _attr(driver, "fast"),
        "ver": f'{_attr(driver, "ver")}.isGreaterThan(semver("{version}"))',
        "common.example.com/rack": f'{_attr(driver, "common.example.com/rack")}.startsWith("r1")',
        "ids": f"{_attr(driver, 'ids')}.exists(i, i == 1)",
        "tags": f'{_attr(driver, "tags")}.all(t, t == "p")',
    }
    if _one_in(draw, 10):
        return tests[name]
    if _one_in(draw, 5):
        return _library_atom(draw, driver)
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return f'device.driver == "{driver}"'
    if kind == 1:
        return (
            f'"memory" in device.capacity["{driver}"] && '
            f'device.capacity["{driver}"].memory.compareTo(quantity("{quantity}")) >= 0'
        )
    if kind == 2:
        return _has(driver, name)
    return f"{_has(driver, name)} && {tests[name]}"


@st.composite
def _selector(draw: st.DrawFn) -> str:
    atoms = draw(st.lists(_selector_atom(), min_size=1, max_size=2))
    joined = draw(st.sampled_from((" && ", " || "))).join(atoms)
    return f"!({joined})" if _one_in(draw, 10) else joined


def _selectors(max_size: int) -> st.SearchStrategy[list[Obj]]:
    return st.lists(_selector().map(lambda e: {"cel": {"expression": e}}), max_size=max_size)


# --- devices and slices ---------------------------------------------------------------------------


_TAINT = st.fixed_dictionaries(
    {
        "key": st.sampled_from(("k1", "k2")),
        "effect": st.sampled_from(("NoSchedule", "NoExecute", "None")),
    },
    optional={"value": st.sampled_from(("v", "w"))},
)


def _counters(draw: st.DrawFn, values: tuple[str, ...]) -> Obj:
    """The one counter every counter set and consumption names: ``c``."""
    return {"c": {"value": draw(st.sampled_from(values))}}


_GROUPS = st.sampled_from(([], ["g1"], ["g2"], ["g1", "g2"]))


def _consumption(draw: st.DrawFn, counter_set: str) -> Obj:
    """Counters taken from ``counter_set``; one time in three with compatibility groups (none included)."""
    consumption: Obj = {"counterSet": counter_set, "counters": _counters(draw, ("1", "2", "3"))}
    if _one_in(draw, 3) and (groups := draw(_GROUPS)):
        consumption["compatibilityGroups"] = groups
    return consumption


_FRACTIONAL_CORES = st.fixed_dictionaries(
    {"value": st.sampled_from(("4", "2500m"))},
    optional={
        "requestPolicy": st.fixed_dictionaries(
            {
                "validRange": st.sampled_from(
                    ({"min": "0.5", "step": "0.5"}, {"min": "250m", "step": "0.25", "max": "2"})
                )
            },
            optional={"default": st.just("1")},
        )
    },
)
"""A capacity whose valid range is fractional (DRAFractionalCapacityRange rounds it in milli-units)."""


MAX_INT64 = "9223372036854775807"
ABOVE_MAX_INT64 = "18446744073709551616"
"""2^64: a capacity request upstream cannot represent (fatal, issue 36 items 1, 3 and 4)."""


@st.composite
def _capacity(draw: st.DrawFn, multi: bool) -> Obj:
    """Mostly 1-8Gi; one time in eight MaxInt64, where a step policy (min 1, step 2) rounds a request of
    MaxInt64 past it (fatal upstream, issue 36 item 2)."""
    huge = _one_in(draw, 8)
    capacity: Obj = {"value": MAX_INT64 if huge else draw(st.sampled_from(_QUANTITIES))}
    if multi and draw(st.booleans()):
        policy: Obj = {"default": "1Gi"}
        if huge:
            policy["validRange"] = {"min": "1", "step": "2"}
        elif draw(st.booleans()):
            policy["validValues"] = ["1Gi", "2Gi", "4Gi"]
        else:
            policy["validRange"] = {"min": "1Gi", **draw(st.sampled_from(({}, {"step": "1Gi"})))}
        capacity["requestPolicy"] = policy
    return capacity


@st.composite
def _device(draw: st.DrawFn, name: str, counter_sets: tuple[str, ...], node_field: Obj | None) -> Obj:
    device: Obj = {"name": name}
    names = draw(st.lists(st.sampled_from(ATTRIBUTES), unique=True, max_size=4))
    attributes = {n: draw(_SCALARS[n] if n in _SCALARS else _LISTS[n]) for n in names}
    if attributes:
        device["attributes"] = attributes
    multi = _one_in(draw, 4)
    if multi:
        device["allowMultipleAllocations"] = True
    if draw(st.booleans()):
        device["capacity"] = {"memory": draw(_capacity(multi))}
        if multi and _one_in(draw, 3):
            device["capacity"]["cores"] = draw(_FRACTIONAL_CORES)
    if _one_in(draw, 5):
        device["taints"] = draw(st.lists(_TAINT, min_size=1, max_size=2))
    if counter_sets and not _one_in(draw, 3):
        used = draw(st.lists(st.sampled_from(counter_sets), min_size=1, max_size=2, unique=True))
        device["consumesCounters"] = [_consumption(draw, s) for s in used]
    if _one_in(draw, 6):
        device["bindingConditions"] = ["ready"]
        device["bindingFailureConditions"] = ["failed"]
        if draw(st.booleans()):
            device["bindsToNode"] = True
    elif _one_in(draw, 8):
        device["bindsToNode"] = True  # valid without binding conditions: pins the allocation to the node
    if node_field is not None:
        device.update(node_field)
    return device


_NODE_FIELDS = (
    {"nodeName": "node-1"},
    {"nodeName": "node-1"},
    {"nodeName": "node-2"},
    {"allNodes": True},
    {
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
        }
    },
    {
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}]
        }
    },
)


_SKIPPED = st.sampled_from((["NodeUnprepareResources"], ["NodePrepareResources", "NodeUnprepareResources"]))
"""``skipNodeOperations`` values (NodePrepareResources only together with NodeUnprepareResources)."""


@st.composite
def _pool(draw: st.DrawFn, index: int) -> list[Obj]:
    """The slices of one pool: devices in one or two slices, maybe a counter slice, maybe incomplete, maybe
    a stale slice of an older generation, rarely invalid (a device name used in two slices: API validation
    sees one slice at a time)."""
    driver = draw(st.sampled_from(DRIVERS))
    pool = f"pool-{index}"
    per_device = _one_in(draw, 6)
    node_field = {"perDeviceNodeSelection": True} if per_device else draw(st.sampled_from(_NODE_FIELDS))
    counter_sets = tuple(f"set-{i}" for i in range(draw(st.integers(0, 2))))
    device_slices = draw(st.integers(1, 2))
    generation = draw(st.integers(1, 2))
    count = device_slices + (1 if counter_sets else 0) + (1 if _one_in(draw, 10) else 0)
    slices: list[Obj] = []

    skip = {"skipNodeOperations": draw(_SKIPPED)} if _one_in(draw, 6) else {}

    def spec(body: Obj, gen: int = generation) -> Obj:
        return {
            "driver": driver,
            "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
            **node_field,
            **skip,
            **body,
        }

    if counter_sets:
        counters = [{"name": s, "counters": _counters(draw, ("2", "3", "4"))} for s in counter_sets]
        slices.append({"metadata": {"name": f"{pool}-counters"}, "spec": spec({"sharedCounters": counters})})
    serial = 0
    for s in range(device_slices):
        devices = []
        for _ in range(draw(st.integers(0 if s else 1, 5))):
            per = draw(st.sampled_from(_NODE_FIELDS)) if per_device else None
            reused = serial > 0 and s > 0 and _one_in(draw, 15)
            devices.append(draw(_device(f"dev-{index}-{0 if reused else serial}", counter_sets, per)))
            serial += 1
        if devices and "nodeName" not in node_field and _one_in(draw, 3):
            # Where the pool is not tied to the node, bindsToNode decides whether the allocation is pinned.
            draw(st.sampled_from(devices))["bindsToNode"] = True
        slices.append({"metadata": {"name": f"{pool}-s{s}"}, "spec": spec({"devices": devices})})
    if generation > 1 and _one_in(draw, 4):
        stale = [draw(_device(f"dev-{index}-old", (), None if not per_device else {"allNodes": True}))]
        slices.append({"metadata": {"name": f"{pool}-old"}, "spec": spec({"devices": stale}, generation - 1)})
    return slices


# --- classes, claims, rules, allocated ------------------------------------------------------------


@st.composite
def _class(draw: st.DrawFn, name: str) -> Obj:
    selectors = draw(_selectors(2))
    if not selectors and draw(st.booleans()):
        selectors = [{"cel": {"expression": f'device.driver == "{draw(st.sampled_from(DRIVERS))}"'}}]
    return {"metadata": {"name": name}, "spec": {"selectors": selectors} if selectors else {}}


_TOLERATION = st.fixed_dictionaries(
    {"operator": st.sampled_from(("Exists", "Equal"))},
    optional={"key": st.sampled_from(("k1", "k2")), "effect": st.sampled_from(("NoSchedule", "NoExecute"))},
).map(lambda t: {**t, "value": "v"} if t["operator"] == "Equal" else t)


def _uses(draw: st.DrawFn, gates: dict[str, bool], gate: str, one_in: int) -> bool:
    """Whether a request uses a gated field (one time in ``one_in``); with the gate off only one time in ten
    of those, so that the error for a disabled feature stays one outcome among many."""
    return _one_in(draw, one_in) and (gates[gate] or _one_in(draw, 10))


_EXTREME_REQUESTS = st.sampled_from(("-5", ABOVE_MAX_INT64, MAX_INT64))
"""Capacity requests upstream refuses as fatal: negative (issue 36 item 5), above MaxInt64, or MaxInt64
itself, which a step policy rounds past it."""


@st.composite
def _exactly(draw: st.DrawFn, classes: list[str], gates: dict[str, bool], sub: bool) -> Obj:
    body: Obj = {
        "deviceClassName": draw(
            st.sampled_from([*classes, "missing-class"] if _one_in(draw, 60) else classes)
        )
    }
    if _one_in(draw, 7):
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = draw(
            st.one_of(st.integers(1, 3), st.integers(4, 33)) if _one_in(draw, 11) else st.integers(1, 3)
        )
    selectors = draw(_selectors(1))
    if selectors:
        body["selectors"] = selectors
    if not sub and _uses(draw, gates, "DRAAdminAccess", 7):
        body["adminAccess"] = True
    if _one_in(draw, 5):
        body["tolerations"] = draw(st.lists(_TOLERATION, min_size=1, max_size=2))
    if _uses(draw, gates, "DRAConsumableCapacity", 5):
        extreme = _one_in(draw, 6)
        memory = _EXTREME_REQUESTS if extreme else st.sampled_from(("1Gi", "2Gi", "3Gi", "1500Mi"))
        requests = {"memory": draw(memory)}
        if _one_in(draw, 2) and not extreme:  # a device without cores is skipped before the memory check
            requests["cores"] = draw(st.sampled_from(("0.7", "1.2", "2", "300m")))
        body["capacity"] = {"requests": requests}
    return body


@st.composite
def _request(draw: st.DrawFn, name: str, classes: list[str], gates: dict[str, bool]) -> Obj:
    if _uses(draw, gates, "DRAPrioritizedList", 4):
        subs = [
            {"name": f"s{i}", **draw(_exactly(classes, gates, sub=True))}
            for i in range(draw(st.integers(1, 3)))
        ]
        return {"name": name, "firstAvailable": subs}
    return {"name": name, "exactly": draw(_exactly(classes, gates, sub=False))}


def _constraint_kind(draw: st.DrawFn, gates: dict[str, bool]) -> str:
    """matchAttribute or distinctAttribute; the latter came with DRAConsumableCapacity (the stable
    allocator does not know it), so with that gate off only one time in ten."""
    distinct = draw(st.booleans()) and (gates["DRAConsumableCapacity"] or _one_in(draw, 10))
    return "distinctAttribute" if distinct else "matchAttribute"


@st.composite
def _constraint(draw: st.DrawFn, names: list[str], gates: dict[str, bool]) -> Obj:
    attribute = _qualified(draw(st.sampled_from(ATTRIBUTES)), draw(st.sampled_from(DRIVERS)))
    constraint: Obj = {_constraint_kind(draw, gates): attribute}
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    if chosen:
        constraint["requests"] = chosen
    return constraint


@st.composite
def _claim(draw: st.DrawFn, index: int, classes: list[str], gates: dict[str, bool]) -> Obj:
    requests = [draw(_request(f"r{i}", classes, gates)) for i in range(draw(st.integers(1, 3)))]
    names = [r["name"] for r in requests] + [
        f"{r['name']}/{s['name']}" for r in requests for s in r.get("firstAvailable", ())
    ]
    devices: Obj = {"requests": requests}
    constraints = draw(st.lists(_constraint(names, gates), max_size=2))
    if _uses(draw, gates, "DRADerivedAttributes", 5):
        constraints.extend(draw(_derived(requests, gates)))
    if constraints:
        devices["constraints"] = constraints
    return {
        "metadata": {"name": f"claim-{index}", "namespace": "default", "uid": f"uid-{index}"},
        "spec": {"devices": devices},
    }


_DERIVED_EXPRESSIONS = (
    f'device.attributes["{DRIVERS[0]}"].mem',
    f'"mem" in device.attributes["{DRIVERS[0]}"] ? device.attributes["{DRIVERS[0]}"].mem : 0',
    "device.driver",
    f'"ids" in device.attributes["{DRIVERS[0]}"] ? device.attributes["{DRIVERS[0]}"].ids : [0]',
    f'"memory" in device.capacity["{DRIVERS[0]}"]',
)
"""Derived-attribute expressions: the first fails on devices without ``mem``, the fourth gives a list."""


MAX_DERIVED_ATTRIBUTES = 32
"""``+k8s:maxItems=32`` on derivedAttributes (k8s.io/api v0.37.2 resource/v1/types.go)."""
MAX_CONSTRAINTS = 32
"""``DeviceConstraintsMaxSize``: with up to two other constraints, at most 30 derived attributes here."""


@st.composite
def _derived(draw: st.DrawFn, requests: list[Obj], gates: dict[str, bool]) -> list[Obj]:
    """Adds ``derivedAttributes`` to one request (or subrequest) and returns the constraints that use them
    (API validation refuses an attribute no constraint targeting its request uses): mostly one, a
    ``derived/`` name or one shadowing a driver attribute; one time in four 9 to 30 of them."""
    request = draw(st.sampled_from(requests))
    body = (
        draw(st.sampled_from(request["firstAvailable"]))
        if "firstAvailable" in request
        else request["exactly"]
    )
    if _one_in(draw, 4):
        names = [f"derived/d{i}" for i in range(draw(st.integers(9, MAX_CONSTRAINTS - 2)))]
    else:
        names = [draw(st.sampled_from(("derived/g", f"{DRIVERS[0]}/mem")))]
    body["derivedAttributes"] = [
        {"name": name, "expression": draw(st.sampled_from(_DERIVED_EXPRESSIONS))} for name in names
    ]
    constraints = []
    for name in names:
        constraint: Obj = {_constraint_kind(draw, gates): name}
        if draw(st.booleans()):
            constraint["requests"] = [request["name"]]
        constraints.append(constraint)
    return constraints


_RULE_SELECTORS = st.sampled_from(("omitted", "empty", "driver", "pool", "device"))


@st.composite
def _taint_rule(draw: st.DrawFn, index: int, devices: list[tuple[str, str, Obj]]) -> Obj:
    spec: Obj = {"taint": draw(_TAINT)}
    kind = draw(_RULE_SELECTORS)
    if kind != "omitted":
        selector: Obj = {}
        if kind != "empty" and devices:
            driver, pool, device = draw(st.sampled_from(devices))
            selector["driver"] = driver
            if kind in ("pool", "device"):
                selector["pool"] = pool
            if kind == "device":
                selector["device"] = device["name"]
        spec["deviceSelector"] = selector
    return {"metadata": {"name": f"rule-{index}"}, "spec": spec}


@st.composite
def _allocated_result(draw: st.DrawFn, devices: list[tuple[str, str, Obj]]) -> Obj:
    driver, pool, device = draw(st.sampled_from(devices))
    result: Obj = {"request": "other", "driver": driver, "pool": pool, "device": device["name"]}
    if device.get("allowMultipleAllocations") and not _one_in(draw, 4):
        result["shareID"] = draw(
            st.sampled_from(("11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"))
        )
        if "capacity" in device:
            result["consumedCapacity"] = {"memory": draw(st.sampled_from(("1Gi", "2Gi")))}
    elif _one_in(draw, 6):
        result["adminAccess"] = True
    return result


def _devices(slice_: Obj) -> list[Obj]:
    return slice_["spec"].get("devices", [])


@st.composite
def states(draw: st.DrawFn) -> Obj:
    """One state for the oracle program (tests/oracle/main.go)."""
    gates = draw(_gates())
    slices = [s for i in range(draw(st.integers(1, 3))) for s in draw(_pool(i))]
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d)
        for s in slices
        for d in s["spec"].get("devices", ())
    ]
    classes = [draw(_class(f"class-{i}")) for i in range(draw(st.integers(1, 2)))]
    class_names = [c["metadata"]["name"] for c in classes]
    claims = [draw(_claim(i, class_names, gates)) for i in range(draw(st.integers(1, 2)))]
    rules = [draw(_taint_rule(i, devices)) for i in range(draw(st.integers(0, 2)))]
    allocated = []
    if devices and draw(st.booleans()):
        results = draw(st.lists(_allocated_result(devices), min_size=1, max_size=3))
        allocated.append({"devices": {"results": results}})
    labels = {ADMIN_ACCESS_LABEL: "true"} if not _one_in(draw, 4) else {}
    return {
        "gates": gates,
        "namespaces": [{"metadata": {"name": "default", "labels": labels}}],
        "node": DECLARING_NODE if draw(st.booleans()) else NODE,
        "classes": classes,
        "slices": slices,
        "taintRules": rules,
        "claims": claims,
        "allocated": allocated,
    }


@st.composite
def large_states(draw: st.DrawFn) -> Obj:
    """States at the search's size limits (up to 64 devices on the node, 32 requests) that have a solution
    a first fit finds: ExactCount requests, some for devices with ``m == "x"``, within what the node has;
    and firstAvailable requests whose first subrequest can never fit (it would exceed the claim's 32
    results, or wants more "x" devices than exist) before a second one that does. All gates on."""
    models = [draw(st.sampled_from(("x", "y"))) for _ in range(draw(st.integers(16, 64)))]
    devices = [{"name": f"dev-{i}", "attributes": {"m": {"string": m}}} for i, m in enumerate(models)]
    parts = draw(st.integers(1, 4))
    slices = [
        {
            "metadata": {"name": f"pool-s{p}"},
            "spec": {
                "driver": DRIVERS[0],
                "pool": {"name": "pool", "generation": 1, "resourceSliceCount": parts},
                "nodeName": "node-1",
                "devices": devices[p::parts],
            },
        }
        for p in range(parts)
    ]
    x_only = [{"cel": {"expression": f'{_attr(DRIVERS[0], "m")} == "x"'}}]
    left, x_left = min(32, len(models)), models.count("x")
    requests: list[Obj] = []
    for i in range(draw(st.integers(1, 32))):
        count = draw(st.integers(1, 2))
        exact: Obj = {"deviceClassName": "class-0", "allocationMode": "ExactCount", "count": count}
        # An "x" request is fine as long as the other requests can do with "y" devices: give it the x's first.
        wants_x = draw(st.booleans()) and x_left >= count
        if count > left:
            break
        left -= count
        if wants_x:
            exact["selectors"] = x_only
            x_left -= count
        if _one_in(draw, 3):
            # Upstream tries every subset of the x devices before giving up on "big": keep that small.
            over_limit = draw(st.booleans()) or models.count("x") > 12
            big = {"name": "big", **exact, "count": 33 if over_limit else models.count("x") + 1}
            big.pop("selectors", None)
            if not over_limit:
                big["selectors"] = x_only
            requests.append({"name": f"r{i}", "firstAvailable": [big, {"name": "fits", **exact}]})
        else:
            requests.append({"name": f"r{i}", "exactly": exact})
    # x requests first: a y-or-x request placed earlier could take an x device an x request needs.
    requests.sort(key=lambda r: "selectors" not in (r.get("exactly") or r["firstAvailable"][1]))
    return {
        "gates": dict.fromkeys(GATES, True),
        "namespaces": [],
        "node": NODE,
        "classes": [{"metadata": {"name": "class-0"}, "spec": {}}],
        "slices": slices,
        "taintRules": [],
        "claims": [
            {
                "metadata": {"name": "claim-0", "namespace": "default", "uid": "uid-0"},
                "spec": {"devices": {"requests": requests}},
            }
        ],
        "allocated": [],
    }
