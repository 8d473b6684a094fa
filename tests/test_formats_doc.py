"""docs/formats.md against real files: everything the files hold is documented, everything documented exists.

The test reads the machine-readable part of ``docs/formats.md``: each Markdown table that
follows a marker comment

    <!-- schema: attributes KIND:/PATH -->   names in the first column: attributes of the object at PATH
    <!-- schema: columns KIND:/PATH -->      names in the first column: columns of the table at PATH
    <!-- schema: datasets KIND:/PATH -->     names in the first column: plain datasets in the group PATH
    <!-- schema: tables KIND -->             first column a table's PATH, last column its columns
    <!-- schema: stacks KIND -->             first column a table's PATH, second the PATH of the table it
                                             stacks: its columns and a leading ``step``
    <!-- schema: json KIND:/PATH ATTR -->    names in the first column: the keys of the JSON object in
                                             attribute ATTR of the object at PATH (``any-table`` for a
                                             table attribute), dotted; ``[]`` for each item of a list,
                                             ``<...>`` for any keys below (an object documented elsewhere)

``KIND`` is ``capture`` (capture set) or ``results`` (udpmon results file, also the ``results``
group of a simulated capture set); ``<name>`` in a path stands for any one name. Names are
the backticked words of a cell (in a ``tables`` column cell, outside parentheses); a row
that says "optional" names what a file may lack. ``sweep/step<k>/`` of a swept results file
is read as the results root. So a change of the files needs only a change of the doc.

Files: simulated capture sets of both scenarios, decoded by ``nicrig decode`` (one with a
saved GUI session), with the udpmon results the simulator writes into them; a set ``nicrig import`` made of a VCD and a
sigrok session exported from one, a CSV as sigrok-cli writes it and its probe's frames as a pcapng (a wire source); a set ``nicrig acquire --config`` fetched from two
simulated instruments over TCP (a Tektronix holding an error from an earlier session), deskewed, with a udpmon test
run while they were armed, and that test's results file; one from sigrok-cli's demo device; a set of host traces
``nicrig trace record`` wrote (as root with tracefs); and the results files of ``nicrig udpmon latency`` (busy-polling),
``stream`` (recording the wire, as root), ``suite`` and ``aggregate`` run against a daemon on loopback, and of a latency
``--sweep mtu=...`` between two network namespaces (where they can be made). Checked: every
group, dataset, column, attribute and key of a JSON-object attribute in them is documented;
every documented one of the paths these files have exists in one of them (and the keys documented as optional
that these files were made to have, by name); each table's ``units`` names only its own columns.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

import h5py
import pytest
from netns import netns_hosts
from sigrok_run import sigrok_cli_available
from siminstr import serve
from test_hostprobe_export import EXCHANGE
from test_import_export import SIGROK_CSV
from test_udpmon_suite import SECRET
from test_udpmon_suite import serve as serve_udpmon
from nicrig.acquisition.sim.rig import Recording
from nicrig.companion import companion_path
from nicrig.gui import session as gui_session

from nicrig.cli import main
from tests.conftest import simulate_set, udpmon_daemon_on_loopback

FORMATS = Path(__file__).resolve().parents[1] / "docs" / "formats.md"
MARKER = re.compile(r"<!-- schema: (attributes|columns|datasets|tables|stacks|json) (\S+)(?: (\S+))? -->")
#: A swept results file's groups of one step (formats.md, "udpmon results files").
STEP_GROUP = re.compile(r"^/sweep/step\d+(?=/)")
#: Attributes every table may carry (formats.md, "Tables").
TABLE_ATTRIBUTES = "any-table"


@dataclass
class Schema:
    """What formats.md documents, by kind and path pattern."""

    attributes: dict[str, set[str]] = field(default_factory=dict)
    columns: dict[str, set[str]] = field(default_factory=dict)
    datasets: dict[str, set[str]] = field(default_factory=dict)
    #: JSON-valued attributes: (path pattern, attribute) -> documented keys (dotted; ``[]``: each list item)
    json: dict[tuple[str, str], set[str]] = field(default_factory=dict)
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
    stacked: list[tuple[str, str]] = []  # (table, the table it stacks with a leading `step` column)
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = MARKER.search(line)
        if not m:
            continue
        what, where, attr = m.groups()
        rows = _rows(lines, n + 1)
        assert rows, f"formats.md line {n + 1}: a schema marker without a table after it"
        if what == "tables":
            for cells in rows:
                (path,) = _names(cells[0])
                schema.columns.setdefault(f"{where}:/{path}", set()).update(_names(cells[-1], True))
        elif what == "stacks":
            stacked.extend((f"{where}:/{_names(cells[0])[0]}", f"{where}:/{_names(cells[1])[0]}") for cells in rows)
        elif what == "json":
            keys = schema.json.setdefault((where, attr), set())
            for cells in rows:
                keys.update(_names(cells[0]))
                if "optional" in " ".join(cells).lower():
                    schema.optional |= {("json", f"{where} {attr}", name) for name in _names(cells[0])}
        else:
            names = {name for cells in rows for name in _names(cells[0])}
            getattr(schema, what).setdefault(where, set()).update(names)
            schema.optional |= {(what, where, name) for cells in rows if "optional" in " ".join(cells).lower()
                                for name in _names(cells[0])}
    for table, of in stacked:
        schema.columns.setdefault(table, set()).update({"step"} | schema.columns[of])
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
            if kind == "results":  # a swept run's step<k> groups hold what an unswept run holds at its root
                inner = STEP_GROUP.sub("", inner)
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
            for attr in obj.attrs:  # a table's documented attributes too: their JSON keys are checked here
                json_keys(path, key, attr, obj.attrs[attr], is_table, schema, found)
            if attrs:
                pat = documented(schema.attributes, key)
                if pat is None:
                    found.undocumented.append(f"{path.name}: attributes of {key}: {sorted(attrs)}")
                    continue
                found.seen.setdefault(("attributes", pat), set()).update(attrs)
                missing = attrs - schema.attributes[pat]
                if missing:
                    found.undocumented.append(f"{path.name}: {key}: attributes {sorted(missing)} not documented")


def flatten(value: object, prefix: str = "") -> set[str]:
    """The keys of a JSON value as dotted paths, ``[]`` standing for every item of a list of objects."""
    if isinstance(value, dict):
        keys = set()
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else k
            keys |= {path} | flatten(v, path)
        return keys
    if isinstance(value, list):
        return set().union(*(flatten(v, prefix + "[]") for v in value if isinstance(v, (dict, list))))
    return set()


def _key_pattern(key: str) -> re.Pattern[str]:
    """``<name>`` stands for one key, ``<...>`` for any keys below (an object another document describes)."""
    return re.compile("".join(".+" if part == "<...>" else r"[^.]+" if part.startswith("<") else re.escape(part)
                              for part in re.split(r"(<[^>]+>)", key)) + "$")


def json_keys(path: Path, key: str, attr: str, value: object, is_table: bool, schema: Schema, found: Found) -> None:
    """Check the keys of an attribute holding a JSON object against formats.md's ``json`` tables."""
    if not isinstance(value, str) or not value.startswith(("{", "[{")):
        return
    keys = flatten(json.loads(value))
    if not keys or (attr == "units" and is_table):  # a table's units are keyed by its columns, checked above
        return
    places = {p: names for (p, a), names in schema.json.items() if a == attr}
    pat = documented(places, key) or (TABLE_ATTRIBUTES if is_table and TABLE_ATTRIBUTES in places else None)
    if pat is None:
        found.undocumented.append(f"{path.name}: {key}: JSON attribute {attr!r} has no key table "
                                  f"(keys {sorted(keys)[:8]}...)")
        return
    documented_keys = {k: _key_pattern(k) for k in places[pat]}
    seen = found.seen.setdefault(("json", f"{pat} {attr}"), set())
    for k in keys:
        hits = [d for d, rx in documented_keys.items() if rx.match(k)]
        if hits:
            seen.update(hits)
        else:
            found.undocumented.append(f"{path.name}: {key}: JSON key {attr}.{k} not documented")


