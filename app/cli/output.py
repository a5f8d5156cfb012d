"""The CLI's output: tables (rich on a terminal or not, else plain aligned text with the same columns),
and JSON or YAML documents (``-o json|yaml``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TextIO

import orjson
import yaml

__all__ = ["OUTPUT_FORMATS", "Output", "Table", "add_output_flag", "positive_int", "write_document"]


class Table:
    """A titled table rendered with rich when available, else as aligned plain text."""

    def __init__(self, title: str, columns: Sequence[str]) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []

    def add(self, *cells: object) -> None:
        self.rows.append(["" if c is None else str(c) for c in cells])


class Output:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        try:
            from rich.console import Console
        except ImportError:  # rich is optional: plain text keeps the CLI usable without it
            self._console = None
        else:
            self._console = Console(
                file=out, width=None if out.isatty() else 160, highlight=False, soft_wrap=False
            )

    def line(self, text: str = "") -> None:
        if self._console is not None:
            self._console.print(text, markup=False)
        else:
            self.out.write(text + "\n")

    def table(self, table: Table) -> None:
        if self._console is not None:
            from rich.table import Table

            rendered = Table(title=table.title, title_justify="left", show_lines=False)
            for column in table.columns:
                rendered.add_column(column, overflow="fold")
            for row in table.rows:
                rendered.add_row(*row)
            self._console.print(rendered)
            return
        widths = [len(c) for c in table.columns]
        for row in table.rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
        self.out.write(table.title + "\n")
        for row in [table.columns, ["-" * w for w in widths], *table.rows]:
            self.out.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip() + "\n"
            )
        self.out.write("\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


OUTPUT_FORMATS = ("table", "json", "yaml")


def add_output_flag(sub: argparse.ArgumentParser, default: str) -> None:
    """``-o/--output table|json|yaml``, the same on every command that prints a result (as kubectl);
    ``default`` is the command's own (simulate keeps JSON for the scripts that read it)."""
    sub.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default=default,
        help=f"table: readable tables; json or yaml: one document, the same content (default {default})",
    )


def write_document(document: Any, output: str, out: TextIO) -> None:
    """``document`` (plain JSON data) as JSON (orjson, indent 2) or YAML (block style, keys in order)."""
    if output == "yaml":
        out.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    else:
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
