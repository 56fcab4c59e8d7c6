"""A listing piped into `head` (or any reader that stops early) ends quietly: the kernel's commands
that write to stdout stop with exit status 141, as a shell tool killed by SIGPIPE does, and no traceback."""

import os
import select
import sys

CLOSED_PIPE_STATUS = 128 + 13  # 128 + SIGPIPE: what a shell reports for `yes | head`


class QuietWhenStdoutCloses:
    """A BaseCommand mixin: a BrokenPipeError from stdout whose reader has gone ends the command quietly."""

    def execute(self, *args, **options):
        try:
            result = super().execute(*args, **options)
            self.stdout.flush()  # what is still buffered meets the closed pipe here, not at the interpreter's exit
            return result
        except BrokenPipeError:
            out = getattr(self.stdout, "_out", self.stdout)
            if not reader_gone(out):
                raise  # a socket's, say: not stdout's to hide
            # As Python's docs advise ("Note on SIGPIPE"): devnull in its place, so the flush at exit is quiet too.
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
            sys.exit(CLOSED_PIPE_STATUS)


def reader_gone(stream) -> bool:
    """`stream` is a pipe (or socket) whose reading end is closed: poll says POLLERR for its writer."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no file descriptor (a StringIO), or a closed one
        return False
