"""CEL selector engines: the conformance corpus (tests/allocator/cel_corpus.py) on every engine, plus the
engine contract (caching, threads, cost limit, error messages)."""

from __future__ import annotations

import gc
import itertools
import threading
import time

import pytest

from allocator.cel import CEL_MAX_COST, CELDevice, CELEngine
from allocator.cel.expr_engine import ACTIVATION_REUSE, ExprEngine
from allocator.cel.library import SemverValue, compare_semver, parse_semver
from allocator.errors import CELCompileError, CELEvalError
from tests.allocator.cel_corpus import CASES, ENGINE_TYPES, Case, Err, devices

DEVICES = devices()

UNSUPPORTED = {"cel-python": frozenset({"optional"})}
"""Corpus features an engine rejects at compile time (celpy cannot parse optional syntax or two-variable
comprehensions)."""


@pytest.fixture(scope="module", params=ENGINE_TYPES, ids=lambda t: t.name)
def engine(request: pytest.FixtureRequest) -> CELEngine:
    return request.param()


def outcome(engine: CELEngine, expression: str, device: CELDevice) -> bool | Err:
    try:
        program = engine.compile(expression)
    except CELCompileError as err:
        return Err("compile", str(err))
    try:
        return program.evaluate(device)
    except CELEvalError as err:
        return Err("eval", str(err))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_corpus(engine: CELEngine, case: Case) -> None:
    got = outcome(engine, case.expression, DEVICES[case.device])
    if case.needs & UNSUPPORTED.get(engine.name, frozenset()):
        assert isinstance(got, Err) and got.kind == "compile" and engine.name in got.text, got
        return
    if isinstance(case.expect, Err):
        assert isinstance(got, Err), f"expected a {case.expect.kind} error, got {got!r}"
        assert got.kind == case.expect.kind, got.text
        assert case.expect.text in got.text
    else:
        assert got is case.expect


def test_corpus_covers_the_environment() -> None:
    assert len(CASES) >= 80
    assert len({(c.expression, c.device) for c in CASES}) == len(CASES), "duplicate corpus entries"


def test_engine_names() -> None:
    assert ExprEngine.name == "cel-expr"
    assert len({t.name for t in ENGINE_TYPES}) == len(ENGINE_TYPES)


def test_program_keeps_its_expression(engine: CELEngine) -> None:
    text = 'device.driver == "x"'
    assert engine.compile(text).expression == text


def test_compile_error_carries_position(engine: CELEngine) -> None:
    with pytest.raises(CELCompileError, match=r"<input>:1:\d+"):
        engine.compile('device.driver == "a" &&')


def test_one_program_many_devices(engine: CELEngine) -> None:
    program = engine.compile('device.attributes[device.driver].size() > 0 && device.driver.endsWith(".com")')
    assert program.evaluate(DEVICES["gpu"]) is True
    assert program.evaluate(DEVICES["nic"]) is True
    assert program.evaluate(DEVICES["bare"]) is False


def test_runaway_expression_stops_quickly(engine: CELEngine) -> None:
    big = "[" + ", ".join(str(i) for i in range(1000)) + "]"
    program = engine.compile(f"{big}.all(x, {big}.all(y, x + y > 0))")
    started = time.perf_counter()
    with pytest.raises(CELEvalError, match="actual cost limit exceeded"):
        program.evaluate(DEVICES["gpu"])
    assert time.perf_counter() - started < 2.0


def test_evaluation_from_threads(engine: CELEngine) -> None:
    gpu = 'device.attributes["gpu.nvidia.com"]'
    program = engine.compile(f'"numaNodes" in {gpu} && {gpu}.numaNodes.includes(1)')
    cheap = [DEVICES["gpu"], DEVICES["nic"]]
    expected = [True, False]
    failures: list[str] = []

    def work() -> None:
        for i in range(500):
            got = program.evaluate(cheap[i % 2])
            if got is not expected[i % 2]:
                failures.append(f"{i}: {got}")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_typical_selector_is_fast(engine: CELEngine) -> None:
    # A loose guard against per-evaluation device conversion; the measured figure is ~3 us (cel-expr).
    program = engine.compile(
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"'
    )
    device = DEVICES["gpu"]
    program.evaluate(device)
    started = time.perf_counter()
    for _ in range(2000):
        program.evaluate(device)
    per_eval = (time.perf_counter() - started) / 2000
    assert per_eval < (200e-6 if engine.name == "cel-expr" else 5e-3)


