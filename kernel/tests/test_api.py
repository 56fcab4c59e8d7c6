"""outbox.api, the kernel's public surface: each name there, documented, loaded when first used."""

import subprocess
import sys

import pytest

import outbox.api
import outbox.ops
from outbox.api import SURFACE


@pytest.mark.parametrize("name", sorted(SURFACE))
def test_each_name_of_the_surface_is_there_and_says_its_promise(name):
    value = getattr(outbox.api, name)

    assert value is not None and (value.__doc__ or "").strip(), f"outbox.api.{name} has no docstring"
    assert sorted(outbox.api.__all__) == sorted(SURFACE)


def test_a_name_that_is_not_on_the_surface_is_refused_with_the_list():
    with pytest.raises(AttributeError, match="outbox.api has no 'Relay': the kernel's surface is .*publish"):
        outbox.api.Relay  # noqa: B018


def test_a_contexts_events_module_may_import_it_before_djangos_apps_are_ready():
    """Only what is used is loaded: declaring contracts needs pydantic, not the models."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from outbox.api import Event, Reader, upcaster; "
            "print(sorted(m for m in sys.modules if m.startswith('outbox')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert loaded.returncode == 0, loaded.stderr
    assert (
        loaded.stdout.strip()
        == "['outbox', 'outbox.api', 'outbox.core', 'outbox.core.contracts', 'outbox.core.surfaces']"
    )


def test_the_contexts_surface_keeps_to_messaging_twenty_names_at_most():
    assert len(outbox.api.__all__) <= 20


@pytest.mark.parametrize("name", sorted(outbox.ops.SURFACE))
def test_each_name_the_deployable_uses_is_there_and_says_its_promise(name):
    value = getattr(outbox.ops, name)

    assert value is not None and (value.__doc__ or "").strip(), f"outbox.ops.{name} has no docstring"
    assert sorted(outbox.ops.__all__) == sorted(outbox.ops.SURFACE)
