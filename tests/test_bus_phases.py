"""Phases under load: CSR setup, interrupt service and DMA from the decoded tables equal the
simulator's truth in every NIC and host profile, at spacings from idle to a saturated bus, with PAUSE cycles.

Each capture is simulated, decoded by the builtin engine and analysed by
``nicrig.analysis.bus`` from ``decoded/`` only (control lines: no addresses).
The truth is the model's own record of every transaction: the driver's
register sequences are told apart there by their addresses (the profiles'
``tx_csr``, ``isr_entry_csr``, ``isr_exit_csr`` and, with ``rx_refill =
"softirq"``, ``rx_refill_csr``), which the analysis never sees. Every phase
event of the truth must be found, starting where the truth says and lasting
as long within 1%, and no other event be called that phase.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import csr_addresses, isr_exit_forms
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.profiles import E1000_TASKLET_REFILL
from nicrig.acquisition.sim.model import Scenario
from nicrig.acquisition.sim.rig import Recording, simulate
from nicrig.analysis import bus, lint, nic_registers, render, report
from nicrig.decoders.batch import decode_file

#: The analysis's name for each of the driver's register sequences.
ROLES = {"send": "send", "service": "interrupt", "update": "update", "refill": "refill"}
#: (NIC, bus, host, scenario, spacing us, count): every NIC profile on every bus profile, every host profile;
#: an idle, a busy and a saturated bus (spacing 0: the sender's CPU and bus as fast as they go); 3-frame
#: responses; an Intel NIC whose small receive FIFO makes its host send PAUSE. sk98lin gives the start command
#: only when the transmit queue is idle: its streams at 10 and 0 us show one for all their frames (the NIC reads
#: the next descriptors by itself), and the receive DMA runs through the services on both buses.
GRID = [
    ("sk9843", "pci32-33", "supermicro-370dle", "stream", 10.0, 40),
    ("sk9843", "pci32-33", "supermicro-p4dp6", "stream", 0.0, 40),
    ("sk9843", "pci64-66", "ibm-das", "latency", 0.0, 4),
    ("intel-pro1000", "pci64-66", "supermicro-p4dp6", "stream", 0.0, 40),
    ("intel-pro1000", "pcix64-133", "supermicro-p4dp8-g2", "stream", 12.0, 40),
    ("intel-pause", "pci64-66", "supermicro-370dle", "stream", 11.0, 120),
    ("alteon-acenic", "pci64-33", "supermicro-370dle", "stream", 0.0, 40),
    ("alteon-acenic", "pci64-33", "ibm-das", "latency", 0.0, 4),
    ("generic", "pci32-33", "ibm-das", "stream", 0.0, 40),
    ("generic", "pcix64-133", "supermicro-p4dp8-g2", "stream", 40.0, 30),
    # the other NIC x bus pairs, in short captures
    ("sk9843", "pci64-33", "supermicro-p4dp8-g2", "stream", 0.0, 20),
    # sk98lin at 24 us: 7 frames of 20 find the queue idle, and the NIC answers some setups after a service
    ("sk9843", "pci64-33", "supermicro-p4dp8-g2", "stream", 24.0, 20),
    ("sk9843", "pcix64-133", "supermicro-370dle", "latency", 0.0, 3),
    ("intel-pro1000", "pci32-33", "ibm-das", "latency", 0.0, 3),
    ("intel-pro1000", "pci64-33", "supermicro-p4dp6", "stream", 5.0, 20),
    ("alteon-acenic", "pci32-33", "supermicro-p4dp8-g2", "stream", 11.0, 20),
    ("alteon-acenic", "pci64-66", "supermicro-p4dp6", "stream", 0.0, 20),
    ("alteon-acenic", "pcix64-133", "ibm-das", "latency", 0.0, 3),
    ("generic", "pci64-33", "supermicro-370dle", "latency", 0.0, 3),
    ("generic", "pci64-66", "supermicro-p4dp6", "stream", 0.0, 20),
    # Linux 2.4's receive path: the e1000 refills its ring (RDT) from a tasklet after the stack, on its own
    # just before the next request's send setup, or in bursts after a PAUSE
    ("intel-softirq", "pci64-66", "supermicro-370dle", "latency", 0.0, 4),
    ("intel-softirq", "pci64-66", "supermicro-370dle", "stream", 11.0, 150),
]


def _nic(name: str, folder: Path) -> profiles.NicProfile:
    if name == "intel-softirq":
        return replace(profiles.load("nic", "intel-pro1000"), **E1000_TASKLET_REFILL)
    if name != "intel-pause":
        return profiles.load("nic", name)
    text = (Path(profiles.__file__).resolve().parents[2] / "data" / "profiles" / "nic" / "intel-pro1000.toml")
    lines = []
    small = {"name": '"intel-pause"', "rx_ring": 8, "rx_fifo_bytes": 16384, "fc_high_water_bytes": 8192,
             "fc_low_water_bytes": 4096, "pause_quanta": 1000}
    for line in text.read_text().splitlines():
        key = line.split("=")[0].strip()
        lines.append(f"{key} = {small[key]}" if key in small else line)
    out = folder / "intel-pause.toml"
    out.write_text("\n".join(lines) + "\n")
    return profiles.load("nic", str(out))


def truth_phases(table: np.ndarray, nic: dict) -> dict[str, list[tuple[float, float]]]:
    """(start, end) ns of each of the driver's register sequences on one bus, told apart by their addresses,
    each from its first attempt (a retry the target answered first included) to its last access's end; a
    refill's accesses for every descriptor it returns in one go are one refill."""
    csr = table[table["kind"] == b"csr"]
    keys = [("send", "tx_csr"), ("service", "isr_entry_csr")]
    if nic.get("rx_refill") == "softirq":
        keys.append(("refill", "rx_refill_csr"))
    # each phase's sequences: the service's update in each form it takes by the causes it served
    wanted = [(phase, csr_addresses(nic, nic[key])) for phase, key in keys]
    wanted += [("update", form) for form in isr_exit_forms(nic)]
    # A looping service reads its cause register again after each pass: its update opens with those reads.
    cause = csr_addresses(nic, [nic["isr_cause_csr"]])[0] if nic.get("isr_cause_csr") else None
    done = np.flatnonzero(csr["termination"] != b"retry")
    out: dict[str, list[tuple[float, float]]] = {p: [] for p, _ in wanted}
    i = 0
    while i < len(done):
        for phase, seq in sorted(wanted, key=lambda w: -len(w[1])):
            rereads = 0
            while phase == "update" and cause is not None and i + rereads < len(done) \
                    and csr["address"][done[i + rereads]] == cause:
                rereads += 1
            if list(csr["address"][done[i + rereads:i + rereads + len(seq)]]) == seq and (cause is None
                                                                                          or phase != "update"
                                                                                          or rereads):
                first = done[i - 1] + 1 if i else 0
                last = i + rereads + len(seq)
                while phase == "refill" and list(csr["address"][done[last:last + len(seq)]]) == seq:
                    last += len(seq)
                out[phase].append((csr["t_start_ps"][first] / 1000, csr["t_end_ps"][done[last - 1]] / 1000))
                i = last
                break
        else:
            raise AssertionError(f"an access at {csr['t_start_ps'][done[i]]} ps is in no driver sequence")
    return out


