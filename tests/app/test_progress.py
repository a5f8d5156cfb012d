"""``app.cli.progress``: a bar on a terminal, nothing elsewhere."""

from __future__ import annotations

import io

from app.cli.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal():
    stream = _Terminal()
    with progress_bar(3, "scheduling 3 pending pod(s)", stream) as advance:
        for _ in range(3):
            advance()
    drawn = stream.getvalue()
    assert "scheduling 3 pending pod(s)" in drawn and "3/3" in drawn


def test_progress_bar_is_silent_off_a_terminal():
    stream = io.StringIO()
    with progress_bar(3, "scheduling", stream) as advance:
        advance()
    assert stream.getvalue() == ""
