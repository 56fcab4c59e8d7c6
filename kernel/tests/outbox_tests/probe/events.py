from outbox.core.contracts import Event


class ProbePinged(Event):
    """`fail` maps a subscriber to how its handler misbehaves: once, always or reject."""

    type = "probe.pinged"
    version = 1
    n: int
    fail: dict[str, str] = {}


class ProbeEchoed(Event):
    type = "probe.echoed"
    version = 1
    n: int


class ProbeUndoRequested(Event):
    type = "probe.undo_requested"
    version = 1
    n: int
    fail: dict[str, str] = {}


class ProbeSent(Event):
    """Something a handler sends out of the database: once to a subscriber with outside effects
    declared, and once to one that (carelessly) declares none."""

    type = "probe.sent"
    version = 1
    n: int


class ProbeSentCarelessly(Event):
    type = "probe.sent_carelessly"
    version = 1
    n: int
