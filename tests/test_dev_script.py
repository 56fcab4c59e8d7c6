"""The `dev` script's help: every command named with what it does, on stdout for --help (exit 0)
and on stderr for a command it does not know (exit 2)."""

import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.servers_unused  # starts nothing and installs nothing: CI runs it once

DEV = Path(settings.BASE_DIR) / "dev"
COMMANDS = ("up", "test", "test-kernel", "test-pgbouncer", "bench", "lint")


def dev(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(DEV), *arguments], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("asked", ["--help", "-h", "help"])
def test_help_names_each_command_with_what_it_does(asked):
    ran = dev(asked)

    assert (ran.returncode, ran.stderr) == (0, "")
    for command in COMMANDS:
        assert re.search(rf"^  {command} .*\S", ran.stdout, flags=re.MULTILINE), command


def test_a_command_it_does_not_know_gets_the_help_on_stderr():
    ran = dev("tset")

    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.startswith("usage: ./dev COMMAND") and "test-kernel" in ran.stderr
