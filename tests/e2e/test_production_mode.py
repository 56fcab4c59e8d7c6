"""Production mode as the README runs it: gunicorn, DJANGO_DEBUG=0, the static files collected
and served by the web process itself (WhiteNoise), so the console has its styles."""

import re
import secrets
import subprocess
import sys
import urllib.request

import pytest

from tests.processes import MANAGE, a_free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def fetch(url: str, **headers) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()
    except OSError:
        return 0, {}, b""


def test_the_console_has_its_styles_under_gunicorn_with_debug_off(env, tmp_path):
    production = {
        **env,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_SECURE_SSL_REDIRECT": "0",  # plain HTTP on 127.0.0.1, as the local recipe runs it
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
    }
    subprocess.run([*MANAGE, "collectstatic", "--noinput", "--verbosity", "0"], env=production, check=True, timeout=120)
    port = a_free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        env=production,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: fetch(f"{base}/healthz")[0] == 200, timeout=60, what="gunicorn to answer")
        status, _, page = fetch(f"{base}/admin/login/")
        assert status == 200
        hashed = re.search(rb'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', page)
        assert hashed, page[:2000]  # the page links the file by its content hash: cacheable for ever

        status, headers, _ = fetch(base + hashed.group(1).decode(), **{"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-type"].startswith("text/css")
        assert headers.get("content-encoding") == "gzip"  # compressed at collectstatic
        assert "max-age=315360000" in headers.get("cache-control", "")
        status, headers, _ = fetch(f"{base}/static/admin/css/base.css")
        assert status == 200 and headers["content-type"].startswith("text/css")
    finally:
        server.terminate()
        server.wait(30)
