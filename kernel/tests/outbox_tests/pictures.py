"""Reading a drawn picture back: where its texts and loops are, by the estimate the drawing uses."""

import re
from xml.etree import ElementTree

from outbox.console.svg import FONT, text_width

SVG = "{http://www.w3.org/2000/svg}"
Box = tuple[float, float, float, float]  # left, top, right, bottom


def extents(drawn: str) -> tuple[float, list[tuple[str, Box]], list[Box]]:
    """The viewBox's width, each text with its estimated box, and each loop's box."""
    root = ElementTree.fromstring(drawn)
    texts = []
    for element in root.iter(f"{SVG}text"):
        x, y, content = float(element.get("x")), float(element.get("y")), element.text or ""
        width = text_width(content)
        left = {"start": x, "middle": x - width / 2, "end": x - width}[element.get("text-anchor")]
        texts.append((content, (left, y - FONT, left + width, y + 4)))
    loops = []
    for path in root.iter(f"{SVG}path"):  # a loop: out, down, back (the markers' paths do not match)
        found = re.fullmatch(r"M([\d.]+),([\d.]+) h([\d.]+) v([\d.]+) h-[\d.]+", path.get("d"))
        if found:
            x, y, w, h = map(float, found.groups())
            loops.append((x, y, x + w, y + h))
    return float(root.get("viewBox").split()[2]), texts, loops


def assert_every_text_fits_and_clears_the_loops(drawn: str) -> None:
    width, texts, loops = extents(drawn)
    for content, (left, top, right, bottom) in texts:
        assert left >= 0 and right <= width, f"{content!r} runs from {left} to {right}, the picture is {width} wide"
        for x1, y1, x2, y2 in loops:
            assert right <= x1 or x2 <= left or bottom <= y1 or y2 <= top, f"{content!r} is drawn over a loop"
