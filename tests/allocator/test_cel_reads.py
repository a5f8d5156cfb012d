"""Which device keys an expression reads (``allocator.cel.reads``), on both engines."""

from __future__ import annotations

import pytest

from allocator.cel import CELDevice, Version
from allocator.cel.celpy_engine import CelpyEngine
from allocator.cel.expr_engine import ExprEngine
from allocator.cel.reads import MISSING, Reads, value_key
from allocator.quantity import parse_quantity

ENGINES = [ExprEngine(), CelpyEngine()]
D = "gpu.example.com"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize(
    ("expression", "keys"),
    [
        (f'device.attributes["{D}"].model == "H100"', (("attributes", D, "model"),)),
        (f'device.attributes["{D}"]["model"] == "H100"', (("attributes", D, "model"),)),
        (f'has(device.attributes["{D}"].model)', (("attributes", D, "model"),)),
        (f'"model" in device.attributes["{D}"]', (("attributes", D, None),)),
        (
            f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0 && '
            f'device.attributes["{D}"].numa == 0',
            (("attributes", D, "numa"), ("capacity", D, "memory")),
        ),
        ('device.driver == "x" && device.allowMultipleAllocations', ()),
    ],
)
def test_constant_lookups_are_keyed(engine, expression, keys):
    assert engine.compile(expression).reads == Reads(keys)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize(
    "expression",
    [
        f'device.attributes.exists(domain, domain == "{D}")',  # iterates the domains
        f'"{D}" in device.attributes',
        'device.attributes[device.driver].model == "H100"',  # a computed domain
    ],
)
def test_other_uses_of_the_maps_are_not_keyed(engine, expression):
    assert engine.compile(expression).reads is None


def test_value_key_sees_types_missing_keys_and_quantity_text():
    reads = Reads((("attributes", D, "flag"), ("attributes", D, "v"), ("capacity", D, "memory")))

    def device(flag: object, memory: str) -> CELDevice:
        return CELDevice(
            D, {D: {"flag": flag, "v": Version("1.0.0")}}, {D: {"memory": parse_quantity(memory)}}
        )

    assert value_key(device(1, "1Gi"), reads) == value_key(device(1, "1Gi"), reads)
    assert value_key(device(1, "1Gi"), reads) != value_key(device(True, "1Gi"), reads)
    assert value_key(device(1, "1Gi"), reads) != value_key(device(1, "1024Mi"), reads)
    bare = CELDevice(D, {}, {})
    assert value_key(bare, reads) == (D, False, MISSING, MISSING, MISSING)
