"""Which came first in a story: causes before their effects, then the clock."""

import heapq
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Item = TypeVar("Item")


def in_causal_order(
    items: Sequence[Item],
    *,
    name: Callable[[Item], Hashable | None],
    cause: Callable[[Item], Hashable | None],
    when: Callable[[Item], object],
) -> list[Item]:
    """Each item after its cause (when that is among them); of those whose cause is placed, the
    earliest first (ties in the given order): a clock running ahead moves an effect, never a cause."""
    position: dict[Hashable | None, int] = {}
    for i, item in enumerate(items):
        position.setdefault(name(item), i)
    position.pop(None, None)
    effects: dict[int, list[int]] = {}
    ready: list = []
    for i, item in enumerate(items):
        parent = position.get(cause(item))
        if parent is None or parent == i:
            heapq.heappush(ready, (when(item), i))
        else:
            effects.setdefault(parent, []).append(i)
    ordered: list[Item] = []
    while ready:
        _, i = heapq.heappop(ready)
        ordered.append(items[i])
        for effect in effects.pop(i, ()):
            heapq.heappush(ready, (when(items[effect]), effect))
    if len(ordered) < len(items):  # a cycle of causes (corrupt rows): shown all the same, last
        placed = {id(item) for item in ordered}
        ordered += sorted((item for item in items if id(item) not in placed), key=when)  # type: ignore[arg-type]
    return ordered