def truth_dma(table: np.ndarray, first: bytes, rest: bytes) -> list[float]:
    """Duration (us) of each frame's DMA in truth: from a transfer's first transaction (purpose ``first``) to
    the last of those that follow it."""
    t = table[np.isin(table["purpose"], (first, rest))]
    starts = np.flatnonzero((t["purpose"] == first) & np.concatenate([[True], t["purpose"][:-1] != first]))
    return [(t["t_end_ps"][b - 1] - t["t_start_ps"][a]) / 1e6 for a, b in zip(starts, list(starts[1:]) + [len(t)])]


def _id(case: object) -> str:
    n, b, h, k, s, _ = case.values if hasattr(case, "values") else case
    return f"{n}-{b}-{h}-{k}-{s:g}us"


@pytest.mark.parametrize("nic, bus_name, host, kind, spacing_us, count", GRID, ids=[_id(c) for c in GRID])
def test_phases_equal_the_truth(tmp_path, nic, bus_name, host, kind, spacing_us, count):
    path = tmp_path / "cap.h5"
    scenario = Scenario(kind=kind, size_bytes=1472 if kind == "stream" else 3000, count=count,
                        spacing_us=spacing_us)
    simulate(scenario, profiles.load("bus", bus_name), _nic(nic, tmp_path), profiles.load("host", host), path)
    decode_file(path)
    with CaptureSet.open(path) as cs:
        t = {n: cs.read_table(n) for n in cs.table_names() if n.startswith(("decoded/", "truth/"))}
        sim = json.loads(cs.attrs["simulation"])
    timeline = bus.bus_timeline(t["decoded/send_pci/pci"], t["decoded/send_pci/irq"], t["decoded/recv_pci/pci"],
                                t["decoded/recv_pci/irq"], t["decoded/probe/ethernet"])
    if nic == "intel-pause":
        assert timeline.pause.xoff >= 2  # the load this case is for
    seen: dict[str, int] = {}
    for side, hb in (("send", timeline.send), ("recv", timeline.recv)):
        assert not hb.activity.sequences_unlearnt
        truth = truth_phases(t[f"truth/{side}_pci/transactions"], sim["nic"])
        for phase, events in truth.items():
            seen[phase] = seen.get(phase, 0) + len(events)
        for phase, events in truth.items():
            found = hb.activity.clusters_of_role(ROLES[phase])
            assert len(found) == len(events), f"{side} {phase}: {len(found)} found, {len(events)} in truth"
            for c, (a, b) in zip(found, events):
                assert c.start_ns == pytest.approx(a, abs=1), f"{side} {phase} at {a} ns"
                assert c.duration_ns == pytest.approx(b - a, rel=0.01, abs=1), f"{side} {phase} at {a} ns"
        # the statistics say how many events they are of, and are the truth's
        for phase, stat in (("send", hb.csr.send_setup_us), ("service", hb.csr.service_us),
                            ("update", hb.csr.update_us)):
            want = [(b - a) / 1000 for a, b in truth[phase]]
            assert stat.count == len(want)
            if want:  # decoded times are whole ns: a PCI-X access of 3 clocks lasts 22 or 23 of them
                assert stat.median == pytest.approx(float(np.median(want)), rel=0.01, abs=0.001)
        table = t[f"truth/{side}_pci/transactions"]
        for role, stat, first, rest in (("fetch", hb.dma.fetch_us, b"tx_desc_fetch", b"tx_data"),
                                        ("receive", hb.dma.receive_us, b"rx_data", b"rx_desc_writeback")):
            want = truth_dma(table, first, rest)
            assert stat.count == len(want), f"{side} {role}"
            if want:
                assert stat.median == pytest.approx(float(np.median(want)), rel=0.01, abs=0.001), f"{side} {role}"
            seen[role] = seen.get(role, 0) + len(want)
    # the case has every phase to find (the update where the driver has one)
    assert all(seen[p] > 0 for p in ("send", "service", "fetch", "receive")), seen
    assert (seen["update"] > 0) == bool(sim["nic"]["isr_exit_csr"]), seen
    assert (seen.get("refill", 0) > 0) == (sim["nic"]["rx_refill"] == "softirq"), seen


