"""What ships: the wheel holds the deployable and the contexts with their templates (the kernel is
a distribution of its own, which the project requires),
and none of the workshop (benchmark, chaos rig, simulation, scratch databases) or the tests."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.conf import settings

from tests.factories import PRODUCT_PACKAGES

pytestmark = pytest.mark.servers_unused  # CI runs it once, in the embedded step


def test_the_built_wheel_ships_the_product_and_no_workshop(tmp_path):
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(
        settings.BASE_DIR,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "var", "build", "*.egg-info", "__pycache__", ".*_cache"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path), str(source)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {Path(name).parts[0] for name in names if not Path(name).parts[0].endswith(".dist-info")}

    assert top_level == PRODUCT_PACKAGES
    workshop = [n for n in names if any(w in n for w in ("bench", "chaos", "simulat", "scratch", "harness"))]
    assert workshop == []
    assert not [n for n in names if n.startswith("outbox/")]  # the kernel ships as its own (test_kernel_distribution)
    assert "drones/templates/admin/drones/drone/change_list.html" in names
    assert "delivery_project/templates/admin/console_index.html" in names
    assert {"drones/static/drones/fleet_map.js", "drones/static/drones/leaflet/leaflet.js"} <= set(names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    runtime = [
        line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines() if line.startswith("Requires-Dist")
    ]
    assert not [line for line in runtime if "rich" in line and "extra ==" not in line]  # only the workshop needs it
    # The project requires it, with the embedded broker its two commands run on and both servers' clients.
    assert "Requires-Dist: django-outbox-choreography[embedded,rabbitmq,redis]==0.1.0" in runtime
