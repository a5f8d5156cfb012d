"""Selector caches: the class-match index (class selectors evaluated when slices/classes arrive), the result
cache's statistics and bounds, and derived-attribute values on every engine."""

from __future__ import annotations

import gc

import pytest

from allocator.cel import CELDevice, Version
from allocator.cel.expr_engine import ExprEngine
from allocator.errors import CELCompileError, CELEvalError, InvalidInputError
from allocator.model import parse_device_class, parse_resource_slice
from allocator.selectors import PROGRAM_BASE_BYTES, SelectorCache
from tests.allocator.builders import (
    CLASS_A,
    DRIVER_A,
    DRIVER_B,
    World,
    claim,
    device,
    device_class,
    request,
    slice_,
)
from tests.allocator.cel_corpus import ENGINE_TYPES

NUMA = f'device.attributes["{DRIVER_A}"].numa'


def gpus(*numas: int, name: str = "s1") -> dict:
    return slice_(name, DRIVER_A, "node-1", [device(f"gpu-{i}", numa=n) for i, n in enumerate(numas)])


def stored(world: World, name: str):
    return next(s for s in world.inventory.slices() if s.name == name)


def picked(allocations):
    return [[r["device"] for r in a["devices"]["results"]] for a in allocations]


def one(world: World, class_name: str = CLASS_A):
    return world.allocate(claim("c", request("r", class_name)))


# --- the class-match index ----------------------------------------------------------------------------------


def test_class_selectors_run_on_arrival_not_in_filter():
    world = World(slices=[gpus(0, 1, 2)])
    index = world.inventory.class_index
    assert index is not None
    # Two default classes x three devices, one selector each: six evaluations, before any allocation.
    assert index.evaluations == 6
    assert index.report() == {"classes": 2, "matches": 3, "errors": 0, "evaluations": 6}
    before = dict(world.selectors.stats)
    assert picked(one(world)) == [["gpu-0"]]
    assert index.evaluations == 6
    assert world.selectors.stats == before  # no selector evaluated, no cache lookup


def test_class_change_selects_different_devices():
    world = World(slices=[gpus(0, 1, 1)])
    assert picked(one(world)) == [["gpu-0"]]
    world.inventory.upsert_class(parse_device_class(device_class(CLASS_A, f"{NUMA} == 1")))
    assert world.inventory.class_index.matching(CLASS_A) == frozenset(stored(world, "s1").devices[1:])
    assert picked(one(world)) == [["gpu-1"]]
    # The same selectors again: nothing is re-evaluated.
    evaluations = world.inventory.class_index.evaluations
    world.inventory.upsert_class(parse_device_class(device_class(CLASS_A, f"{NUMA} == 1")))
    assert world.inventory.class_index.evaluations == evaluations
    world.inventory.delete_class(CLASS_A)
    with pytest.raises(InvalidInputError, match="could not retrieve device class class-a"):
        one(world)


def test_slice_updates_reindex_only_their_devices():
    world = World(slices=[gpus(0, 1), slice_("s2", DRIVER_B, "node-1", [device("nic-0")])])
    index = world.inventory.class_index
    start = index.evaluations
    world.inventory.upsert_slice(parse_resource_slice(gpus(5, 6, 7)))
    assert index.evaluations == start + 2 * 3  # two classes x the three new devices
    assert sorted(d.name for d in index.matching(CLASS_A)) == ["gpu-0", "gpu-1", "gpu-2"]
    world.inventory.delete_slice("s1")
    assert index.matching(CLASS_A) == frozenset()
    assert index.report()["matches"] == 1  # nic-0 in class-b


def test_class_runtime_errors_are_recorded_and_raised_only_when_reached():
    # gpu-1 lacks "numa": the class selector fails there. A claim satisfied by gpu-0 never reaches it.
    slices = [
        slice_("s1", DRIVER_A, "node-1", [device("gpu-0", numa=0), device("gpu-1"), device("gpu-2", numa=0)])
    ]
    classes = [device_class(CLASS_A, f"{NUMA} == 0")]
    world = World(slices=slices, classes=classes)
    assert world.inventory.class_index.report()["errors"] == 1
    assert picked(one(world)) == [["gpu-0"]]
    with pytest.raises(CELEvalError) as error:
        world.allocate(claim("c", request("r", count=2)))
    assert str(error.value) == (
        f"class {CLASS_A}: selector #0 on device {DRIVER_A}/node-1/gpu-1: CEL runtime error: "
        "no such key: numa"
    )


def test_class_compile_errors_are_raised_when_a_device_is_reached():
    world = World(slices=[gpus(0)], classes=[device_class(CLASS_A, "device.driver ==")])
    with pytest.raises(CELCompileError, match=f"^class {CLASS_A}: selector #0: CEL compile error: "):
        one(world)
    # No device on the node: nothing is reached, no error (upstream's lazy evaluation).
    assert (
        World(slices=[], classes=[device_class(CLASS_A, "device.driver ==")]).allocate(
            claim("c", request("r"))
        )
        is None
    )


