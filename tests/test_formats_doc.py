"""docs/formats.md against real files: everything the files hold is documented, everything documented exists.

The test reads the machine-readable part of ``docs/formats.md``: each Markdown table that
follows a marker comment

    <!-- schema: attributes KIND:/PATH -->   names in the first column: attributes of the object at PATH
    <!-- schema: columns KIND:/PATH -->      names in the first column: columns of the table at PATH
    <!-- schema: datasets KIND:/PATH -->     names in the first column: plain datasets in the group PATH
    <!-- schema: tables KIND -->             first column a table's PATH, last column its columns

``KIND`` is ``capture`` (capture set) or ``results`` (udpmon results file, also the ``results``
group of a simulated capture set); ``<name>`` in a path stands for any one name. Names are
the backticked words of a cell (in a ``tables`` column cell, outside parentheses); a row
that says "optional" names what a file may lack. So a change of the files needs only a
change of the doc.

Files: simulated capture sets of both scenarios, decoded by ``nicrig decode``, with the
udpmon results the simulator writes into them, and the results files of ``nicrig udpmon
latency``, ``stream``, ``suite`` and ``aggregate`` run against a daemon on loopback. Checked: every group, dataset, column and
attribute in them is documented; every documented one of the paths these files have exists
in one of them; each table's ``units`` names only its own columns.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import pytest
from nicrig.acquisition.sim.rig import Recording
from nicrig.companion import companion_path

from nicrig.cli import main
from tests.conftest import simulate_set, udpmon_daemon_on_loopback

FORMATS = Path(__file__).resolve().parents[1] / "docs" / "formats.md"
MARKER = re.compile(r"<!-- schema: (attributes|columns|datasets|tables) (\S+) -->")
#: Attributes every table may carry (formats.md, "Tables").
TABLE_ATTRIBUTES = "any-table"


@dataclass
class Schema:
    """What formats.md documents, by kind and path pattern."""

    attributes: dict[str, set[str]] = field(default_factory=dict)
    columns: dict[str, set[str]] = field(default_factory=dict)
    datasets: dict[str, set[str]] = field(default_factory=dict)
    optional: set[tuple[str, str, str]] = field(default_factory=set)  # (what, path, name) a file may lack


def _names(cell: str, outside_parentheses: bool = False) -> list[str]:
    if outside_parentheses:
        while re.search(r"\([^()]*\)", cell):
            cell = re.sub(r"\([^()]*\)", "", cell)
    return re.findall(r"`([^`]+)`", cell)


def _rows(lines: list[str], start: int) -> list[list[str]]:
    """The body rows of the Markdown table starting at or after line ``start``, as cells."""
    i = start
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    rows = []
    for line in lines[i + 2:]:  # after the header and the |---| line
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def read_schema(text: str) -> Schema:
    schema = Schema()
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = MARKER.search(line)
        if not m:
            continue
        what, where = m.groups()
        rows = _rows(lines, n + 1)
        assert rows, f"formats.md line {n + 1}: a schema marker without a table after it"
        if what == "tables":
            for cells in rows:
                (path,) = _names(cells[0])
                schema.columns.setdefault(f"{where}:/{path}", set()).update(_names(cells[-1], True))
        else:
            names = {name for cells in rows for name in _names(cells[0])}
            getattr(schema, what).setdefault(where, set()).update(names)
            schema.optional |= {(what, where, name) for cells in rows if "optional" in " ".join(cells).lower()
                                for name in _names(cells[0])}
    return schema


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile("".join("[^/]+" if part.startswith("<") else re.escape(part)
                              for part in re.split(r"(<[^>]+>)", path)) + "$")


def documented(table: dict[str, set[str]], key: str) -> str | None:
    """The documented path pattern that ``key`` (``kind:/path``) matches, if any."""
    hits = [p for p in table if _pattern(p).match(key)]
    return max(hits, key=len) if hits else None


@dataclass
class Found:
    """Everything the files hold, by documented pattern: names seen, and what no pattern documents."""

    seen: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    undocumented: list[str] = field(default_factory=list)


def walk(path: Path, schema: Schema, found: Found) -> None:
    with h5py.File(path, "r") as f:
        fmt = f.attrs.get("format")
        file_kind = {"nicrig-results": "results", "nicrig-derived": "derived"}.get(fmt, "capture")
        objects: list[tuple[str, h5py.HLObject]] = [("/", f)]
        f.visititems(lambda name, obj: objects.append(("/" + name, obj)))
        for name, obj in objects:
            kind, inner = file_kind, name
            if file_kind == "derived" and name != "/":  # a companion's tables are its capture's, as read
                kind = "capture"
            if file_kind == "capture" and (name == "/results" or name.startswith("/results/")):
                kind, inner = "results", name[len("/results"):] or "/"
            key = f"{kind}:{inner}"
            is_table = isinstance(obj, h5py.Dataset) and obj.dtype.names is not None
            attrs = set(obj.attrs)
            if is_table:
                pat = documented(schema.columns, key)
                if pat is None:
                    found.undocumented.append(f"{path.name}: table {key} ({', '.join(obj.dtype.names)})")
                    continue
                found.seen.setdefault(("columns", pat), set()).update(obj.dtype.names)
                units = json.loads(obj.attrs.get("units", "{}"))
                extra = set(units) - set(obj.dtype.names)
                if extra:
                    found.undocumented.append(f"{path.name}: {key}: units names columns it lacks: {sorted(extra)}")
                attrs -= schema.attributes[TABLE_ATTRIBUTES]
            elif isinstance(obj, h5py.Dataset):
                parent = key.rsplit("/", 1)[0] or f"{kind}:/"
                pat = documented(schema.datasets, parent)
                if pat is None or obj.name.rsplit("/", 1)[-1] not in schema.datasets[pat]:
                    found.undocumented.append(f"{path.name}: dataset {key}")
                    continue
                found.seen.setdefault(("datasets", pat), set()).add(obj.name.rsplit("/", 1)[-1])
            elif not attrs and not documented(schema.attributes, key):
                continue  # a plain group: its members are checked themselves
            if attrs:
                pat = documented(schema.attributes, key)
                if pat is None:
                    found.undocumented.append(f"{path.name}: attributes of {key}: {sorted(attrs)}")
                    continue
                found.seen.setdefault(("attributes", pat), set()).update(attrs)
                missing = attrs - schema.attributes[pat]
                if missing:
                    found.undocumented.append(f"{path.name}: {key}: attributes {sorted(missing)} not documented")


#: Host traces of this host where the kernel lets us trace (root, tracefs): the host probe's groups.
TRACE = ["--trace-host", "local"] if os.geteuid() == 0 and Path("/sys/kernel/tracing/events").is_dir() else []
#: udpmon runs against a daemon on loopback, small: one of each kind (kind, arguments after the host).
UDPMON_RUNS = {
    "latency": ["127.0.0.1", "--sizes", "64,1472", "--count", "20", *TRACE],
    "stream": ["127.0.0.1", "--sizes", "1472", "--spacing-us", "20", "--count", "200", "--rounds", "1"],
    "suite": ["--peer", "127.0.0.1", "--tests", "udp-send-1472", "--trial-s", "0.2", "--max-trials", "2"],
    "aggregate": ["127.0.0.1", "--count", "200"],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    """Simulated sets of both scenarios, decoded, and a results file of each udpmon command (run at once)."""
    tmp = tmp_path_factory.mktemp("formats")
    lat = simulate_set(tmp, "lat", nic="sk9843", bus="pci32-33", recording=Recording(with_ad=True),
                       kind="latency", size_bytes=64, count=2)
    stream = simulate_set(tmp, "stream", kind="stream", size_bytes=1400, spacing_us=11, count=20)
    assert main(["decode", str(lat), str(stream)]) == 0
    with udpmon_daemon_on_loopback() as port:
        for kind, args in UDPMON_RUNS.items():  # one after the other: a daemon serves one controller at a time
            assert main(["udpmon", kind, *args, "--port", str(port), "-o", str(tmp / f"udpmon-{kind}.h5")]) == 0
    return [lat, stream, companion_path(lat), companion_path(stream)] + [tmp / f"udpmon-{kind}.h5"
                                                                        for kind in UDPMON_RUNS]


def undocumented(files: list[Path], schema: Schema) -> list[str]:
    """What the files hold that the schema does not list."""
    found = Found()
    for path in files:
        walk(path, schema, found)
    for (what, pat), names in found.seen.items():
        if what == "columns" and names - schema.columns[pat]:
            found.undocumented.append(f"{pat}: columns {sorted(names - schema.columns[pat])} not documented")
    return found.undocumented


def test_the_files_hold_only_what_formats_md_documents(files):
    problems = undocumented(files, read_schema(FORMATS.read_text()))
    assert not problems, "\n".join(problems)


def test_everything_formats_md_documents_for_these_files_exists(files):
    """For each documented path these files have, every documented name is in one of them."""
    schema = read_schema(FORMATS.read_text())
    found = Found()
    for path in files:
        walk(path, schema, found)
    covered = {pat for what, pat in found.seen if what == "columns"}
    assert {"capture:/truth/<source>/transactions", "capture:/decoded/<source>/pci", "results:/latency/rtt",
            "results:/stream/points", "results:/suite/tests", "results:/aggregate/total", "results:/hosts",
            "results:/counters", "results:/load"} <= covered
    if TRACE:
        assert "results:/host_trace/<host>/events" in covered
    absent = []
    for what in ("attributes", "columns", "datasets"):
        for pat, names in getattr(schema, what).items():
            if (what, pat) in found.seen and pat != TABLE_ATTRIBUTES:
                gone = {n for n in names - found.seen[(what, pat)] if (what, pat, n) not in schema.optional}
                if gone:
                    absent.append(f"{what} of {pat}: {sorted(gone)} documented, in no file")
    assert not absent, "\n".join(absent)


def test_the_check_finds_what_a_doc_leaves_out(tmp_path):
    """A column, an attribute, a dataset and a units key the doc lacks are each reported."""
    import numpy as np

    doc = """
<!-- schema: attributes capture:/ -->
| attribute | meaning |
|---|---|
| `format` | kind |

<!-- schema: attributes any-table -->
| attribute | meaning |
|---|---|
| `units` | units |

<!-- schema: tables capture -->
| table | one row per | columns |
|---|---|---|
| `truth/<source>/x` | thing | `a`, `b` (the `c` in parentheses is prose) |
"""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "nicrig-capture-set"
        f.attrs["secret"] = "?"
        table = f.create_dataset("truth/s/x", data=np.zeros(1, [("a", "i8"), ("b", "i8"), ("c", "i8")]))
        table.attrs["units"] = json.dumps({"a": "ns", "d": "ns"})
        f.create_dataset("truth/s/raw", data=np.zeros(3))
    report = "\n".join(undocumented([path], read_schema(doc)))
    assert "capture:/truth/<source>/x: columns ['c'] not documented" in report
    assert "attributes ['secret'] not documented" in report
    assert "units names columns it lacks: ['d']" in report
    assert "dataset capture:/truth/s/raw" in report
