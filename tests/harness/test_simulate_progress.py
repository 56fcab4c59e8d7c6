"""`manage.py simulate`'s progress: bars redrawn on a terminal, plain lines into a pipe; one of the two, never both."""

import re
import time
from io import StringIO

import pytest

pytestmark = pytest.mark.servers_unused


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_progress_is_bars_on_a_terminal_and_plain_lines_into_a_pipe(monkeypatch, terminal):
    from harness.management.commands import simulate

    monkeypatch.setattr(simulate, "PIPED_PROGRESS_SECONDS", 0.0)  # a plain line at every update, here
    out = Terminal() if terminal else StringIO()
    command = simulate.Command(stdout=out)

    with command._progress(verbosity=1) as progress:
        update = command._bar(progress, "submitted", 3, time.monotonic())
        for done in (1, 2, 3):
            update(done)

    text = out.getvalue()
    bars, lines = "3/3" in text, re.findall(r"^submitted: \d of 3 after \d+ s$", text, re.MULTILINE)
    assert (bars, len(lines)) == ((True, 0) if terminal else (False, 3)), text
