"""A small SVG writer for the performance page's plots: line charts over sizes or rounds, and bar charts.

matplotlib is not a dependency, and a plot of a dozen numbers needs none: this writes plain SVG 1.1
(text, lines, rectangles, polylines) that GitHub renders inline, deterministically (same numbers, same
bytes), so a test can tell a committed plot from one regenerated out of the numbers in ``bench/plots.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 160, 40, 60  # margins: the legend sits on the right
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
FONT = 'font-family="Helvetica, Arial, sans-serif"'


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y); x is an index for categorical axes


def _num(value: float) -> str:
    """Coordinates with two decimals at most, so output is stable across platforms."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.3g}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten."""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    ticks, value = [], start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


class Canvas:
    """One chart: a plot area with axes, titles and a legend; ``svg()`` returns the document."""

    def __init__(self, title: str, x_label: str, y_label: str) -> None:
        self.parts: list[str] = []
        self.title, self.x_label, self.y_label = title, x_label, y_label
        self.plot_w = WIDTH - LEFT - RIGHT
        self.plot_h = HEIGHT - TOP - BOTTOM

    def text(self, x: float, y: float, content: str, *, size: int = 12, anchor: str = "middle",
             rotate: bool = False, weight: str = "normal") -> None:
        turn = f' transform="rotate(-90 {_num(x)} {_num(y)})"' if rotate else ""
        self.parts.append(
            f'<text x="{_num(x)}" y="{_num(y)}" {FONT} font-size="{size}" font-weight="{weight}" '
            f'text-anchor="{anchor}"{turn}>{escape(content)}</text>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, *, colour: str = "#000", width: float = 1,
             dash: str = "") -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" stroke="{colour}" '
            f'stroke-width="{_num(width)}"{extra}/>'
        )

    def frame(self, y_ticks: Sequence[float], y_min: float, y_max: float) -> None:
        self.text(WIDTH / 2, 22, self.title, size=15, weight="bold")
        self.text(LEFT + self.plot_w / 2, HEIGHT - 14, self.x_label)
        self.text(18, TOP + self.plot_h / 2, self.y_label, rotate=True)
        for tick in y_ticks:
            y = self.y(tick, y_min, y_max)
            self.line(LEFT, y, LEFT + self.plot_w, y, colour="#ddd")
            self.text(LEFT - 6, y + 4, _label(tick), size=11, anchor="end")
        self.line(LEFT, TOP, LEFT, TOP + self.plot_h)
        self.line(LEFT, TOP + self.plot_h, LEFT + self.plot_w, TOP + self.plot_h)

    def y(self, value: float, low: float, high: float) -> float:
        return TOP + self.plot_h - (value - low) / (high - low) * self.plot_h

    def legend(self, names: Sequence[tuple[str, str]]) -> None:
        for i, (name, colour) in enumerate(names):
            y = TOP + 10 + i * 20
            x = LEFT + self.plot_w + 14
            self.parts.append(f'<rect x="{x}" y="{y - 9}" width="12" height="12" fill="{colour}"/>')
            self.text(x + 18, y + 1, name, size=11, anchor="start")

    def svg(self) -> str:
        body = "\n".join(self.parts)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}">\n<rect width="100%" height="100%" fill="#fff"/>\n{body}\n</svg>\n'
        )


def line_chart(title: str, x_label: str, y_label: str, series: Sequence[Series], *,
               x_names: Sequence[str] | None = None, target: tuple[str, float] | None = None) -> str:
    """Lines with markers; ``x_names`` makes the x axis categorical (points' x are indices);
    ``target`` draws a dashed horizontal line (a goal) with its name."""
    canvas = Canvas(title, x_label, y_label)
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points] + ([target[1]] if target else [])
    y_ticks = nice_ticks(0, max(ys))
    y_min, y_max = y_ticks[0], y_ticks[-1]
    x_min, x_max = (0.0, float(len(x_names) - 1)) if x_names else (min(xs), max(xs))
    span = (x_max - x_min) or 1.0

    def x_at(value: float) -> float:
        pad = 20
        return LEFT + pad + (value - x_min) / span * (canvas.plot_w - 2 * pad)

    canvas.frame(y_ticks, y_min, y_max)
    if x_names:
        for i, name in enumerate(x_names):
            canvas.text(x_at(i), TOP + canvas.plot_h + 18, name, size=11)
    else:
        for tick in nice_ticks(x_min, x_max):
            if x_min <= tick <= x_max:
                canvas.text(x_at(tick), TOP + canvas.plot_h + 18, _label(tick), size=11)
    if target:
        y = canvas.y(target[1], y_min, y_max)
        canvas.line(LEFT, y, LEFT + canvas.plot_w, y, colour="#555", dash="6 4")
        canvas.text(LEFT + canvas.plot_w - 4, y - 5, target[0], size=11, anchor="end")
    names = []
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        names.append((s.name, colour))
        points = " ".join(f"{_num(x_at(x))},{_num(canvas.y(y, y_min, y_max))}" for x, y in s.points)
        canvas.parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in s.points:
            cx, cy = x_at(x), canvas.y(y, y_min, y_max)
            canvas.parts.append(f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="3.5" fill="{colour}"/>')
            canvas.text(cx, cy - 8, _label(y), size=10)
    canvas.legend(names)
    return canvas.svg()


def bar_chart(title: str, x_label: str, bars: Sequence[tuple[str, Sequence[float]]],
              groups: Sequence[str]) -> str:
    """Horizontal bars, one row per name, one bar per group in each row (e.g. training and inference)."""
    canvas = Canvas(title, x_label, "")
    high = max(v for _, values in bars for v in values)
    ticks = nice_ticks(0, high)
    label_w = 190
    left = LEFT + label_w - 60
    width = canvas.plot_w - label_w + 60
    canvas.text(WIDTH / 2, 22, title, size=15, weight="bold")
    canvas.text(left + width / 2, HEIGHT - 14, x_label)
    row_h = canvas.plot_h / len(bars)
    bar_h = row_h * 0.8 / len(groups)
    for tick in ticks:
        x = left + tick / ticks[-1] * width
        canvas.line(x, TOP, x, TOP + canvas.plot_h, colour="#ddd")
        canvas.text(x, TOP + canvas.plot_h + 16, _label(tick), size=11)
    for r, (name, values) in enumerate(bars):
        y0 = TOP + r * row_h + row_h * 0.1
        canvas.text(left - 6, y0 + row_h * 0.4 + 4, name, size=11, anchor="end")
        for g, value in enumerate(values):
            colour = COLOURS[g % len(COLOURS)]
            w = value / ticks[-1] * width
            y = y0 + g * bar_h
            canvas.parts.append(
                f'<rect x="{_num(left)}" y="{_num(y)}" width="{_num(w)}" height="{_num(bar_h - 1)}" fill="{colour}"/>'
            )
            canvas.text(left + w + 4, y + bar_h - 3, _label(value), size=10, anchor="start")
    canvas.line(left, TOP, left, TOP + canvas.plot_h)
    canvas.legend([(g, COLOURS[i % len(COLOURS)]) for i, g in enumerate(groups)])
    return canvas.svg()