#: The register each driver's interrupt service opens with, during whose access the NIC deasserts INTA#: the
#: e1000 reads ICR (Intel 8254x SDM §13.4.17: reading clears it), sk98lin reads B0_SP_ISRC (which also masks the
#: NIC's interrupts), acenic writes 1 to the mailbox Mb0Lo (interrupts held off during the service).
SERVICE_OPENS = {"intel-pro1000": "ICR", "sk9843": "B0_SP_ISRC", "alteon-acenic": "Mb0Lo"}


@pytest.mark.parametrize("nic", sorted(SERVICE_OPENS))
def test_with_ad_the_register_map_names_the_drivers_sequences(tmp_path, nic):
    # Recorded with AD and decoded: the capture's PCI device ID chooses the NIC's register map, which names
    # every register the driver's sequences access, from the decoded bus alone: a send rings the transmit tail
    # (its doorbell), a service opens with the access that clears INTA#, its update hands the receive ring back
    # (the receive tail) inside the service, so nothing is a refill; sk98lin's update after a sent frame alone
    # clears the transmit queue's interrupt instead (its Q_CSR). The truth only checks the sequences found.
    path = tmp_path / "cap.h5"
    simulate(Scenario(kind="latency", size_bytes=1400, request_bytes=64, count=4), profiles.load("bus", "pci64-66"),
             profiles.load("nic", nic), profiles.load("host", "supermicro-370dle"), path, Recording(with_ad=True))
    decode_file(path)
    with CaptureSet.open(path) as cs:
        t = {n: cs.read_table(n) for n in cs.table_names() if n.startswith(("decoded/", "truth/"))}
        sim = json.loads(cs.attrs["simulation"])
        registers = nic_registers.for_device(cs.source("send_pci").bus["device"])
    assert registers is not None
    timeline = bus.bus_timeline(t["decoded/send_pci/pci"], t["decoded/send_pci/irq"], t["decoded/recv_pci/pci"],
                                t["decoded/recv_pci/irq"], t["decoded/probe/ethernet"], registers=registers)
    for side, hb in (("send", timeline.send), ("recv", timeline.recv)):
        pci = np.sort(t[f"decoded/{side}_pci/pci"], order="t_ns", kind="stable")
        completed = pci["termination"] != b"retry"
        written = np.isin(pci["command"], bus.WRITE_COMMANDS)
        offsets = registers.offsets(pci["address"])
        act = hb.activity
        assert {c.role for c in act.clusters} <= {"send", "interrupt", "update"}, side
        for c in act.clusters:
            rows = [r for r in c.rows if completed[r]]
            named = [registers.name(offsets[r]) for r in rows]
            assert None not in named, f"{side} {c.role} at {c.start_ns} ns: {named}"
            if c.role == "send":
                assert any(written[r] and int(offsets[r]) in registers.transmit_tail for r in rows), named
            elif c.role == "interrupt":
                assert named[0] == SERVICE_OPENS[nic], named
            else:
                queues = registers.receive_tail | (registers.transmit_tail if nic == "sk9843" else frozenset())
                assert any(written[r] and int(offsets[r]) in queues for r in rows), named
        truth = truth_phases(t[f"truth/{side}_pci/transactions"], sim["nic"])
        for phase, events in truth.items():
            assert [round(c.start_ns) for c in act.clusters_of_role(ROLES[phase])] == [round(a) for a, _ in events]
        assert len(truth["send"]) and len(truth["service"]) and len(truth["update"]), side