def test_selectors_after_a_false_one_are_not_evaluated():
    # Selector #1 would fail on gpu-1 (no "model"), but #0 is already false there.
    slices = [slice_("s1", DRIVER_A, "node-1", [device("gpu-0", numa=0, model="a"), device("gpu-1", numa=1)])]
    classes = [device_class(CLASS_A, f"{NUMA} == 0", f'device.attributes["{DRIVER_A}"].model == "a"')]
    world = World(slices=slices, classes=classes)
    assert world.inventory.class_index.report()["errors"] == 0
    assert picked(world.allocate(claim("c", request("r")))) == [["gpu-0"]]


def test_index_attached_later_covers_existing_objects():
    world = World(slices=[gpus(0, 1)])
    world.inventory.class_index = None
    world.inventory.attach_selectors(world.selectors)
    assert world.inventory.class_index.report()["matches"] == 2


# --- result cache: statistics and bounds -------------------------------------------------------------


def test_request_selector_results_are_cached_per_value_read():
    world = World(slices=[gpus(0, 1, 1)])
    before = dict(world.selectors.stats)  # the class-match index looked at every device already
    selector = [{"cel": {"expression": f"{NUMA} == 1"}}]
    world.allocate(claim("c", request("r", selectors=selector)))
    stats = world.selectors.stats
    assert stats["evaluations"] - before["evaluations"] == 2  # gpu-0 (numa 0), gpu-1 (numa 1): found
    world.allocate(claim("c", request("r", selectors=selector)))
    assert (stats["evaluations"] - before["evaluations"], stats["hits"] - before["hits"]) == (2, 2)
    report = world.selectors.report()
    # Compiled: the two class selectors (index) and the request selector.
    assert (report["selector_expressions"], report["value_expressions"], report["compiles"]) == (3, 0, 3)


def test_devices_with_the_values_read_share_one_evaluation():
    world = World(slices=[gpus(0, 1, 1, 0)])
    devices = stored(world, "s1").devices
    cache = SelectorCache(ExprEngine())
    # Reads numa only: four devices, two distinct values, two evaluations.
    assert [cache.matches(f"{NUMA} == 1", d, "claim x", 0) for d in devices] == [False, True, True, False]
    assert (cache.stats["evaluations"], cache.stats["hits"], cache.report()["results"]) == (2, 2, 2)
    # A missing attribute is a value of its own (the runtime error), not shared with a present one.
    missing = f'device.attributes["{DRIVER_A}"].model == "a"'
    with pytest.raises(CELEvalError, match="no such key: model"):
        cache.matches(missing, devices[0], "claim x", 0)
    assert cache.stats["evaluations"] == 3


def test_values_are_told_apart_by_type():
    cache = SelectorCache(ExprEngine())
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [device("d-int", flag=1), device("d-bool", flag=True)])]
    )
    flag = f'device.attributes["{DRIVER_A}"].flag'
    one, true = stored(world, "s1").devices
    assert cache.matches(f"{flag} == 1", one, "claim x", 0) is True
    # Python's 1 == True must not make the bool device reuse the int device's result (CEL: true != 1).
    assert cache.matches(f"{flag} == 1", true, "claim x", 0) is False
    assert cache.stats["evaluations"] == 2


def test_replaced_devices_drop_their_per_device_results():
    world = World(slices=[gpus(0, 1)])
    # Iterating the attribute map reads unknown keys: results are kept per device.
    selector = [{"cel": {"expression": f'device.attributes.exists(domain, domain == "{DRIVER_A}")'}}]
    by_value = world.selectors.report()["results"]  # the class selectors' results, kept by value
    world.allocate(claim("c", request("r", selectors=selector)))
    assert world.selectors.report()["results"] == by_value + 1  # gpu-0 fits
    world.inventory.upsert_slice(parse_resource_slice(gpus(1, 1)))
    gc.collect()
    assert world.selectors.report()["results"] == by_value


def test_results_are_bounded():
    cache = SelectorCache(ExprEngine(), max_results=8)
    world = World(slices=[gpus(*range(20))])
    devices = stored(world, "s1").devices
    for d in devices:
        cache.matches(f"{NUMA} >= 0", d, "claim x", 0)
        cache.matches(f"{NUMA} >= 1", d, "claim x", 0)
    report = cache.report()
    assert report["results"] <= 8
    assert report["evictions"] >= 1
    # Evicted results are recomputed on demand, with the same answer.
    assert cache.matches(f"{NUMA} >= 1", devices[0], "claim x", 0) is False


