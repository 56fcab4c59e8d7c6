"""A listing piped into a reader that stops early (`manage.py dead_letters list --all | head`) ends
quietly with 141, as a shell tool killed by SIGPIPE does: no BrokenPipeError traceback."""

import subprocess

import pytest

from tests.processes import MANAGE

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "command",
    [["dead_letters", "list", "--all"], ["dead_letters", "list", "--groups"], ["show_routes"], ["export_asyncapi"]],
)
def test_a_listing_whose_reader_has_gone_ends_quietly(env, command):
    listing = subprocess.Popen([*MANAGE, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listing.stdout.close()  # the reader gone before the first line, as `head` is after its tenth
    _, errors = listing.communicate(timeout=120)

    assert (listing.returncode, errors.decode()) == (141, "")