def test_sk98lins_service_writes_each_queues_csr_only_for_its_own_cause(tmp_path):
    # SkGeIsrOnePort clears the receive queue's interrupt (Q_R1's Q_CSR) only for a receive cause and the
    # transmit queue's (Q_XA1's) only for a transmit cause. Transmit interrupts held back 100 us make the
    # services of one capture take a received frame alone (the first), a received and a sent one, and a sent one
    # alone (the last): the decoded bus (AD probed) shows each service's writes between its read of B0_SP_ISRC
    # and its unmask, B0_IMSK; the truth says what each service took.
    path = tmp_path / "cap.h5"
    nic = replace(profiles.load("nic", "sk9843"), tx_int_delay_us=100.0)
    simulate(Scenario(kind="latency", size_bytes=1400, count=4), profiles.load("bus", "pci64-66"), nic,
             profiles.load("host", "supermicro-370dle"), path, Recording(with_ad=True))
    decode_file(path)
    with CaptureSet.open(path) as cs:
        pcis = {side: cs.read_table(f"decoded/{side}_pci/pci") for side in ("send", "recv")}
        served = cs.read_table("truth/interrupts")
        registers = nic_registers.for_device(cs.source("send_pci").bus["device"])
    assert registers is not None
    kinds: Counter[tuple[bool, bool]] = Counter()
    for side, pci in pcis.items():
        pci = np.sort(pci[(pci["kind"] == b"csr") & (pci["termination"] != b"retry")], order="t_ns", kind="stable")
        names = [registers.name(o) for o in registers.offsets(pci["address"])]
        writes = np.isin(pci["command"], bus.WRITE_COMMANDS)
        opens = [k for k, n in enumerate(names) if n == "B0_SP_ISRC"]
        truth = served[served["host"] == side.encode()]
        assert len(opens) == len(truth), side
        for k, rx, tx in zip(opens, truth["rx_frames"], truth["tx_frames"]):
            end = names.index("B0_IMSK", k)
            queues = {names[j] for j in range(k, end) if writes[j] and names[j].endswith("Q_CSR")}
            want = {name for name, cause in (("Q_R1 Q_CSR", rx), ("Q_XA1 Q_CSR", tx)) if cause}
            assert queues == want, (side, k, rx, tx)
            kinds[bool(rx), bool(tx)] += 1
    assert kinds[True, False] and kinds[False, True] and kinds[True, True], kinds