def test_compiled_programs_are_bounded():
    cache = SelectorCache(ExprEngine(), max_expressions=3)
    for i in range(5):
        cache.program(f"{i} == {i}")
    assert cache.report()["selector_expressions"] == 3


def test_value_cache_and_errors():
    world = World(slices=[gpus(3)])
    gpu = stored(world, "s1").devices[0]
    before = world.selectors.report()  # the class-match index evaluated the class selectors
    assert world.selectors.value(f"{NUMA} * 2", gpu) == 6
    assert world.selectors.value(f"{NUMA} * 2", gpu) == 6
    report = world.selectors.report()
    assert (report["evaluations"] - before["evaluations"], report["hits"] - before["hits"]) == (1, 1)
    assert report["value_expressions"] == 1
    with pytest.raises(CELEvalError, match="no such key: missing"):
        world.selectors.value(f'device.attributes["{DRIVER_A}"].missing', gpu)
    with pytest.raises(CELEvalError, match="no such key: missing"):  # the cached error, raised again
        world.selectors.value(f'device.attributes["{DRIVER_A}"].missing', gpu)
    with pytest.raises(CELCompileError):
        world.selectors.value("1 +", gpu)


# --- derived values on every engine ------------------------------------------------------------------

DEVICE = CELDevice(
    "drv",
    {"drv": {"numa": 1, "topology": "3-1", "tags": ("a", "b"), "version": Version("1.2.3+build")}},
    {},
)
VALUE_CASES = [
    ('device.attributes["drv"].numa', 1),
    ('device.attributes["drv"].topology.split("-")[0]', "3"),
    ('int(device.attributes["drv"].topology.split("-")[1])', 1),
    ('device.attributes["drv"].numa >= 1 ? "tier-1" : "tier-2"', "tier-1"),
    ('device.attributes["drv"].tags', ("a", "b")),
    ('device.attributes["drv"].version', Version("1.2.3")),
    ('[semver("1.0.0"), semver("v2", true)]', (Version("1.0.0"), Version("2.0.0"))),
    ('device.attributes["drv"].numa == 1', True),
    ("dyn([])", ()),
    ('"x-" + device.attributes["drv"].topology', "x-3-1"),
    ('[device.attributes["drv"].topology + "!"]', ("3-1!",)),
]
VALUE_ERRORS = [
    ('device.attributes["drv"].missing', "eval", "no such key: missing"),
    ('dyn([dyn(1), dyn("a")])', "eval", "list mixes element types int, string"),  # [1, "a"] does not compile
    ("dyn(1u)", "eval", "result of type uint is not a valid attribute value"),
    ('device.attributes["other"]', "compile", "not map(string, dyn)"),
    ("quantity('1')", "compile", "not kubernetes.Quantity"),
    ("[[1]]", "compile", "not list(list(int))"),
]


@pytest.fixture(scope="module", params=ENGINE_TYPES, ids=lambda t: t.name)
def engine(request: pytest.FixtureRequest):
    return request.param()


@pytest.mark.parametrize(("expression", "expected"), VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_on_every_engine(engine, expression, expected):
    assert engine.compile_value(expression).evaluate(DEVICE) == expected


@pytest.mark.parametrize(("expression", "kind", "text"), VALUE_ERRORS, ids=[c[0] for c in VALUE_ERRORS])
def test_value_errors_on_every_engine(engine, expression, kind, text):
    error = CELCompileError if kind == "compile" else CELEvalError
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        engine.compile_value(expression).evaluate(DEVICE)


@pytest.mark.parametrize("expression", ["dyn(optional.of(1))", "dyn(optional.none())"])
def test_an_optional_is_a_cel_error_as_a_value_or_a_selector(engine, expression):
    # cel-expr evaluates it (the result has no Python form); cel-python refuses it at compile time.
    for compile_program in (engine.compile_value, engine.compile):
        with pytest.raises((CELCompileError, CELEvalError)):
            compile_program(expression).evaluate(DEVICE)


def test_compiled_programs_are_bounded_by_their_estimated_bytes():
    # Five 10 Ki-long expressions (the API's maximum) with room for three: the two oldest go.
    engine = ExprEngine()
    expressions = [f"{i} == {i}" + " && true" * 1278 for i in range(5)]
    assert all(10_200 < len(e) <= 10_240 for e in expressions)
    cost = PROGRAM_BASE_BYTES + len(expressions[0]) * engine.program_bytes_per_char
    cache = SelectorCache(engine, max_program_bytes=3 * cost + cost // 2)
    for expression in expressions:
        cache.program(expression)
    report = cache.report()
    assert report["selector_expressions"] == 3
    assert report["program_bytes"] == 3 * cost
    # A dropped one compiles again.
    cache.program(expressions[0])
    assert cache.report()["compiles"] == 6
