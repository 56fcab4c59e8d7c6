"""A public module of the kernel whose names load on first use (PEP 562).

`outbox.api` and `outbox.ops` each list their names as name -> (module, attribute); importing
either imports nothing of Django until a name is used, so a context's `events.py` may import it
before the apps are ready.
"""

import sys
from importlib import import_module


class Surface:
    """The names `module` offers, each loaded from where it lives the first time it is asked for."""

    def __init__(self, module: str, names: dict[str, tuple[str, str]], *, offers: str) -> None:
        self.module, self.names, self.offers = module, names, offers

    def load(self, name: str) -> object:
        """The value of `name`, kept on the module once loaded; an AttributeError naming what is offered."""
        try:
            where, attribute = self.names[name]
        except KeyError:
            raise AttributeError(f"{self.module} has no {name!r}: {self.offers} {', '.join(self.names)}") from None
        value = getattr(import_module(where), attribute)
        setattr(sys.modules[self.module], name, value)
        return value
