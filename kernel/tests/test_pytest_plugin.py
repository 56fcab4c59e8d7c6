"""The kernel's pytest plugin (outbox_pytest) gives a run queues of its own, each xdist worker its
own beside them, unless the environment names a prefix; pytest runs here as a project would run it."""

import json
import os
import subprocess
import sys

import pytest

SAYS_ITS_PREFIX = """
import json, os, pathlib, uuid

def test_one():
    write()

def test_two():
    write()

def write():
    said = {"prefix": os.environ.get("OUTBOX_QUEUE_PREFIX"), "worker": os.environ.get("PYTEST_XDIST_WORKER")}
    (pathlib.Path(__file__).parent / f"{uuid.uuid4()}.json").write_text(json.dumps(said))
"""
OF_THIS_RUN = ("OUTBOX_QUEUE_PREFIX", "OUTBOX_QUEUE_PREFIX_OF", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID")


def prefixes_seen(tmp_path, *options: str, **environment: str) -> list[dict]:
    (tmp_path / "test_prefix.py").write_text(SAYS_ITS_PREFIX)
    env = {name: value for name, value in os.environ.items() if name not in OF_THIS_RUN}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-q", *options, "test_prefix.py"],
        cwd=tmp_path,
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]


@pytest.mark.parametrize("processes", ["0", "2"])
def test_a_run_gets_a_queue_prefix_of_its_own_and_each_worker_one_beside_it(tmp_path, processes):
    seen = prefixes_seen(tmp_path, "-n", processes)

    assert len(seen) == 2 and all(said["prefix"].startswith("test-") for said in seen)
    if processes == "0":
        assert seen[0]["prefix"] == seen[1]["prefix"]
    else:  # one session's prefix, and each worker's beside it
        assert {said["prefix"].removesuffix(f"{said['worker']}-") for said in seen} == {seen[0]["prefix"][:14]}
        assert {said["prefix"] for said in seen} == {f"{seen[0]['prefix'][:14]}{w}-" for w in ("gw0", "gw1")}


def test_a_prefix_the_environment_names_is_kept(tmp_path):
    seen = prefixes_seen(tmp_path, "-n", "0", OUTBOX_QUEUE_PREFIX="ci-42-")

    assert [said["prefix"] for said in seen] == ["ci-42-", "ci-42-"]
