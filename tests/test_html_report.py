"""report.html: self-contained (no network, untrusted text escaped), and in a real headless Chromium:
no console errors, no request leaves the file, images load, columns sort, the sample browser filters.

``LAMPE_EVAL_REPORT_HTML=path/report.html`` checks that page too (``make table-ppl-smoke`` does it)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from lampe_eval.report import BootstrapSettings, build_report
from lampe_eval.report.html import csp_source_hash
from tests.browser import Browser, find_chromium
from tests.reportstore import GRID_TASKS, HOSTILE, write_grid_store, write_store


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


def csp_of(page: str) -> dict[str, list[str]]:
    """The page's Content-Security-Policy (its one meta tag): directive -> sources."""
    metas = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert len(metas) == 1, metas
    policy = {}
    for directive in metas[0].split(";"):
        name, *sources = directive.split()
        policy[name] = sources
    return policy


def own_scripts(page: str) -> list[str]:
    """The text of each script block that runs (every one but the JSON data block)."""
    blocks = re.findall(r"<script\b([^>]*)>(.*?)</script>", page, flags=re.S)
    return [body for attributes, body in blocks if 'type="application/json"' not in attributes]


def rehashed(page: str) -> str:
    """The page with its CSP allowing the script it now holds (a test that edits the script)."""
    (script,) = own_scripts(page)
    (old,) = csp_of(page)["script-src"]
    return page.replace(old, csp_source_hash(script))


def test_the_csp_runs_only_the_pages_own_script_and_there_are_no_inline_handlers(report_page):
    page = report_page.read_text(encoding="utf-8")
    policy = csp_of(page)
    assert policy["default-src"] == ["'none'"] and policy["img-src"] == ["data:"]
    # no 'unsafe-inline' (nor eval, nor any origin) for scripts: only the hash of the page's own script
    (script,) = own_scripts(page)
    assert policy["script-src"] == [csp_source_hash(script)]
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    assert policy["script-src"] == [f"'sha256-{digest}'"] and script.strip().startswith("(function")
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'none'"]
    # nothing in the markup would need 'unsafe-inline' for scripts: no on...= handler, no javascript: URL
    markup = re.sub(r'<script type="application/json" id="sample-data">.*?</script>', "", page, flags=re.S)
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", markup, flags=re.I)
    assert "javascript:" not in markup.lower()


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
    broken.write_text(rehashed(page.replace(good, bad)), encoding="utf-8")
    with pytest.raises(AssertionError):
        check_report_page(browser, broken)


@needs_chromium
def test_an_edited_script_does_not_run_under_the_old_hash(browser, report_page, tmp_path):
    page = report_page.read_text(encoding="utf-8")
    edited = tmp_path / "report.html"
    edited.write_text(page.replace("render();\n})();", "render();\n  window.__edited = 1;\n})();"), "utf-8")
    browser.open(edited)
    assert browser.run("typeof window.__edited") == "undefined"
    assert browser.run("document.querySelectorAll('#sample-rows tr').length") == 0  # nothing ran
    assert any("Content Security Policy" in error for error in browser.errors()), browser.errors()
    edited.write_text(rehashed(edited.read_text("utf-8")), "utf-8")
    browser.open(edited)
    assert browser.run("window.__edited") == 1 and browser.errors() == []


# Injected as raw markup, as if escaping had been bypassed: handlers, a script element, a javascript: link.
INJECTED = """
(function () {
  var violations = [];
  document.addEventListener("securitypolicyviolation", function (event) {
    violations.push(event.violatedDirective);
  });
  var box = document.createElement("div");
  box.innerHTML = '<img src="x" onerror="document.title = \\'pwned\\'; window.__pwned = 1">'
    + '<img src="data:image/png;base64,AAAA" onerror="window.__pwned = 2">'
    + '<svg><image href="x" onload="window.__pwned = 3"></image></svg>'
    + '<div id="evil-click" onclick="window.__pwned = 4">x</div>'
    + '<a id="evil-link" href="javascript:window.__pwned = 5">x</a>';
  document.querySelector("main").appendChild(box);
  var script = document.createElement("script");
  script.textContent = "window.__pwned = 6";
  document.body.appendChild(script);
  document.getElementById("evil-click").click();
  document.getElementById("evil-link").click();
  return new Promise(function (done) {
    setTimeout(function () {
      done({title: document.title, pwned: typeof window.__pwned, violations: violations});
    }, 500);
  });
})()
"""


@needs_chromium
def test_an_injected_inline_handler_does_not_run_and_the_page_still_works(browser, report_page):
    """Should escaping ever be bypassed, the CSP is the second wall: markup put into the loaded page
    (through the DevTools protocol, which the CSP does not govern) runs nothing of its own."""
    browser.open(report_page)
    title = browser.run("document.title")
    result = browser.run(INJECTED)
    assert result["pwned"] == "undefined" and result["title"] == title != "pwned", result
    assert set(result["violations"]) >= {"script-src-attr", "script-src-elem"}, result
    # the page's own script still runs: the filters and the sorting respond
    rows = browser.run(FILTER % ('{"method": "rope", "length": ""}', ""))
    assert rows["rows"] and {row[3] for row in rows["rows"]} == {"rope"}
    board = "document.querySelector(\"table.sortable[data-key='leaderboard']\")"
    assert browser.run(SORT % (board, 1))["state"] == "ascending"
    assert browser.run("typeof window.__pwned") == "undefined"
    blocked = [e for e in browser.errors() if "Content Security Policy" not in e]
    assert blocked == [], blocked  # the only errors are the CSP's reports of what it refused


SMOKE_PAGE = os.environ.get("LAMPE_EVAL_REPORT_HTML")