def _evidence(gaps_ns: list[list[float]]) -> bus._Evidence:
    """Evidence of a driver whose one-access send and three-access service stood alone five times each."""
    send, service = ((5, b"", b"normal"),), ((13, b"", b"normal"), (5, b"", b"normal"), (5, b"", b"normal"))
    return bus._Evidence(sends=Counter({send: 5}), services=Counter({service: 5}), gaps={service: gaps_ns})


def test_a_service_is_cut_only_where_one_gap_stands_out():
    clear = bus.driver_sequences(_evidence([[1500.0, 300.0]] * 5))
    assert clear is not None and not clear.uncut
    assert (len(clear.service), len(clear.update)) == (1, 2)
    # the CPU's longest gap hidden (both alike): no cut at a guess, the service whole and said so
    unclear = bus.driver_sequences(_evidence([[400.0, 300.0]] * 5))
    assert unclear is not None and unclear.uncut
    assert (len(unclear.service), len(unclear.update)) == (3, 0)


def test_an_uncut_service_is_one_span_from_its_first_access_to_its_update_end(tmp_path, monkeypatch):
    # No service of this capture stands out so far that the margin is met: each is labelled whole, from the
    # access that cleared INTA# to the update's last access, and the bus says the cut was not made.
    path = tmp_path / "cap.h5"
    simulate(Scenario(kind="latency", size_bytes=3000, count=3), profiles.load("bus", "pci64-66"),
             profiles.load("nic", "sk9843"), profiles.load("host", "supermicro-370dle"), path)
    decode_file(path)
    with CaptureSet.open(path) as cs:
        t = {n: cs.read_table(n) for n in cs.table_names() if n.startswith(("decoded/", "truth/"))}
        sim = json.loads(cs.attrs["simulation"])
    monkeypatch.setattr(bus, "SERVICE_CUT_MARGIN", 1e9)
    timeline = bus.bus_timeline(t["decoded/send_pci/pci"], t["decoded/send_pci/irq"], t["decoded/recv_pci/pci"],
                                t["decoded/recv_pci/irq"], t["decoded/probe/ethernet"])
    for side, hb in (("send", timeline.send), ("recv", timeline.recv)):
        truth = truth_phases(t[f"truth/{side}_pci/transactions"], sim["nic"])
        assert hb.activity.service_uncut
        assert hb.activity.clusters_of_role("update") == [] and hb.csr.update_us.count == 0
        found = hb.activity.clusters_of_role("interrupt")
        assert [(round(c.start_ns), round(c.end_ns)) for c in found] == [
            (round(a), round(u)) for (a, _), (_, u) in zip(truth["service"], truth["update"], strict=True)]
    note = report._labelling_note([timeline.send, timeline.recv], ["send_pci", "recv_pci"])
    assert "send_pci and recv_pci: the bus did not show where" in note and "update is not measured" in note
    assert "could not be learnt" not in note


