"""The report lint (``nicrig.analysis.lint``): a sound report passes, and each rule fails the report that breaks it.

Every report the test suite renders or writes is linted by ``conftest.py``'s
``reports_keep_their_rules``; the demo's report is linted by ``make demo``
itself, which fails when it breaks a rule. These tests make sure each rule can fail: one
sound report (a noiseless latency run read to a simulated bus clock, a stream
run, the references), rendered once, then broken one way at a time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from nicrig.analysis import lint, render, report, throughput
from test_analysis_throughput import _points as points

SIZES = np.arange(64, 1473, 128)
#: The renderers themselves: the suite's lint wraps them around each test, and these reports are broken on purpose.
TO_HTML, TO_JSON = render.to_html, render.to_json


def _noiseless_latency(rng: np.random.Generator) -> np.ndarray:
    """A simulated rig's round trips: on a line, a bus clock (30 ns) or two off now and then, whole ns."""
    rows = []
    for r in range(5):
        for p, k in enumerate(rng.permutation(SIZES.size)):
            level = 52.25 + 0.0311 * (int(SIZES[k]) - 64)
            rtt = level + 0.03 * rng.choice([0, 0, 0, 0, 1, 2], 20)
            rows += [(int(SIZES[k]), r, p, i, int(round(v * 1000))) for i, v in enumerate(rtt)]
    return np.array(rows, dtype=[("size_bytes", "<i4"), ("round", "<i4"), ("position", "<i4"), ("seq", "<i4"),
                                 ("rtt_ns", "<i8")])


@pytest.fixture(scope="module")
def sound() -> tuple[str, str]:
    """One report as HTML and JSON (rendered without the suite's own lint, which this module exercises)."""
    rng = np.random.default_rng(1)
    latency = report.latency_section("lat.h5", _noiseless_latency(rng), {}, report.Options(), False,
                                     {"bus": "pci32-33", "nic": "sk9843"})
    rows = [{"point": k, "round": r, "size_bytes": 1472, "spacing_us": sp, "sent": 1000, "received": 1000,
             "user_rate_mbps": rate + r, "user_rate_ci95_mbps": 0.5, "remote_interrupts": 100,
             "remote_cpu_busy_pct": 40.0}
            for k, (r, sp, rate) in enumerate((r, sp, rate) for r in range(3) for sp, rate in ((12.5, 940.0),
                                                                                                (20.0, 588.0)))]
    stream = report.stream_section("bw.h5", throughput.size_curves(points(rows)), 1e9)
    sections = [latency, stream]
    sections.append(report.reference_section(report.Options(), sections))
    rep = report.new_report("t", [{"path": "lat.h5", "kind": "nicrig-results"}], sections, [])
    return TO_HTML(rep), TO_JSON(rep)


def _broken(sound_json: str, change) -> list[str]:
    doc = json.loads(sound_json)
    change(doc)
    return lint.problems(lint.from_json(json.dumps(doc)))


def _table(doc: dict, title: str) -> dict:
    return next(t for s in doc["sections"] for t in s["tables"] if t["title"].startswith(title))


def test_a_sound_report_keeps_its_rules_in_html_and_json(sound) -> None:
    html, js = sound
    assert lint.problems(lint.from_html(html)) == []
    assert lint.problems(lint.from_json(js)) == []
    page, doc = lint.from_html(html), lint.from_json(js)
    assert [len(s.sentences) for s in page.sections] == [len(s.sentences) for s in doc.sections] != [0, 0, 0]
    fits = next(t for t in page.sections[0].tables if t.title.startswith("RTT = intercept"))
    assert fits.uncertainty["slope (us/byte)"] == "slope ± 95% (us/byte)" and fits.resolution_u["slope (us/byte)"]


def test_a_value_with_more_digits_than_its_uncertainty_allows_fails(sound) -> None:
    def more_digits(doc):
        fits = _table(doc, "RTT = intercept")
        fits["rows"][0][6] = f"{fits['raw_rows'][0][6]:.16f}"  # 50.2683391608391474
    said = _broken(sound[1], more_digits)
    assert any("is not rounded to the place of its uncertainty" in p for p in said)
    assert any("shows otherwise" in p for p in said)  # and the sentence quoting that cell no longer agrees

    def long_decimal(doc):
        _table(doc, "RTT per response size")["rows"][0][2] = "100.0000012"
    assert any("significant digits and no uncertainty" in p for p in _broken(sound[1], long_decimal))


def test_an_uncertainty_below_the_stated_resolution_fails(sound) -> None:
    def below(doc):
        fits = _table(doc, "RTT = intercept")
        fits["rows"][0][7] = "0.0000000000000054"
        fits["rows"][0][6] = f"{fits['raw_rows'][0][6]:.16f}"
    assert any("below the" in p and "resolution gives" in p for p in _broken(sound[1], below))


