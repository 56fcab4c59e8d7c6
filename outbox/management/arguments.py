"""Types for the management commands' arguments (argparse's `type=`), so that a count below its
least, a number out of its range or a word where a number belongs is refused before the command
does anything, in Django's one line: `manage.py prune_messages: error: argument --batch-size:
must be at least 1, not -5` with exit status 2 (through `call_command`, a CommandError saying the same).

The kernel's own commands' (a project's commands have their own: the kernel does not export its
command line's helpers)."""

import argparse
import math
from collections.abc import Callable


def whole_number(*, at_least: int = 1, at_most: int | None = None) -> Callable[[str], int]:
    """A whole number from `at_least` (a count: 1) up to `at_most`, if given."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < at_least:
            raise argparse.ArgumentTypeError(f"must be at least {at_least}, not {value}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"must be at most {at_most}, not {value}")
        return value

    return parse


def number(
    *, at_least: float | None = None, above: float | None = None, at_most: float | None = None
) -> Callable[[str], float]:
    """A finite number (never nan or inf, which float() accepts) of at least `at_least`, or more
    than `above` (seconds, days, rates: `above=0`), and up to `at_most` (days past which a date
    would overflow)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if at_least is not None and value < at_least:
            raise argparse.ArgumentTypeError(f"must be at least {at_least:g}, not {value:g}")
        if above is not None and value <= above:
            raise argparse.ArgumentTypeError(f"must be more than {above:g}, not {value:g}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"must be at most {at_most:g}, not {value:g}")
        return value

    return parse


def comma_separated(item: Callable[[str], int | float]) -> Callable[[str], list]:
    """Several values in one argument, `1,2,4`, each checked by `item`."""

    def parse(text: str) -> list:
        return [item(part) for part in text.split(",")]

    return parse


# A TCP port to listen on.
port = whole_number(at_least=1, at_most=65535)
# Days from now, for an expiry or a retention window: a century at most keeps the date a date.
duration_in_days = number(above=0, at_most=36_500)
duration_in_days.__doc__ = "Days from now (more than 0, a century at most): an expiry or a retention window."


def kernel_database(parser: argparse.ArgumentParser, *, what: str, by_default: str = "") -> None:
    """`--database`, for a command that works on one database's kernel tables (a relay's, the sweep's,
    the pruning's): `default`, or one a context was put on (OUTBOX_CONTEXT_DATABASES). The command
    then calls `outbox.core.working_database.serving` with it; with `by_default`, it finds its own."""
    from outbox.core.working_database import kernel_databases  # the settings: read when the command is built

    parser.add_argument(
        "--database",
        choices=kernel_databases(),
        default=None if by_default else "default",
        help=f"The database whose {what}: " + (by_default or "run it once for each database a context is on."),
    )