#: Host traces of this host where the kernel lets us trace (root, tracefs): the host probe's groups.
TRACE = ["--trace-host", "local"] if os.geteuid() == 0 and Path("/sys/kernel/tracing/events").is_dir() else []
#: udpmon runs against a daemon on loopback, small: one of each kind (kind, arguments after the host).
UDPMON_RUNS = {
    "latency": ["127.0.0.1", "--sizes", "64,1472", "--count", "20", "--busy-poll", *TRACE],  # busy-poll: socket.*
    "stream": ["127.0.0.1", "--sizes", "1472", "--spacing-us", "20", "--count", "200", "--rounds", "1",
               *(["--capture"] if os.geteuid() == 0 else [])],  # a wire source recorded on loopback
    "suite": ["--peer", "127.0.0.1", "--tests", "udp-send-1472", "--trial-s", "0.2", "--max-trials", "2"],
    "aggregate": ["127.0.0.1", "--count", "200"],
}


#: A two-instrument rig on the simulated instruments, deskewed on REF, a udpmon test run while they are armed:
#: what `nicrig acquire --config` writes.
RIG = """
timeout_s = 10
deskew_signal = "REF"
[[instrument]]
source = "send_pci"
resource = "{send}"
probe_map = "pci-control"
sample_rate_hz = 266.67e6
record_length = 10000
trigger = "FRAME#:falling"
[[instrument]]
source = "recv_pci"
resource = "{recv}"
probe_map = "pci-control"
sample_rate_hz = {recv_rate}
record_length = 10000
trigger = "FRAME#:falling"
[udpmon]
args = ["latency", "127.0.0.1", "--port", "{udpmon_port}", "--sizes", "64", "--count", "5"]
"""


