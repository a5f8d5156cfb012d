"""The README and docs/ hold: every relative link reaches a file and heading, and every shell command in a
fenced ``sh`` / ``console`` block either runs here (the offline demo: curl against a served example,
``dra-extender explain|simulate|validate --state``) or, when it needs a cluster or a long run, names
things that exist (make targets of the Makefile, arguments the CLI's parser accepts, modules, repository
paths, and a small allowlist of cluster tools)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import io
import json
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.cli.flags import parser as cli_parser
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEMO_ADDRESS = "127.0.0.1:8888"

# Programs the docs use that need a cluster, a registry or a clone of something else: only their
# repository paths are checked.
CLUSTER_TOOLS = {"kubectl", "helm", "kind", "docker", "git", "less", "grep", "cd", "export"}
# Scripts of the dra-example-driver clone the kind walkthrough runs in (after its `cd`).
EXAMPLE_DRIVER_SCRIPTS = {"./demo/build-driver.sh", "./demo/clusters/kind/create-cluster.sh"}
# Made by `make loadtest` in its own environment.
BUILT_TOOLS = {".cache/loadtest-venv/bin/locust"}
REPO_PATH = re.compile(r"^@?(charts|manifests|examples|loadtests|bench|e2e|tests|app|allocator)/")
CLI = {"dra-extender", ".venv/bin/dra-extender"}
OFFLINE_VERBS = {"explain", "simulate", "validate"}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def outside_fences(text: str) -> Iterator[str]:
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield line


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in outside_fences(page.read_text()):
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> Iterator[str]:
    for line in outside_fences(page.read_text()):
        line = re.sub(r"``.*?``|`[^`]*`", "", line)  # code spans hold no links
        yield from re.findall(r"\]\(([^)\s]+)\)", line)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, broken


def test_the_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text()
    listed = set(re.findall(r"\]\(([\w-]+\.md)\)", index))
    assert listed == {p.name for p in PAGES if p.parent.name == "docs" and p.name != "README.md"}


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@dataclass(frozen=True)
class Command:
    page: str
    block: int  # the fenced block's number in the page: a `cd` lasts until its end
    line: str  # one logical line: continuations joined, heredoc bodies dropped
    shown: str = ""  # the answer the page shows on the comment line after it (`# {...}`), if any

    def __str__(self) -> str:
        return f"{self.page}: {self.line}"


def shell_blocks(page: Path) -> Iterator[list[str]]:
    block: list[str] | None = None
    for line in page.read_text().splitlines():
        if block is None:
            if re.fullmatch(r"```(sh|console)", line.strip()):
                block = []
        elif line.strip() == "```":
            yield block
            block = None
        else:
            block.append(line)


def commands() -> list[Command]:
    found = []
    for page in PAGES:
        for number, block in enumerate(shell_blocks(page)):
            heredoc_end = None
            pending = ""
            for raw in block:
                if heredoc_end is not None:
                    heredoc_end = None if raw.strip() == heredoc_end else heredoc_end
                    continue
                if raw.rstrip().endswith("\\"):
                    pending += raw.rstrip()[:-1] + " "
                    continue
                line = (pending + raw).strip()
                pending = ""
                if m := re.search(r"<<-?'?(\w+)'?", line):
                    heredoc_end = m.group(1)
                if re.match(r"# [{[]", line) and found and found[-1].block == number:
                    found[-1] = dataclasses.replace(found[-1], shown=line.removeprefix("# "))
                elif line and not line.startswith("#"):
                    found.append(Command(str(page.relative_to(ROOT)), number, line))
    return found


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of a line (split at ``&&``, ``||``, ``;``, ``|``, ``&``)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    parts: list[list[str]] = [[]]
    for token in lexer:
        if token in {"&&", "||", ";", "|", "&"}:
            parts.append([])
        elif token.startswith("<<"):
            break
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def runs_offline(words: list[str]) -> bool:
    if words[0] == "curl":
        return any(DEMO_ADDRESS in w for w in words)
    return (
        words[0] in CLI
        and len(words) > 1
        and words[1] in OFFLINE_VERBS
        and "--state" in words
        and not {"--context", "--kubeconfig"} & set(words)
    )


def makefile_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w.-]+):(?!=)", makefile, re.MULTILINE))


@functools.cache
def cli_help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli_parser().parse_args([command, "--help"] if command else ["--help"])
    return out.getvalue()


def problems_of(words: list[str], in_example_driver: bool) -> list[str]:
    """Why a command the tests cannot run would not work, as far as this repository can tell."""
    program, args = words[0], words[1:]
    while "=" in program and not program.startswith(("/", ".")):  # VAR=value command
        program, args = args[0], args[1:]
    found = []
    if program == "make":
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        found += [f"no make target {t}" for t in targets if t not in makefile_targets()]
    elif program in CLI:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                cli_parser().parse_args(args)
        except SystemExit as exit:  # --version and --help exit 0
            if exit.code:
                found.append(f"dra-extender refuses {args}")
        # argparse takes a prefix of a flag too: the docs must spell each one as --help does.
        listed = cli_help(args[0]) if args and not args[0].startswith("-") else cli_help("")
        flags = [a.partition("=")[0] for a in args if re.match(r"-[-\w]", a)]
        found += [f"dra-extender {args} --help has no {f}" for f in flags if not re.search(rf"{f}\b", listed)]
    elif program == ".venv/bin/python" and args[:1] == ["-m"]:
        if importlib.util.find_spec(args[1]) is None:
            found.append(f"no module {args[1]}")
    elif program in EXAMPLE_DRIVER_SCRIPTS:
        if not in_example_driver:
            found.append(f"{program} runs only in the dra-example-driver clone")
    elif program not in CLUSTER_TOOLS | BUILT_TOOLS:
        found.append(f"{program}: neither run by the tests nor allowed")
    if not in_example_driver:
        paths = [a.lstrip("@") for a in args if REPO_PATH.match(a)]
        found += [f"no path {p}" for p in paths if not (ROOT / p).exists()]
    return found


def test_every_command_the_tests_cannot_run_names_things_that_exist():
    problems = []
    checked = 0
    in_clone, block = False, None
    for command in commands():
        if (command.page, command.block) != block:
            in_clone, block = False, (command.page, command.block)
        for words in simple_commands(command.line):
            if words[0] == "cd":
                in_clone = words[1:2] == ["dra-example-driver"]
            if not runs_offline(words):
                checked += 1
                problems += [f"{command}: {p}" for p in problems_of(words, in_clone)]
    assert checked > 10
    assert not problems, "\n".join(problems)


def matches(answer: object, shown: object) -> bool:
    """``answer`` is what the page shows, where the page elides a string as "..."."""
    if shown == "...":
        return isinstance(answer, str)
    if isinstance(shown, dict):
        return (
            isinstance(answer, dict)
            and answer.keys() == shown.keys()
            and all(matches(answer[k], v) for k, v in shown.items())
        )
    if isinstance(shown, list):
        return isinstance(answer, list) and len(answer) == len(shown) and all(map(matches, answer, shown))
    return answer == shown


@pytest.fixture(scope="module")
def demo_port() -> Iterator[int]:
    """The example cluster served as `make run` serves it, on a free loopback port."""
    (port,) = free_ports(1)
    cli = Path(sys.executable).parent / "dra-extender"
    argv = [str(cli), "serve", "--state", "examples/cluster", "--port", str(port)]
    server = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"serve exited: {server.stderr.read().decode()}")
                time.sleep(0.1)
        else:
            pytest.fail("serve did not get ready in a minute")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()


def test_every_offline_command_runs(demo_port: int):
    ran = 0
    env_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    for command in commands():
        parts = simple_commands(command.line)
        if not runs_offline(parts[0]):
            continue
        line = command.line.replace(DEMO_ADDRESS, f"127.0.0.1:{demo_port}")
        line = re.sub(r"\bcurl -s\b", "curl -sf", line)  # an HTTP error fails the command
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=ROOT,
            env={"PATH": env_path, "HOME": str(ROOT / ".cache")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stderr[-2000:]}"
        assert result.stdout.strip(), f"{command}: printed nothing"
        if command.shown:
            assert matches(json.loads(result.stdout), json.loads(command.shown)), (
                f"{command}: {result.stdout}"
            )
        ran += 1
    assert ran >= 8
