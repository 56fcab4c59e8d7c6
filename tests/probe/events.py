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