def test_a_sentence_whose_number_differs_from_its_table_fails(sound) -> None:
    def table_moved(doc):  # the arithmetic of a sentence changed, or the table's: they disagree
        fits = _table(doc, "RTT = intercept")
        k = fits["columns"].index("intercept (us)")
        for r in fits["rows"]:
            r[k] = "49.999"
    assert any("shows otherwise" in p for p in _broken(sound[1], table_moved))

    def unquoted(doc):
        doc["sections"][1]["interpretation"].append("The bus was busy 3.750 us per frame every 171.4 us.")
        doc["sections"][1]["quotes"].append({"cites": [], "given": [], "defines": []})
    said = _broken(sound[1], unquoted)
    assert sum("without quoting a table" in p for p in said) == 2


def test_a_quoted_number_hides_only_itself_not_a_part_of_another(sound) -> None:
    def quoted_five(doc):  # a quoted "5" beside "95% interval": the "9" left of a blanked "5" is no number
        doc["sections"][1]["interpretation"].append("gamma 5 jiffies; their 95% interval includes zero; 7 us.")
        doc["sections"][1]["quotes"].append({"cites": [], "given": ["5"], "defines": []})
    said = [p for p in _broken(sound[1], quoted_five) if "without quoting" in p]
    assert len(said) == 1 and "states 7 without" in said[0]


def test_an_empty_figure_fails(sound) -> None:
    def one_point(doc):
        doc["sections"][1]["figures"][0]["panels"][0] = 1
    assert any("nothing to show" in p for p in _broken(sound[1], one_point))


def test_a_term_used_before_it_is_defined_fails(sound) -> None:
    def undefined(doc):
        for q in doc["sections"][0]["quotes"]:
            q["defines"] = [d for d in q["defines"] if d != "lack of fit p"]
    said = _broken(sound[1], undefined)
    assert said == [f"the term 'lack of fit p' is first used undefined: \"{said[0].split(chr(34))[1]}\""]


def test_citations_must_have_years_and_sources_and_sources_citations(sound) -> None:
    def yearless(doc):
        doc["sections"][1]["interpretation"].append("As Geist et al. found, coalescence saves interrupts.")
        doc["sections"][1]["quotes"].append({"cites": [], "given": [], "defines": []})
    assert any("without its year" in p for p in _broken(sound[1], yearless))

    def unlisted(doc):
        _table(doc, "Sources cited")["rows"].pop(0)
    assert any("cited but not listed" in p for p in _broken(sound[1], unlisted))

    def uncited(doc):
        _table(doc, "Sources cited")["rows"].append(["Feng et al. 2003", "W. Feng ..."])
    assert any("Feng et al. 2003 is listed" in p and "never cited" in p for p in _broken(sound[1], uncited))

    def seed(doc):
        doc["sections"][0]["interpretation"].append("As the seed prints it (seed 002 fig. 4.7).")
        doc["sections"][0]["quotes"].append({"cites": [], "given": [], "defines": []})
    assert sum("named as such" in p for p in _broken(sound[1], seed)) == 2


def test_the_page_is_read_as_the_json(sound) -> None:
    """A cell changed on the page alone fails the page: the HTML is read from its own elements."""
    html, js = sound
    doc = json.loads(js)
    fits = _table(doc, "RTT = intercept")
    cell = fits["rows"][0][6]
    broken = html.replace(f">{cell}</td>", f">{fits['raw_rows'][0][6]:.12f}</td>", 1)
    assert broken != html and lint.problems(lint.from_html(broken))
    assert lint.is_report(html) and lint.is_report(js) and not lint.is_report(json.dumps({"sections": []}))


def test_the_suite_table_gives_no_share_of_an_assumed_line_rate() -> None:
    """Over loopback udpmon assumes 1 Gbit/s for its rate search; the table shows no maximum and no share of
    it (they read UDP 100.0% and TCP 2812.9%)."""
    from types import SimpleNamespace

    from nicrig.udpmon import suite as S

    best = SimpleNamespace(throughput=957.0, lossless=True)  # the best trial, as far as the table reads it
    outcome = S.Outcome(S.TESTS[0], 957.0, (), best, "", "ok")
    with_line, without = S.format_table([outcome]), S.format_table([outcome], line_rate=False)
    assert "100.0%" in with_line[1] and "957.0" in with_line[1]
    assert "100.0%" not in without[1] and without[1].count("—") >= 2 and "957.0 Mbit/s" in without[1]



def test_a_term_defined_where_its_first_mention_is_hyphenated_passes() -> None:
    """The sweep's main-mode sentence mentions the "main-mode median" before "the main mode": the page marks the
    first mention the lint reads as the term, hyphenated or not, as its definition."""
    from types import SimpleNamespace

    said = report._main_mode_defined([(SimpleNamespace(label="rx-usecs=40"), SimpleNamespace(statistic="main mode"))])
    assert "main-mode" in said[0].split("main mode")[0]
    assert 'main-mode' in str(render.with_definitions(said[0])).split("<dfn>", 1)[1].split("</dfn>")[0]
    rep = report.new_report("t", [], [report.Section("Latency sweep", "lat.h5", text=said)], [])
    html = TO_HTML(rep)
    assert not [p for p in lint.problems(lint.read(html)) if "the term" in p]
    undefined = html.replace("<dfn>", "").replace("</dfn>", "")
    assert [p for p in lint.problems(lint.read(undefined)) if "the term 'main mode'" in p]
