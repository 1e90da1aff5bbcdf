"""report.html: self-contained (no network, untrusted text escaped), and in a real headless Chromium:
no console errors, no request leaves the file, images load, columns sort, the sample browser filters.

``LAMPE_EVAL_REPORT_HTML=path/report.html`` checks that page too (``make table-ppl-smoke`` does it)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lampe_eval.report import build_report
from tests.browser import Browser, find_chromium
from tests.reportstore import HOSTILE, write_store


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html")
    store = write_store(root / "results")
    report = build_report(
        [store], root / "report", formats=["md", "html"], papers=["ppl"], as_model="smollm2-135m"
    )
    page = root / "report" / "report.html"
    assert page in report.files
    return page


def test_the_page_is_self_contained_and_escapes_what_results_hold(report_page):
    page = report_page.read_text(encoding="utf-8")
    # nothing to fetch: every src/href is inline data or an anchor, no external script, style or font
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page)
    assert links and all(link.startswith(("data:image/png;base64,", "#")) for link in links), links
    assert not re.search(r"<link\b|<iframe\b|@import|url\(|https?://", page)
    assert "default-src 'none'" in page  # and the page forbids any other load
    # the records' text never becomes markup: the hostile prediction is nowhere in the page as it is
    assert HOSTILE not in page and "<img src=x" not in page
    assert page.count("<script") == 2  # the JSON block and the page's own script
    # the tables: intervals, whiskers, significance marks and the paper comparison
    assert 'class="ci-text"' in page and '<svg class="whisker"' in page and 'class="ref"' in page
    assert "paper row" in page and "∉" in page or "∈" in page
    # plots and the position maps of the methods in the results
    assert page.count("data:image/png;base64,") >= 3 and "position maps: smollm2-135m" in page
    assert "lampe-eval show-prompt --model smollm2-135m --bench fake" in page


def test_positions_are_drawn_for_the_methods_in_the_results(report_page):
    png = report_page.parent / "positions-smollm2-135m.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


CHROMIUM, WHY_NOT = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=WHY_NOT)


@pytest.fixture(scope="module")
def browser():
    with Browser(CHROMIUM) as b:
        yield b


# In the page: click a header of a sortable table, return the column's sort keys in row order.
SORT = """
(function (table, column) {
  var heads = table.tHead.rows[table.tHead.rows.length - 1].cells;
  heads[column].click();
  return {
    state: heads[column].getAttribute("aria-sort"),
    keys: Array.prototype.map.call(table.tBodies[0].rows, function (row) {
      return row.cells[column].getAttribute("data-sort");
    }),
  };
})(%s, %d)
"""

# Set the sample filters (name -> option value; "" is all), return the rows shown and the count line.
FILTER = """
(function (wanted, search) {
  Object.keys(wanted).forEach(function (name) {
    var select = document.getElementById("filter-" + name);
    select.value = wanted[name];
    select.dispatchEvent(new Event("change"));
  });
  var box = document.getElementById("filter-text");
  box.value = search;
  box.dispatchEvent(new Event("input"));
  return {
    count: document.getElementById("sample-count").textContent,
    rows: Array.prototype.map.call(document.querySelectorAll("#sample-rows tr.sample"), function (tr) {
      return Array.prototype.map.call(tr.cells, function (td, i) { return i < 7 ? td.textContent : ""; });
    }),
  };
})(%s, %r)
"""

OPTIONS = """Array.prototype.map.call(document.querySelectorAll("#filter-%s option"), function (o) {
  return o.value; }).filter(function (v) { return v !== ""; })"""


def numbers(keys: list[str]) -> list[float]:
    """The column's numeric sort keys in order ([] for a text column)."""
    try:
        return [float(k) for k in keys if k not in ("", None)]
    except ValueError:
        return []