def queue_stale_error(srv) -> None:  # noqa: ANN001 (a SimServer)
    """Leave an error in the instrument's queue, as an earlier session's mistyped command does: the acquisition
    finds it there before its own commands (``stale_errors``). ``*IDN?`` answered: the command was taken."""
    with socket.create_connection(srv.server_address[:2], timeout=10) as s, s.makefile("rb") as answers:
        s.sendall(b":NO:SUCH:COMMAND\n*IDN?\n")
        assert answers.readline().strip()


def acquired_set(tmp: Path, udpmon_port: int) -> list[Path]:
    """``nicrig acquire --config`` from two simulated instruments (SCPI over TCP), deskewed, with a udpmon test run
    while they are armed, one instrument holding an error from before; and the udpmon test's results file."""
    out = tmp / "acquired.h5"
    with serve("keysight-msox4000", "send_pci") as send, serve("tektronix-mso5", "recv_pci") as recv:
        queue_stale_error(recv)
        (tmp / "rig.toml").write_text(RIG.format(send=send.resource, recv=recv.resource,
                                                 recv_rate=recv.dialect.scope.max_rate_hz, udpmon_port=udpmon_port))
        argv = ["acquire", "--config", str(tmp / "rig.toml"), "-o", str(out)]
        with redirect_stdout(StringIO()):
            assert main(argv) == 0
    with h5py.File(out, "r") as f:  # the command as given to nicrig, not the process's (pytest's) sys.argv
        acquisition = json.loads(f.attrs["acquisition"])
        assert acquisition["settings"]["argv"] == argv and acquisition["traffic"]["exit"] == 0
        assert json.loads(f["sources/recv_pci"].attrs["instrument"])["stale_errors"]
    return [out, Path(acquisition["traffic"]["results"])]


def sigrok_set(tmp: Path) -> list[Path]:
    """``nicrig acquire --sigrok-driver demo``: sigrok-cli's demo device (none without sigrok-cli)."""
    if not sigrok_cli_available():
        return []
    out = tmp / "sigrok.h5"
    assert main(["acquire", "--sigrok-driver", "demo", "--samples", "1000", "--sample-rate", "1MHz", "--source",
                 "demo", "-o", str(out)]) == 0
    return [out]


def imported_set(tmp: Path, simulated: Path) -> Path:
    """A simulated set's sources exported and imported again, a VCD (state mode) and a sigrok session (appended), and
    a CSV as sigrok-cli writes it (appended)."""
    out = tmp / "imported.h5"
    assert main(["export", str(simulated), "--source", "send_pci", "-o", str(tmp / "send.vcd")]) == 0
    assert main(["export", str(simulated), "--source", "probe", "-o", str(tmp / "probe.sr")]) == 0
    assert main(["import", str(tmp / "send.vcd"), "-o", str(out)]) == 0
    assert main(["import", str(tmp / "probe.sr"), "-o", str(out), "--append"]) == 0
    (tmp / "bits.csv").write_text(SIGROK_CSV)
    assert main(["import", str(tmp / "bits.csv"), "-o", str(out), "--append"]) == 0
    # the probe's frames as a pcapng, back as a wire source
    assert main(["export", str(simulated), "--source", "probe", "-o", str(tmp / "probe.pcapng")]) == 0
    assert main(["import", str(tmp / "probe.pcapng"), "-o", str(out), "--append", "--source", "tap"]) == 0
    return out


