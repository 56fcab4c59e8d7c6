"""A few SVG shapes, written as text: the console's pictures are drawn on the server, with no
library to fetch and nothing that changes between runs (the same input gives the same bytes,
so a checked-in picture can be compared with the code that draws it).

Every text and attribute is escaped here, so a hostile event type or reason is drawn, not run.
"""

from xml.sax.saxutils import escape, quoteattr

FONT = 12  # px; the width of a text is estimated from its length in a monospace font
CHAR_WIDTH = FONT * 0.62

STYLE = """
svg.outbox-picture { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #fff; }
.lane-head rect { fill: #f0f4f8; stroke: #47617a; }
.lane-head text { font-weight: bold; fill: #1f3347; }
.lifeline { stroke: #9aaabb; stroke-dasharray: 4 4; }
.arrow { stroke: #1f3347; fill: none; marker-end: url(#arrow); }
.label { fill: #1f3347; }
.when { fill: #6b7c8d; }
.count { fill: #2d6a2d; }
.timer .arrow { stroke: #7a4fa3; marker-end: url(#arrow-timer); }
.timer .label { fill: #5e3b80; }
.dead .arrow { stroke: #c0392b; marker-end: url(#cross); }
.dead .label, .dead .count, .dead-count { fill: #c0392b; font-weight: bold; }
.replay .arrow { stroke: #d35400; stroke-dasharray: 6 3; }
.replay .label { fill: #a04000; }
.faint { opacity: 0.4; }
.publisher { fill: #1f3347; }
.timer .publisher { fill: #7a4fa3; }
.pending .arrow { stroke: #9aaabb; stroke-dasharray: 2 4; marker-end: url(#arrow-pending); }
.pending .label { fill: #6b7c8d; font-style: italic; }
.nobody .arrow { stroke: #9aaabb; stroke-dasharray: 2 4; marker-end: url(#arrow-pending); }
"""

DEFS = """<defs>
<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">\
<path d="M0,0 L10,5 L0,10 z" fill="#1f3347"/></marker>
<marker id="arrow-timer" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">\
<path d="M0,0 L10,5 L0,10 z" fill="#7a4fa3"/></marker>
<marker id="arrow-pending" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">\
<path d="M0,0 L10,5 L0,10 z" fill="#9aaabb"/></marker>
<marker id="cross" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="10" markerHeight="10" orient="auto">\
<path d="M1,1 L9,9 M9,1 L1,9" stroke="#c0392b" stroke-width="2"/></marker>
</defs>"""


def number(value: float) -> str:
    """Coordinates with one decimal, written the same way every time."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def text_width(text: str) -> float:
    return len(text) * CHAR_WIDTH


def box(x: float, y: float, width: float, height: float, *, cls: str = "") -> str:
    klass = f" class={quoteattr(cls)}" if cls else ""
    return f'<rect x="{number(x)}" y="{number(y)}" width="{number(width)}" height="{number(height)}" rx="6"{klass}/>'


def text(x: float, y: float, content: str, *, cls: str = "label", anchor: str = "start") -> str:
    return (
        f'<text x="{number(x)}" y="{number(y)}" class={quoteattr(cls)} text-anchor="{anchor}">{escape(content)}</text>'
    )


def line(x1: float, y1: float, x2: float, y2: float, *, cls: str = "arrow") -> str:
    return f'<line x1="{number(x1)}" y1="{number(y1)}" x2="{number(x2)}" y2="{number(y2)}" class={quoteattr(cls)}/>'


def dot(x: float, y: float, *, r: float = 4, cls: str = "publisher") -> str:
    return f'<circle cx="{number(x)}" cy="{number(y)}" r="{number(r)}" class={quoteattr(cls)}/>'


def loop(x: float, y: float, *, width: float = 28, height: float = 14, cls: str = "arrow") -> str:
    """An arrow a lane sends to itself: out to the right and back, `height` lower."""
    d = f"M{number(x)},{number(y)} h{number(width)} v{number(height)} h{number(-width + 4)}"
    return f'<path d="{d}" class={quoteattr(cls)}/>'


def group(content: list[str], *, cls: str = "", href: str | None = None, **data: str) -> str:
    attributes = f" class={quoteattr(cls)}" if cls else ""
    attributes += "".join(f" data-{k.replace('_', '-')}={quoteattr(str(v))}" for k, v in sorted(data.items()))
    body = "".join(content)
    if href:
        body = f"<a href={quoteattr(href)}>{body}</a>"
    return f"<g{attributes}>{body}</g>"


def document(width: float, height: float, body: list[str], *, cls: str, title: str) -> str:
    """A whole SVG element, its style embedded (it is shown inline, or saved as a file)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class={quoteattr("outbox-picture " + cls)} '
        f'width="{number(width)}" height="{number(height)}" viewBox="0 0 {number(width)} {number(height)}" '
        f'role="img"><title>{escape(title)}</title><style>{STYLE}</style>{DEFS}' + "".join(body) + "</svg>\n"
    )
