"""docs/performance.md's plots are drawn by bench/plots.py from the numbers the page's tables quote: the
committed SVGs must be what the script draws now, well-formed, and every plotted number must be on the page."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from bench import plots
from bench.svg import nice_ticks
from tests.conftest import ROOT

PAGE = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")


def test_the_committed_plots_are_fresh(capsys):
    assert plots.main(["--check"]) == 0, capsys.readouterr().err


def test_each_plot_is_svg_and_is_shown_on_the_page():
    for name, text in plots.plots().items():
        root = ET.fromstring(text)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert root.findall(".//{http://www.w3.org/2000/svg}text"), name
        assert f"](img/{name})" in PAGE, f"docs/performance.md does not show img/{name}"


def test_the_plotted_numbers_are_the_pages():
    for values in plots.ENGINE_P50.values():
        assert all(f"{v:.3f}" in PAGE for v in values)
    assert all(f"{v:,}" in PAGE for v in plots.CHECK_RATE)
    assert all(str(v) in PAGE for v in plots.SERVER_RATIO[1])
    assert all(f"| {v} |" in PAGE or f"{v}" in PAGE for _, values in plots.REPORT_STAGES for v in values)


def test_ticks_cover_the_range_in_round_steps():
    assert nice_ticks(0, 0.167) == [0, 0.05, 0.1, 0.15, 0.2]
    assert nice_ticks(0, 3623) == [0, 1000, 2000, 3000, 4000]