def test_sequences_not_learnt_are_said_in_the_report(tmp_path):
    # A round trip cut where the response starts on the wire: one send setup and one service on each bus at
    # most, none seen twice, so the driver's sequences cannot be learnt and the accesses fall back to runs; the
    # bus table's note must say which rows are of those runs, and the report keep its rules.
    path = tmp_path / "cap.h5"
    simulate(Scenario(kind="latency", size_bytes=64, count=1), profiles.load("bus", "pci64-66"),
             profiles.load("nic", "intel-pro1000"), profiles.load("host", "supermicro-370dle"), path)
    decode_file(path)
    sources = ("send_pci/pci", "send_pci/irq", "recv_pci/pci", "recv_pci/irq", "probe/ethernet")
    with CaptureSet.open(path) as cs:
        whole = {n: cs.read_table(f"decoded/{n}") for n in sources}
    learnt = bus.bus_timeline(*whole.values())
    assert not learnt.send.activity.sequences_unlearnt  # the whole round trip
    cut = whole["probe/ethernet"]["t_ns"][1]
    tables = {n: v[v["t_end_ns"] <= cut] for n, v in whole.items()}
    timeline = bus.bus_timeline(*tables.values())
    assert timeline.send.activity.sequences_unlearnt and timeline.recv.activity.sequences_unlearnt
    for runs, sequences in ((timeline.send, learnt.send), (timeline.recv, learnt.recv)):
        # a run holds completed accesses, and a service starts where the learnt one does: with the first attempt
        # of the access that cleared INTA# (the 82544 retries it), not at the attempt that completed
        assert all(c.accesses for c in runs.activity.clusters)
        begun = [c.start_ns for c in runs.activity.clusters_of_role("interrupt")]
        assert begun and begun == [c.start_ns for c in sequences.activity.clusters_of_role("interrupt")][:len(begun)]
        assert all(runs.activity.clusters[it.service_cluster].retries for it in runs.activity.interrupts)
    assert not timeline.send.activity.service_uncut
    one = bus.bus_activity(tables["send_pci/pci"], tables["send_pci/irq"], bus.data_frames(tables["probe/ethernet"],
                                                                                            b"rx"),
                           bus.data_frames(tables["probe/ethernet"], b"tx"))
    assert one.sequences_unlearnt
    sec = report.capture_section(path.name, tables, {}, report.Options())
    text = render.to_json(report.new_report("fallback", [], [sec, report.reference_section(report.Options(), [sec])],
                                            []))
    assert lint.problems(lint.read(text)) == []
    measured = next(t for t in json.loads(text)["sections"][0]["tables"] if t["title"] == report.BUS_TABLE)
    note = measured["note"]
    assert "send_pci and recv_pci: the driver's register sequences could not be learnt" in note
    labels = [r[0] for r in measured["rows"]]
    for row in report.SEQUENCE_ROWS:  # each row the note names is the table's, and measured on the runs
        assert f"'{row}'" in note and row in labels
    assert "bus did not show where" not in note
    one_way = next(t for t in json.loads(text)["sections"][0]["interpretation"] if "first CSR access" in t)
    assert "(runs of CSR accesses, not the driver's sequences: see the bus table)" in one_way