@needs_chromium
@pytest.mark.skipif(
    not SMOKE_PAGE, reason="LAMPE_EVAL_REPORT_HTML names no page (make table-ppl-smoke sets it)"
)
def test_a_given_report_in_chromium(browser):
    page = Path(SMOKE_PAGE or "")
    assert page.is_file(), f"{page} does not exist"
    check_report_page(browser, page)


# ------------------------------------------------------------------------------ the sample budget
def sample_data(page: str) -> dict:
    block = re.search(r'<script type="application/json" id="sample-data">\n(.*?)\n</script>', page, re.S)
    assert block
    return json.loads(block.group(1))


def test_the_sample_budget_keeps_the_most_informative_samples_of_every_cell(tmp_path):
    from lampe_eval.report.data import load_records
    from lampe_eval.report.html_samples import choose_samples, row_bytes

    store = write_grid_store(tmp_path / "grid", ("rope", "lampe"), (4096, 8192), GRID_TASKS[:3], samples=60)
    records = load_records([store])
    assert choose_samples(records, 10**9) == (records, [])  # within the budget: every sample
    budget = 150_000
    held, partial = choose_samples(records, budget)
    assert 0 < sum(row_bytes(r) for r in held) <= budget < sum(row_bytes(r) for r in records)
    # every cell the same number of samples (one more for some: the last round), each with both methods
    per_cell: dict[tuple, set[str]] = {}
    for r in held:
        per_cell.setdefault((r.task, r.length), set()).add(str(r.sample_id))
    counts = [len(ids) for ids in per_cell.values()]
    assert len(per_cell) == 6 and max(counts) - min(counts) <= 1 and len(held) == 2 * sum(counts)
    # the samples the methods disagree on come first, then those both failed
    for (task, length), ids in per_cell.items():
        scores = {
            (r.method, str(r.sample_id)): r.scores["string_match_all"]
            for r in records
            if (r.task, r.length) == (task, length)
        }
        disagree = {i for m, i in scores if scores[("rope", i)] != scores[("lampe", i)]}
        assert ids <= disagree or disagree <= ids, (task, length)
    # what is left out, per (model, benchmark, method, task, length): [..., total, held]
    assert {tuple(p[:5]) for p in partial} == {
        ("llama3-8b-instruct", "ruler", m, t, n)
        for m in ("rope", "lampe")
        for t in GRID_TASKS[:3]
        for n in (4096, 8192)
    }
    assert sum(p[5] for p in partial) == len(records) and sum(p[6] for p in partial) == len(held)


def test_report_html_stays_within_its_budget_as_the_store_grows(tmp_path):
    sizes = {}
    for samples in (40, 160):
        store = write_grid_store(
            tmp_path / f"s{samples}", ("rope", "lampe"), (4096, 8192), GRID_TASKS[:2], samples
        )
        out = tmp_path / f"r{samples}"
        build_report([store], out, formats=["html"], plots=False, bootstrap=None, sample_bytes=400_000)
        page = (out / "report.html").read_text(encoding="utf-8")
        data = sample_data(page)
        block = len(json.dumps(data, ensure_ascii=True))
        assert block <= 400_000 and block / len(data["rows"]) < 2_000  # bytes per embedded record bounded
        sizes[samples] = len(page.encode("utf-8"))
        total = 2 * 2 * 2 * samples
        if samples == 40:
            assert "Every sample of the report (320) is in this page." in page and not data["partial"]
        else:
            held = len(data["rows"])
            assert held < total and f"This page holds {held} of the {total} samples" in page
            assert f"The other {total - held} are in {store}/**/records.jsonl" in page
    assert sizes[160] < 400_000 + 100_000  # the page: the budget and the tables, not 4x the small one


@pytest.fixture(scope="module")
def big_page(tmp_path_factory) -> tuple[Path, int]:
    """report.html of 6,000 records holding about a sixth of them; (page, records per method x length)."""
    root = tmp_path_factory.mktemp("big")
    tasks = GRID_TASKS[:4]
    store = write_grid_store(root / "results", ("rope", "selfextend", "lampe"), (4096, 8192), tasks, 250)
    build_report(
        [store], root / "report", formats=["html"], bootstrap=BootstrapSettings(resamples=200),
        sample_bytes=1_000_000,
    )  # fmt: skip
    return root / "report" / "report.html", len(tasks) * 250


@needs_chromium
def test_the_sample_browser_of_a_big_store_says_what_is_in_records_jsonl(browser, big_page):
    page, per_selection = big_page
    data = sample_data(page.read_text(encoding="utf-8"))
    facts = check_report_page(browser, page)
    assert facts["total"] == len(data["rows"]) < 6000 and set(facts["methods"]) == {
        "rope",
        "selfextend",
        "lampe",
    }
    everything = browser.run(FILTER % ('{"method": "", "length": ""}', ""))
    assert everything["count"].endswith(
        f"; {6000 - facts['total']} more of this selection are in records.jsonl (not in this page)"
    )
    for method in facts["methods"]:
        for length in ("4096", "8192"):
            shown = browser.run(FILTER % (f'{{"method": "{method}", "length": "{length}"}}', ""))
            held = int(shown["count"].split()[0])
            more = int(shown["count"].split("; ")[-1].split()[0])
            assert held > 0 and held + more == per_selection, shown["count"]
            assert {row[3] for row in shown["rows"]} == {method}
    searched = browser.run(FILTER % ('{"method": "lampe", "length": ""}', "niah"))
    assert "not in this page, not searched" in searched["count"]
    holding = browser.run("document.getElementById('sample-holding').textContent")
    assert f"This page holds {facts['total']} of the 6000 samples" in holding
    assert browser.errors() == []
