"""``make oracle N=... SEED=...``: a long differential run; prints feature coverage (what issue 36 asks a
run to cover is listed even when no state used it, marked NOT COVERED), outcome kinds and disagreements
(each appended to .cache/oracle/disagreements.jsonl with both answers as it is found). ``JOBS``
processes share the states, each with its own oracle and seed. Progress goes to stderr every 10,000
states of a job; an interrupted run (Ctrl-C, or SIGTERM to its job processes) still prints the table of
the states done."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.oracle.client import MISSING, Oracle, oracle_path
from tests.oracle.compare import agrees
from tests.oracle.coverage import EXPECTED, features
from tests.oracle.product import allocate
from tests.oracle.states import states

PROGRESS_EVERY = 10_000
REPORT = Path(__file__).resolve().parents[2] / ".cache" / "oracle" / "disagreements.jsonl"


Tally = tuple[Counter[str], Counter[str], list[dict[str, Any]]]
"""Feature coverage, upstream outcome kinds, disagreements."""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(path: Path, count: int, start: int, job: int) -> Tally:
    """``count`` states from seed ``start`` against one oracle process of its own. SIGTERM ends it early
    like Ctrl-C (a run started in the background ignores SIGINT)."""
    signal.signal(signal.SIGTERM, _interrupt)
    with Oracle(path) as oracle:
        return _compare(oracle, count, start, job)


def _compare(oracle: Oracle, count: int, start: int, job: int) -> Tally:
    covered: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    disagreements: list[dict[str, Any]] = []

    @seed(start)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(state=states())
    def one(state: dict[str, Any]) -> None:
        expected = oracle.ask(state)
        actual = allocate(state)
        covered.update(features(state))
        kinds[f"upstream {expected['kind']}"] += 1
        if kinds.total() % PROGRESS_EVERY == 0:
            print(
                f"job {job}: {kinds.total()} states, {len(disagreements)} disagreements",
                file=sys.stderr,
                flush=True,
            )
        if not agrees(oracle, state, expected, actual):
            found = {"state": state, "upstream": expected, "product": actual}
            disagreements.append(found)
            with REPORT.open("ab") as report:  # one write per line: the jobs append side by side
                report.write((json.dumps(found) + "\n").encode())

    try:
        one()
    except KeyboardInterrupt:
        print(f"job {job} interrupted: the states done so far", file=sys.stderr)
    return covered, kinds, disagreements


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--states", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="processes, each with its own oracle and seed")
    args = parser.parse_args()
    path = oracle_path()
    if path is None:
        print(MISSING, file=sys.stderr)
        return 2
    began = time.monotonic()
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("")
    shares = [args.states // args.jobs + (i < args.states % args.jobs) for i in range(args.jobs)]
    seeds = [args.seed * 1000 + i for i in range(args.jobs)]
    with ProcessPoolExecutor(args.jobs) as pool:
        tallies = list(pool.map(run, [path] * args.jobs, shares, seeds, range(args.jobs)))
    covered = sum((t[0] for t in tallies), Counter())
    kinds = sum((t[1] for t in tallies), Counter())
    disagreements = [d for t in tallies for d in t[2]]
    seconds = time.monotonic() - began
    total = sum(kinds.values())
    rate = total / seconds
    print(f"{total} states (seed {args.seed}, {args.jobs} jobs) in {seconds:.0f} s, {rate:.0f} states/s\n")
    width = max(map(len, [*covered, *kinds, *EXPECTED]))
    print(f"{'feature'.ljust(width)}  states")
    for name in sorted({*covered, *EXPECTED}):
        print(f"{name.ljust(width)}  {covered[name]}" + ("  NOT COVERED" if not covered[name] else ""))
    print(f"\n{'outcome'.ljust(width)}  states")
    for name, n in sorted(kinds.items()):
        print(f"{name.ljust(width)}  {n}")
    print(f"\ndisagreements: {len(disagreements)}" + (f" (see {REPORT})" if disagreements else ""))
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
