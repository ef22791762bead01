"""Just enough SVG for the report's charts, as strings: every text is escaped, every number is written
with a fixed precision, so the same chart is the same bytes."""

from __future__ import annotations

import math
from html import escape


def esc(text: object) -> str:
    """Text or an attribute value, safe inside HTML and SVG (model names and paths are user input)."""
    return escape(str(text), quote=True)


def num(value: float) -> str:
    """A coordinate: one decimal, no trailing zero ('12', '12.5')."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def svg(width: float, height: float, body: list[str], *, label: str, css_class: str = "chart") -> str:
    """A standalone inline SVG element; `label` is what a screen reader says for it."""
    return (f'<svg class="{esc(css_class)}" xmlns="http://www.w3.org/2000/svg" width="{num(width)}" '
            f'height="{num(height)}" viewBox="0 0 {num(width)} {num(height)}" role="img" aria-label="{esc(label)}">'
            + "".join(body) + "</svg>")


def rect(x: float, y: float, width: float, height: float, fill: str, *, title: str = "",
         css_class: str = "") -> str:
    """A filled rectangle; `title` becomes its hover tooltip."""
    cls = f' class="{esc(css_class)}"' if css_class else ""
    shape = f'<rect{cls} x="{num(x)}" y="{num(y)}" width="{num(width)}" height="{num(height)}" fill="{esc(fill)}"'
    return f"{shape}><title>{esc(title)}</title></rect>" if title else f"{shape}/>"


def text(x: float, y: float, content: object, *, anchor: str = "start", css_class: str = "") -> str:
    cls = f' class="{esc(css_class)}"' if css_class else ""
    return f'<text{cls} x="{num(x)}" y="{num(y)}" text-anchor="{anchor}">{esc(content)}</text>'


def line(x1: float, y1: float, x2: float, y2: float, *, css_class: str) -> str:
    return f'<line class="{esc(css_class)}" x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}"/>'


# Average advance of a character of the report's 10-11 px sans-serif labels, bold digits included.
CHAR_WIDTH = 6.3


def fits(label: str, width: float) -> bool:
    """Whether `label` fits in `width` pixels (an estimate: the viewer's font is not known here)."""
    return len(label) * CHAR_WIDTH <= width


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick interval (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(factor * power for factor in (1.0, 2.0, 5.0, 10.0) if raw <= factor * power * (1 + 1e-9))