# --------------------------------------------------------------------------------- cel-expr specifics


def test_expr_engine_caches_devices_weakly() -> None:
    engine = ExprEngine()
    program = engine.compile("device.allowMultipleAllocations")
    device = CELDevice(driver="d.example.com", attributes={}, capacity={}, allow_multiple_allocations=True)
    for _ in range(ACTIVATION_REUSE * 2 + 5):  # crosses activation rebuilds
        assert program.evaluate(device) is True
    assert len(engine._devices) == 1
    del device
    gc.collect()
    assert len(engine._devices) == 0


def test_expr_engine_estimated_cost() -> None:
    engine = ExprEngine()
    # cel-go's units: device 1, .attributes 1, [_] 1, .x 1 (a map field), == 1 (an attribute of at most 64
    # characters against one of size 1: ceil(0.1 * 1)).
    assert engine.compile('device.attributes["a.com"].x == 1').estimated_cost == 5
    # Three nested loops over a 64-element list (the API maximum) exceed the budget, as upstream estimates.
    nested = 'cel.bind(l, device.attributes["a.com"].l, l.all(x, l.all(y, l.all(z, x + y + z > 0))))'
    program = engine.compile(nested)
    assert program.cost_bound > CEL_MAX_COST
    with pytest.raises(CELEvalError, match="actual cost limit exceeded"):
        program.evaluate(DEVICES["gpu"])


def test_expr_engine_rewrites_only_direct_lookups() -> None:
    engine = ExprEngine()
    # Through an alias the lookup is a plain map index: a missing domain is a runtime error (documented).
    program = engine.compile('cel.bind(m, device.attributes, m["other.example.com"].size() == 0)')
    with pytest.raises(CELEvalError, match=r"no such key: other\.example\.com"):
        program.evaluate(DEVICES["gpu"])
    # Brackets and quotes inside the key do not confuse the rewrite.
    program = engine.compile('device.attributes["a]\\"[b"].size() == 0 && has(device.capacity)')
    assert program.evaluate(DEVICES["gpu"]) is True


# ----------------------------------------------------------------------------------------- library


@pytest.mark.parametrize(
    ("text", "relaxed", "expected"),
    [
        ("1.2.3", False, SemverValue(1, 2, 3)),
        ("1.2.3-rc.1+build", False, SemverValue(1, 2, 3, ("rc", 1))),
        ("v1", True, SemverValue(1, 0, 0)),
        ("v01.2", True, SemverValue(1, 2, 0)),
        ("1.02.3-alpha", True, SemverValue(1, 2, 3, ("alpha",))),
    ],
)
def test_parse_semver(text: str, relaxed: bool, expected: SemverValue) -> None:
    assert parse_semver(text, relaxed) == expected


@pytest.mark.parametrize(
    ("text", "relaxed"), [("1.2", False), ("v1.2.3", False), ("1.2.03", False), ("1.2-rc", True), ("", False)]
)
def test_parse_semver_rejects(text: str, relaxed: bool) -> None:
    with pytest.raises(ValueError):
        parse_semver(text, relaxed)


def test_semver_precedence_chain() -> None:
    # The example chain of semver.org section 11.
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
    ]
    chain += ["1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0", "2.1.1"]
    versions = [parse_semver(v) for v in chain]
    for lower, higher in itertools.pairwise(versions):
        assert compare_semver(lower, higher) == -1
        assert compare_semver(higher, lower) == 1
