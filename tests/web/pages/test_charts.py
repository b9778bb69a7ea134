"""``app/web/pages/charts.py``: series → SVG markup, a pure function. The markup is parsed as
XML (well-formed, every text escaped), bars are measured, and the accessible names checked."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from app.web.pages.charts import BOTTOM, HEIGHT, TOP, Point, bar_chart, bar_svg

SVG = "{http://www.w3.org/2000/svg}"
PLOT = HEIGHT - TOP - BOTTOM


def parse(markup: str) -> ET.Element:
    # our own markup, parsed to prove it well-formed
    return ET.fromstring(str(markup).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))  # noqa: S314


def usd(v: float) -> str:
    return f"${v:.2f}"


def bars(svg: ET.Element) -> list[ET.Element]:
    return svg.findall(f"{SVG}rect")


def test_bars_scale_to_the_largest_value_with_a_tooltip_each():
    svg = parse(bar_svg([Point("2026-11-01", 2.0), Point("2026-11-02", 1.0), Point("2026-11-03", 0.0)],
                        title="Cost per day", fmt=usd, css_class="status-running"))
    assert svg.get("role") == "img" and "status-running" in svg.get("class", "")
    heights = [float(b.get("height")) for b in bars(svg)]
    assert heights == [PLOT, PLOT / 2, 0.0]
    bottoms = {round(float(b.get("y")) + float(b.get("height")), 2) for b in bars(svg)}
    assert bottoms == {HEIGHT - BOTTOM}  # every bar stands on the baseline
    assert [b.find(f"{SVG}title").text for b in bars(svg)] == [
        "2026-11-01: $2.00", "2026-11-02: $1.00", "2026-11-03: $0.00"]
    xs = [float(b.get("x")) for b in bars(svg)]
    assert xs == sorted(xs)  # oldest first, left to right


def test_the_chart_is_named_by_its_title_and_described_by_its_numbers():
    svg = parse(bar_svg([Point("a", 1), Point("b", 3)], title="Sessions per day", fmt=lambda v: f"{v:g}"))
    first, second = svg.get("aria-labelledby").split()
    assert svg.find(f"{SVG}title").get("id") == first and svg.find(f"{SVG}title").text == "Sessions per day"
    desc = svg.find(f"{SVG}desc")
    assert desc.get("id") == second
    assert desc.text == "2 values from a to b; total 4; highest 3 on b."


def test_text_is_escaped_everywhere():
    evil = '<script>alert("x")</script>&'
    markup = str(bar_chart([Point(evil, 1)], title=f"T {evil}", fmt=lambda v: evil, value_name=evil,
                           css_class='"><x'))
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    assert '"><x' not in markup
    svg = parse(bar_svg([Point(evil, 1)], title=evil, fmt=lambda v: evil))
    assert svg.find(f"{SVG}title").text == evil  # parsed back: the same text, so it was escaped, not cut


def test_empty_zero_and_odd_values_draw_a_flat_chart_and_say_so():
    empty = parse(bar_svg([], title="Nothing", fmt=usd))
    assert bars(empty) == [] and empty.find(f"{SVG}desc").text == "No data."
    zeros = parse(bar_svg([Point("a", 0), Point("b", 0)], title="Zeros", fmt=usd))
    assert [float(b.get("height")) for b in bars(zeros)] == [0.0, 0.0]
    assert zeros.find(f"{SVG}desc").text == "All 2 values are $0.00."
    odd = parse(bar_svg([Point("a", -5), Point("b", math.nan), Point("c", math.inf), Point("d", 4)],
                        title="Odd", fmt=lambda v: str(v)))
    assert [float(b.get("height")) for b in bars(odd)] == [0.0, 0.0, 0.0, PLOT]


def test_a_tiny_value_stays_visible():
    svg = parse(bar_svg([Point("a", 1000), Point("b", 0.001)], title="Tiny", fmt=usd))
    assert float(bars(svg)[1].get("height")) == 1.0


def test_a_year_of_days_fits_the_width():
    points = [Point(f"d{i}", i % 7) for i in range(365)]
    svg = parse(bar_svg(points, title="Year", fmt=usd))
    assert len(bars(svg)) == 365
    last = bars(svg)[-1]
    assert float(last.get("x")) + float(last.get("width")) <= float(svg.get("viewBox").split()[2])


def test_bar_chart_adds_its_sentence_and_the_numbers_as_a_table():
    markup = str(bar_chart([Point("2026-11-01", 1.5), Point("2026-11-02", 0)], title="Cost per day", fmt=usd,
                           value_name="Cost (USD)", chart_id="chart-cost"))
    figure = parse(markup)
    assert figure.get("id") == "chart-cost" and figure.get("class") == "chart"
    assert figure.find("h2").text == "Cost per day"
    assert figure.find("p").text == "2 values from 2026-11-01 to 2026-11-02; total $1.50; highest $1.50 on 2026-11-01."
    rows = [[td.text for td in tr.findall("td")] for tr in figure.iter("tr") if tr.findall("td")]
    assert rows == [["2026-11-01", "$1.50"], ["2026-11-02", "$0.00"]]
    assert figure.find("details/summary").text == "Cost per day as a table"
    assert figure.find("details/div").get("class") == "table-scroll"