def traced_set(tmp: Path) -> list[Path]:
    """``nicrig trace record`` around a program: a capture set of host traces (none where the kernel cannot be
    traced: not root, no tracefs)."""
    if not TRACE:
        return []
    out = tmp / "trace.h5"
    r = subprocess.run([sys.executable, "-m", "nicrig", "trace", "record", "-o", str(out), "--", sys.executable, "-c",
                        EXCHANGE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [out]


def swept_results(tmp: Path) -> list[Path]:
    """``nicrig udpmon latency --sweep mtu=...`` between two network namespaces (none where they cannot be made)."""
    with netns_hosts(2) as hosts:
        if not hosts.isolated:  # a sweep changes interfaces: never the machine's own loopback
            return []
        secret = tmp / "secret"
        secret.write_text(SECRET + "\n")
        secret.chmod(0o600)
        port = serve_udpmon(hosts.b, secret, "--allow-tuning")
        out = tmp / "udpmon-sweep.h5"
        r = hosts.a.run([sys.executable, "-m", "nicrig", "udpmon", "latency", f"{hosts.b.address}:{port}",
                         "--secret-file", str(secret), "--sweep", "mtu=1500,4000", "--sizes", "64", "--count", "5",
                         "-o", str(out)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    return [out]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    """Simulated sets of both scenarios, decoded; an imported and an acquired set; a results file of each udpmon
    command (run at once) and of a latency sweep."""
    tmp = tmp_path_factory.mktemp("formats")
    lat = simulate_set(tmp, "lat", nic="sk9843", bus="pci32-33", recording=Recording(with_ad=True),
                       kind="latency", size_bytes=64, count=2)
    stream = simulate_set(tmp, "stream", kind="stream", size_bytes=1400, spacing_us=11, count=20)
    assert main(["decode", str(lat), str(stream)]) == 0
    # what the GUI's File > Save session writes into the companion
    gui_session.save(lat, gui_session.Session(offsets_ns={"probe": 12.5}, markers=[("A", 100.0)],
                                              hidden=["send_pci/IRDY#"], order=["probe/", "send_pci/"],
                                              view_ns=(0.0, 5000.0), cursors_ns=(100.0, 250.0)))
    with udpmon_daemon_on_loopback() as port:
        for kind, args in UDPMON_RUNS.items():  # one after the other: a daemon serves one controller at a time
            assert main(["udpmon", kind, *args, "--port", str(port), "-o", str(tmp / f"udpmon-{kind}.h5")]) == 0
        acquired = acquired_set(tmp, port)
    return [lat, stream, companion_path(lat), companion_path(stream), imported_set(tmp, lat), *acquired,
            *sigrok_set(tmp), *traced_set(tmp), *(tmp / f"udpmon-{kind}.h5" for kind in UDPMON_RUNS),
            *swept_results(tmp)]


def undocumented(files: list[Path], schema: Schema) -> list[str]:
    """What the files hold that the schema does not list."""
    found = Found()
    for path in files:
        walk(path, schema, found)
    for (what, pat), names in found.seen.items():
        if what == "columns" and names - schema.columns[pat]:
            found.undocumented.append(f"{pat}: columns {sorted(names - schema.columns[pat])} not documented")
    return found.undocumented


def absent(files: list[Path], schema: Schema) -> tuple[set[str], list[str], dict[tuple[str, str], set[str]]]:
    """The documented table patterns these files have, what formats.md documents for their paths that none
    of them holds, and every documented name seen, by (what, pattern)."""
    found = Found()
    for path in files:
        walk(path, schema, found)
    gone_all = []
    documented_names = {**{("attributes", p): n for p, n in schema.attributes.items()},
                        **{("columns", p): n for p, n in schema.columns.items()},
                        **{("datasets", p): n for p, n in schema.datasets.items()},
                        **{("json", f"{p} {a}"): n for (p, a), n in schema.json.items()}}
    for (what, pat), names in documented_names.items():
        if (what, pat) in found.seen and pat != TABLE_ATTRIBUTES:
            gone = {n for n in names - found.seen[(what, pat)] if (what, pat, n) not in schema.optional}
            if gone:
                gone_all.append(f"{what} of {pat}: {sorted(gone)} documented, in no file")
    return {pat for what, pat in found.seen if what == "columns"}, gone_all, found.seen


def test_formats_md_documents_exactly_what_the_files_hold(files):
    """Everything the files hold is documented; for each documented path these files have, every documented name
    (JSON keys too) is in one of them. One test, so that the files are made once under xdist."""
    schema = read_schema(FORMATS.read_text())
    problems = undocumented(files, schema)
    assert not problems, "\n".join(problems)
    covered, gone, seen = absent(files, schema)
    assert {"capture:/truth/<source>/transactions", "capture:/decoded/<source>/pci", "results:/latency/rtt",
            "results:/stream/points", "results:/suite/tests", "results:/aggregate/total", "results:/hosts",
            "results:/counters", "results:/load", "capture:/acquisition/instruments"} <= covered
    if TRACE:
        assert {"results:/host_trace/<host>/events", "capture:/host_trace/<host>/events"} <= covered
    assert "capture:/wire/<name>/frames" in covered
    if os.geteuid() == 0:
        assert {"results:/wire/<name>/frames", "results:/decoded/<source>/ethernet"} <= covered
    # documented as optional (a file may lack them), so each is looked for by name in the files written here
    busy_poll = {"busy_poll", "socket", "socket.so_busy_poll_us", "socket.so_prefer_busy_poll",
                 "socket.so_busy_poll_budget"}
    wanted = {"capture:/sources/<source> instrument": {"stale_errors", "file", "format"},
              "capture:/ acquisition": {"traffic", "traffic.argv", "traffic.exit", "traffic.results",
                                        "traffic.summary", "traffic.summary.<...>"},
              "any-table wait_local_detail": busy_poll, "any-table wait_remote_detail": busy_poll}
    for place, keys in wanted.items():
        assert keys <= seen.get(("json", place), set()), f"{place}: {sorted(keys - seen.get(('json', place), set()))}"
    if files[-1].name == "udpmon-sweep.h5":
        assert {"results:/sweep/steps", "results:/sweep/applied", "results:/sweep/latency"} <= covered
    assert not gone, "\n".join(gone)


def test_the_check_finds_what_a_doc_leaves_out(tmp_path):
    """A column, an attribute, a dataset, a units key and a JSON key the doc lacks are each reported; a step
    group of a sweep is read as the results root."""
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

<!-- schema: json capture:/sources/<source> bus -->
| key | type | unit | meaning |
|---|---|---|---|
| `kind` | str | | kind |
| `pods` | object | | pods: |
| `pods[].<pod>` | int | sample | samples |
| `given` | object | | as another document says |
| `given.<...>` | | | its keys |

<!-- schema: columns results:/sweep/steps -->
| column | meaning |
|---|---|
| `step` | step |
"""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "nicrig-capture-set"
        f.attrs["secret"] = "?"
        table = f.create_dataset("truth/s/x", data=np.zeros(1, [("a", "i8"), ("b", "i8"), ("c", "i8")]))
        table.attrs["units"] = json.dumps({"a": "ns", "d": "ns"})
        f.create_dataset("truth/s/raw", data=np.zeros(3))
        bus = {"kind": "pci", "pods": [{"1": 8}, {"2": 8, "x": {"y": 1}}], "given": {"a": [{"b": {"c": 1}}]}}
        f.create_group("sources/s").attrs["bus"] = json.dumps(bus)
    results = tmp_path / "r.h5"
    with h5py.File(results, "w") as f:
        f.attrs["format"] = "nicrig-results"
        f.create_dataset("sweep/steps", data=np.zeros(1, [("step", "i4")]))
        f.create_dataset("sweep/step0/latency/rtt", data=np.zeros(1, [("seq", "i4")]))  # is latency/rtt
    report = "\n".join(undocumented([path, results], read_schema(doc)))
    assert "capture:/truth/<source>/x: columns ['c'] not documented" in report
    assert "attributes ['secret'] not documented" in report
    assert "units names columns it lacks: ['d']" in report
    assert "dataset capture:/truth/s/raw" in report
    assert "JSON key bus.pods[].x.y not documented" in report and "bus.pods[].2" not in report
    assert "bus.given" not in report
    assert "table results:/latency/rtt (seq)" in report and "sweep/steps" not in report
