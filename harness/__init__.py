"""The workshop: the benchmark, the chaos rig, the load simulation and their scratch databases.

Development only. It lives beside the deployable in the checkout and is left out of the built
wheel (`pyproject.toml` lists the packages that ship), like Zulip's `zilencer` and `tools/`:
its commands start servers, create and drop whole databases and fire thousands of requests,
nothing a production `manage.py help` should offer. Settings install it when it is importable.
No product package imports it (an import-linter contract).
"""