def check_report_page(browser: Browser, page: Path) -> dict:
    """What every report.html must do in the browser; returns facts the caller may check further."""
    browser.open(page)
    assert browser.errors() == []
    assert all(url.startswith(("file:", "data:")) for url in browser.requests()), browser.requests()
    images = browser.run(
        "Array.prototype.map.call(document.images, function (i) { return i.complete && i.naturalWidth; })"
    )
    assert images and all(width and width > 1 for width in images)
    # sorting: the first numeric column of each sortable table, ascending then descending (empty last)
    tables = browser.run("document.querySelectorAll('table.sortable').length")
    assert tables >= 2
    sorted_columns = 0
    for t in range(tables):
        selector = f"document.querySelectorAll('table.sortable')[{t}]"
        width = browser.run(f"{selector}.tHead.rows[{selector}.tHead.rows.length - 1].cells.length")
        for column in range(1, width):
            up = browser.run(SORT % (selector, column))
            values = numbers(up["keys"])
            if len(values) < 2 or len(set(values)) < 2:
                continue
            assert up["state"] == "ascending" and values == sorted(values), (selector, column, up)
            assert up["keys"][: len(values)] == [k for k in up["keys"] if k], "empty cells go last"
            down = browser.run(SORT % (selector, column))
            assert down["state"] == "descending" and numbers(down["keys"]) == sorted(values, reverse=True)
            sorted_columns += 1
            break
    assert sorted_columns >= 2
    # filtering: each method alone, then the method at one length, then all again
    everything = browser.run(FILTER % ("{}", ""))
    total = int(everything["count"].split(" of ")[1].split()[0])
    assert everything["rows"] and everything["count"].startswith(f"{total} of {total}")
    methods = browser.run(OPTIONS % "method")
    assert len(methods) >= 2
    lengths = browser.run(OPTIONS % "length")
    for method in methods:
        shown = browser.run(FILTER % (f'{{"method": "{method}", "length": ""}}', ""))
        assert shown["rows"] and {row[3] for row in shown["rows"]} == {method}, method
        # the method's samples, length by length: one length each, adding up to the method's count
        parts = 0
        for length in lengths:
            narrow = browser.run(FILTER % (f'{{"method": "{method}", "length": "{length}"}}', ""))
            shown_lengths, shown_methods = (
                {row[2] for row in narrow["rows"]},
                {row[3] for row in narrow["rows"]},
            )
            assert len(shown_lengths) <= 1 and shown_methods <= {method}
            parts += int(narrow["count"].split()[0])
        assert parts == int(shown["count"].split()[0])
    again = browser.run(FILTER % ('{"method": "", "length": ""}', ""))
    assert again["count"] == everything["count"]
    # a sample's details: the prompt excerpt and the command that prints it whole
    details = browser.run(
        "(function () { var d = document.querySelector('#sample-rows details'); d.open = true;"
        " return d.textContent; })()"
    )
    assert "lampe-eval show-prompt" in details and "prediction" in details
    assert browser.errors() == []
    return {"total": total, "methods": methods}


@needs_chromium
def test_report_in_chromium_renders_sorts_and_filters(browser, report_page, tmp_path):
    facts = check_report_page(browser, report_page)
    # the synthetic store: 3 + 4 methods, 12 samples per job
    assert facts["total"] == 3 * 2 * 2 * 12 + 4 * 2 * 12 and set(facts["methods"]) >= {"rope", "lampe", "dca"}
    one = browser.run(FILTER % ('{"method": "lampe", "task": "alpha", "length": "1024"}', ""))
    assert len(one["rows"]) == 12 and one["count"].startswith("12 of ")
    found = browser.run(FILTER % ('{"method": "", "task": "", "length": ""}', "gold 7 <b>"))
    assert found["rows"] and all(row[4].endswith("-7") for row in found["rows"])
    # the hostile prediction is text in the page, never markup that runs
    assert browser.run("typeof window.__pwned") == "undefined"
    browser.run(FILTER % ('{"method": "rope"}', "alpha-0"))  # the samples whose prediction is hostile
    shown = browser.run(
        "(function () { var all = document.querySelectorAll('#sample-rows details');"
        " for (var i = 0; i < all.length; i++) { all[i].open = true; }"
        " return document.getElementById('sample-rows').textContent; })()"
    )
    assert "</script><script>window.__pwned = 1</script>" in shown
    # the leaderboard sorted by score, best first for a higher-is-better column is the user's click away
    board = "document.querySelector(\"table.sortable[data-key='leaderboard']\")"
    column = browser.run(
        f"Array.prototype.map.call({board}.tHead.rows[0].cells,"
        " function (c) { return c.textContent; }).indexOf('score')"
    )
    keys = browser.run(SORT % (board, column))["keys"]
    assert numbers(keys) == sorted(numbers(keys))
    shot = browser.screenshot(tmp_path / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert browser.errors() == []


BREAKAGES = {  # what the check must catch: (text of the page's script, its broken replacement)
    "script error": ("render();\n})();", "render();\n  null.boom;\n})();"),
    "no sorting": ("return ascending ? compare(x, y) : compare(y, x);", "return 0;"),
    "no filtering": ("String(row[at[name]]) !== wanted[name]", "false"),
}


@needs_chromium
@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_browser_check_fails_on_a_broken_page(browser, report_page, tmp_path, breakage):
    good, bad = BREAKAGES[breakage]
    page = report_page.read_text(encoding="utf-8")
    assert page.count(good) == 1
    broken = tmp_path / "report.html"
    broken.write_text(page.replace(good, bad), encoding="utf-8")
    with pytest.raises(AssertionError):
        check_report_page(browser, broken)


SMOKE_PAGE = os.environ.get("LAMPE_EVAL_REPORT_HTML")


@needs_chromium
@pytest.mark.skipif(
    not SMOKE_PAGE, reason="LAMPE_EVAL_REPORT_HTML names no page (make table-ppl-smoke sets it)"
)
def test_a_given_report_in_chromium(browser):
    page = Path(SMOKE_PAGE or "")
    assert page.is_file(), f"{page} does not exist"
    check_report_page(browser, page)
