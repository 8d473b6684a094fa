"""``--sweep``: MTU and interrupt-coalescing sweeps around latency, stream and suite runs between namespace hosts.

The MTU sweeps change real veth interfaces (``ip link``). A veth has no
interrupt coalescing, so ``ethtool -C`` on it is refused: the tests check that
refusal with the real ethtool, and run the successful coalescing sweeps with a
stand-in ``ethtool`` first on PATH (written by the test: it keeps each
interface's coalescing settings in a file, refuses values above 1000 as a
driver would, and hands every other option to the real ethtool).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import as_from_a_shell
from hypothesis import given
from hypothesis import strategies as st
from netns import two_hosts  # noqa: F401  (fixture)
from nicrig.udpmon import ifsettings as S
from nicrig.udpmon import sweep as W
from nicrig.udpmon.results import ResultsFile
from test_udpmon_suite import SECRET, serve

from nicrig.errors import UsageError

# Every query but coalescing goes straight to the real ethtool: a snapshot between two
# test points runs five of them, and a Python start-up for each made the sweeps slow.
FAKE_ETHTOOL_FRONT = '''#!/bin/sh
case "$1" in
  -c|-C) [ $# -ge 2 ] && exec {python} -S {coalesce} "$@" ;;
esac
exec {real} "$@"
'''

FAKE_ETHTOOL_COALESCE = '''"""A NIC driver's coalescing settings for interfaces that have none (veth): state in $FAKE_ETHTOOL_STATE."""
import json, os, sys
args = sys.argv[1:]
iface = args[1]
path = os.path.join(os.environ["FAKE_ETHTOOL_STATE"], iface + ".json")
state = json.load(open(path)) if os.path.exists(path) else {"rx-usecs": 3, "rx-frames": 0, "tx-usecs": 0,
                                                              "tx-frames": 0, "adaptive-rx": False}
if args[0] == "-c":
    print(f"Coalesce parameters for {iface}:")
    print(f"Adaptive RX: {'on' if state['adaptive-rx'] else 'off'}  TX: n/a")
    for k in ("rx-usecs", "rx-frames", "tx-usecs", "tx-frames"):
        print(f"{k}: {state[k]}")
    print("rx-usecs-irq: n/a")
    sys.exit(0)
pairs = args[2:]
for k, v in zip(pairs[::2], pairs[1::2]):
    if k not in state:
        sys.exit("netlink error: Operation not supported")
    if k == "adaptive-rx":
        state[k] = v == "on"
    elif int(v) > 1000:
        sys.exit("netlink error: Invalid argument")
    else:
        state[k] = int(v)
json.dump(state, open(path, "w"))
'''


# ----------------------------------------------------------------------------- the plan


def test_specs_and_their_steps() -> None:
    a = W.parse_spec("rx-usecs=0,20,40")
    assert a == W.Spec(where="all", name="rx-usecs", values=(0, 20, 40))
    b = W.parse_spec("remote:mtu=1500,9000")
    plan = W.Plan((a, b))
    assert plan.steps == [{"rx-usecs": r, "mtu": m} for r in (0, 20, 40) for m in (1500, 9000)]
    step = plan.steps[3]
    assert plan.for_host(step, "local") == {"rx-usecs": 20}
    assert plan.for_host(step, "peer") == {"rx-usecs": 20, "mtu": 9000}
    assert W.step_label(step) == "rx-usecs=20 mtu=9000"
    assert W.parse_spec("local:adaptive-rx=on,off").values == (True, False)
    table = W.steps_table(plan)
    assert list(table["rx_usecs"]) == [0, 0, 20, 20, 40, 40] and list(table["mtu"]) == [1500, 9000] * 3
    assert table["label"][3] == b"rx-usecs=20 mtu=9000"


@pytest.mark.parametrize("text, message", [
    ("rx-usecs", "SETTING=V1,V2"), ("rx-usec=1", "unknown setting"), ("mtu=1500,1500", "repeated"),
    ("mtu=60", "out of range"), ("adaptive-rx=1", "on or off"), ("rx-usecs=-1", "non-negative"),
    (":mtu=1500", "name the hosts"), ("mtu=", "SETTING=V1,V2"),
])
def test_bad_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        W.parse_spec(text)


@given(st.text(max_size=40))
def test_any_spec_text_parses_or_is_refused_clearly(text: str) -> None:
    try:
        spec = W.parse_spec(text)
    except UsageError as exc:
        assert str(exc)
    else:
        assert spec.name in S.SETTINGS and spec.values


def test_plans_refuse_repeated_settings_and_unknown_hosts() -> None:
    with pytest.raises(UsageError, match="twice"):
        W.Plan((W.parse_spec("mtu=1500"), W.parse_spec("local:mtu=9000")))
    with pytest.raises(UsageError, match="no host 'third'"):
        W.Plan((W.parse_spec("third:mtu=1500"),)).check_labels(["local", "peer"])


def test_commands_and_values() -> None:
    assert S.commands("eth1", {"mtu": 9000, "rx-usecs": 20, "adaptive-rx": False}) == [
        ["ip", "link", "set", "dev", "eth1", "mtu", "9000"], ["ethtool", "-C", "eth1", "rx-usecs", "20", "adaptive-rx", "off"]]
    assert S.check_value("adaptive-rx", True) is True
    for name, value in (("mtu", True), ("rx-usecs", 1.5), ("adaptive-rx", 1), ("mtu", 2**40)):
        with pytest.raises(UsageError):
            S.check_value(name, value)


def test_curves_are_one_per_step() -> None:
    steps = np.array([(0, b"rx-usecs=0"), (1, b"rx-usecs=40")], dtype=[("step", "<i4"), ("label", "S96")])
    table = np.array([(1, 64, 30.0), (0, 1472, 25.0), (0, 64, 20.0), (1, 1472, 65.0)],
                     dtype=[("step", "<i4"), ("size_bytes", "<i4"), ("mean_us", "<f8")])
    c = W.curves(steps, table, "size_bytes", "mean_us")
    assert list(c) == ["rx-usecs=0", "rx-usecs=40"]
    assert list(c["rx-usecs=0"][0]) == [64, 1472] and list(c["rx-usecs=0"][1]) == [20.0, 25.0]


# ----------------------------------------------------------------------------- between two namespace hosts


def mtu(host) -> int:
    return int(json.loads(host.run(["ip", "-j", "link", "show", "dev", host.interface]).stdout)[0]["mtu"])


def install_fake_ethtool(folder: Path) -> dict[str, str] | None:
    """An environment whose PATH starts with the stand-in ethtool (files and state in ``folder``).

    None when the real ethtool, which the stand-in passes every other query to, is not installed.
    """
    real = shutil.which("ethtool")
    if real is None:
        return None
    (folder / "bin").mkdir()
    (folder / "state").mkdir()
    coalesce = folder / "coalesce.py"
    coalesce.write_text(FAKE_ETHTOOL_COALESCE)
    tool = folder / "bin" / "ethtool"
    tool.write_text(FAKE_ETHTOOL_FRONT.format(python=shlex.quote(sys.executable), real=shlex.quote(real),
                                              coalesce=shlex.quote(str(coalesce))))
    tool.chmod(0o755)
    return {**os.environ, "PATH": f"{folder / 'bin'}:{os.environ['PATH']}", "FAKE_ETHTOOL_STATE": str(folder / "state")}


@pytest.fixture
def fake_ethtool(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH starts with the stand-in ethtool, and its state folder."""
    env = install_fake_ethtool(tmp_path)
    if env is None:
        pytest.skip(reason="ethtool is not installed")
    return env


@pytest.fixture
def tuned(two_hosts, tmp_path, fake_ethtool):  # noqa: F811
    """Host b serving with --allow-tuning (and the stand-in ethtool on its PATH); yields (hosts, secret, port, env)."""
    if not two_hosts.isolated:
        pytest.skip(reason=f"sweeps change interfaces: they run in network namespaces only "
                           f"({two_hosts.fallback_reason})")
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    port = serve(two_hosts.b, secret, "--allow-tuning", env=fake_ethtool)
    return two_hosts, secret, port, fake_ethtool


def nicrig(host, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return host.run([sys.executable, "-m", "nicrig", *args], capture_output=True, text=True, timeout=300, env=env)


def test_mtu_sweep_around_latency_puts_the_mtu_back(tuned, tmp_path) -> None:
    hosts, secret, port, _ = tuned
    out = tmp_path / "lat.h5"
    r = nicrig(hosts.a, "udpmon", "latency", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "mtu=1500,4000", "--sizes", "1000,3000,3900", "--count", "20", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert f"restored local {hosts.a.interface}: mtu=1500" in r.stderr
    assert f"restored remote {hosts.b.interface}: mtu=1500" in r.stderr
    assert mtu(hosts.a) == mtu(hosts.b) == 1500
    doc = json.loads(r.stdout)
    assert [s["settings"] for s in doc["steps"]] == [{"mtu": 1500}, {"mtu": 4000}]
    # frames per response follow each step's MTU: 3000 bytes are 3 frames at 1500, 1 at 4000
    assert [x["frames"] for x in doc["steps"][0]["result"]["sizes"]] == [1, 3, 3]
    assert [x["frames"] for x in doc["steps"][1]["result"]["sizes"]] == [1, 1, 1]
    with ResultsFile.open(out) as rf:
        steps = rf.read_table("sweep/steps")
        summary = rf.read_table("sweep/latency")
        applied = rf.read_table("sweep/applied")
        rtt1 = rf.read_table("sweep/step1/latency/rtt")
        counters = rf.counters("sweep/step1/")
        assert "latency/rtt" not in rf.table_names()  # a swept run keeps every step under sweep/
    assert list(steps["mtu"]) == [1500, 4000]
    assert list(summary["step"]) == [0, 0, 0, 1, 1, 1] and (summary["count"] == 20).all()
    assert {(int(a["step"]), a["host"].decode(), a["value"].decode()) for a in applied} == {
        (0, "local", "1500"), (0, "remote", "1500"), (1, "local", "4000"), (1, "remote", "4000")}
    assert len(rtt1) == 60 and (rtt1["rtt_ns"] > 0).all()
    far_after = next(c for _, h, w, c in counters if (h, w) == ("remote", "after"))
    assert far_after["mtu"] == 4000  # the far host's own counters saw the setting in force
    curves = W.curves(steps, summary, "size_bytes", "mean_us")  # seed 002 figure 8.1's shape
    assert list(curves) == ["mtu=1500", "mtu=4000"] and all(len(x) == 3 for x, _ in curves.values())


def test_coalescing_sweep_around_stream(tuned, tmp_path) -> None:
    hosts, secret, port, env = tuned
    out = tmp_path / "bw.h5"
    r = nicrig(hosts.a, "udpmon", "stream", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "rx-usecs=0,20,40", "--sizes", "1000", "--spacing-us", "20,40", "--count", "300", "--idle-timeout-ms", "100",
               "--order", "ascending", "-o", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("== sweep step") == 3
    with ResultsFile.open(out) as rf:
        steps = rf.read_table("sweep/steps")
        points = rf.read_table("sweep/stream")
        applied = rf.read_table("sweep/applied")
        far = next(c for _, h, w, c in rf.counters("sweep/step1/") if (h, w) == ("remote", "delta"))
    assert list(steps["rx_usecs"]) == [0, 20, 40]
    assert list(points["step"]) == [0, 0, 1, 1, 2, 2] and list(points["spacing_us"]) == [20, 40] * 3
    before = {(int(a["step"]), a["host"].decode()): a["before"].decode() for a in applied}
    assert before[(0, "local")] == before[(0, "remote")] == "3"  # what the driver had
    assert far["settings"]["coalesce"]["rx-usecs"] == 20
    curves = W.curves(steps, points, "spacing_us", "user_rate_mbps")  # seed 002 figure 8.2's shape
    assert list(curves) == ["rx-usecs=0", "rx-usecs=20", "rx-usecs=40"]
    for host in (hosts.a, hosts.b):  # put back
        state = json.loads((Path(env["FAKE_ETHTOOL_STATE"]) / f"{host.interface}.json").read_text())
        assert state["rx-usecs"] == 3


def test_a_refused_value_mid_sweep_restores_what_was_changed(tuned, tmp_path) -> None:
    hosts, secret, port, env = tuned
    out = tmp_path / "x.h5"
    r = nicrig(hosts.a, "udpmon", "stream", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "rx-usecs=20,5000", "--count", "100", "-o", str(out), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "refuses rx-usecs=5000" in r.stderr and "Invalid argument" in r.stderr
    assert not out.exists()
    for host in (hosts.a, hosts.b):
        state = json.loads((Path(env["FAKE_ETHTOOL_STATE"]) / f"{host.interface}.json").read_text())
        assert state["rx-usecs"] == 3, host.name


def test_veth_refuses_coalescing_and_says_so(tuned, tmp_path) -> None:
    hosts, secret, port, _ = tuned
    out = tmp_path / "x.h5"
    r = nicrig(hosts.a, "udpmon", "stream", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "rx-usecs=0,20", "--count", "100", "-o", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("nicrig: error: the local host refuses rx-usecs")
    assert "Operation not supported" in line and "its driver does not offer this setting" in line
    assert not out.exists() and mtu(hosts.a) == 1500
    real = serve(hosts.b, secret, "--allow-tuning")  # with the real ethtool
    r = nicrig(hosts.a, "udpmon", "stream", f"{hosts.b.address}:{real}", "--secret-file", str(secret),
               "--sweep", "remote:rx-usecs=0,20", "--count", "100")
    assert r.returncode == 2 and f"host {hosts.b.address} refuses rx-usecs" in r.stderr


def test_dry_run_prints_the_plan_and_changes_nothing(tuned, tmp_path) -> None:
    hosts, secret, port, _ = tuned
    out = tmp_path / "x.h5"
    r = nicrig(hosts.a, "udpmon", "stream", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "mtu=1500,9000", "--dry-run", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "sweep: 2 step(s) of mtu (every host)" in text
    assert f"in force on local {hosts.a.interface}: mtu=1500" in text
    assert f"in force on remote {hosts.b.interface}: mtu=1500" in text
    assert f"step 1: mtu=9000\n    local: ip link set dev {hosts.a.interface} mtu 9000\n" \
           f"    remote: ip link set dev {hosts.b.interface} mtu 9000  (by its daemon)" in text
    assert f"afterwards, restore:\n    local: ip link set dev {hosts.a.interface} mtu 1500" in text
    assert "each step: stream: 1 point(s)" in text
    assert not out.exists() and mtu(hosts.a) == mtu(hosts.b) == 1500
    r = nicrig(hosts.a, "udpmon", "stream", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "mtu=1500,70000", "--dry-run")
    assert r.returncode == 2 and "refuses mtu=70000" in r.stderr and "takes 68 to 65535" in r.stderr


def test_a_daemon_without_allow_tuning_is_named(tuned, tmp_path) -> None:
    hosts, secret, _, _ = tuned
    plain = serve(hosts.b, secret)
    r = nicrig(hosts.a, "udpmon", "latency", f"{hosts.b.address}:{plain}", "--secret-file", str(secret),
               "--sweep", "mtu=1500,4000", "--sizes", "64", "--count", "5")
    assert r.returncode == 2 and "--allow-tuning" in r.stderr
    assert mtu(hosts.a) == mtu(hosts.b) == 1500
    # a sweep of this host alone needs nothing of the daemon
    r = nicrig(hosts.a, "udpmon", "latency", f"{hosts.b.address}:{plain}", "--secret-file", str(secret),
               "--sweep", "local:mtu=1400,1500", "--sizes", "64", "--count", "5", "--json")
    assert r.returncode == 0, r.stderr
    assert [s["settings"] for s in json.loads(r.stdout)["steps"]] == [{"mtu": 1400}, {"mtu": 1500}]
    assert mtu(hosts.a) == 1500


def _until(predicate, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_sweep_puts_every_setting_back(tuned, tmp_path, sig) -> None:
    hosts, secret, port, _ = tuned
    out = tmp_path / "x.h5"
    proc = hosts.a.popen([sys.executable, "-m", "nicrig", "udpmon", "stream", f"{hosts.b.address}:{port}",
                          "--secret-file", str(secret), "--sweep", "mtu=4000,4500,5000", "--sizes", "1000",
                          "--spacing-us", "100", "--count", "100000", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_shell)
    _until(lambda: mtu(hosts.b) == 4000 and mtu(hosts.a) == 4000)
    time.sleep(0.5)  # into the stream
    proc.send_signal(sig)  # ip netns exec execs the command: this is nicrig itself
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "nicrig: interrupted" in err and "restored local" in err and "restored remote" in err
    assert mtu(hosts.a) == mtu(hosts.b) == 1500
    assert not out.exists()


def test_the_daemon_puts_its_host_back_when_its_controller_dies(tuned, tmp_path) -> None:
    hosts, secret, port, _ = tuned
    proc = hosts.a.popen([sys.executable, "-m", "nicrig", "udpmon", "stream", f"{hosts.b.address}:{port}",
                          "--secret-file", str(secret), "--sweep", "remote:mtu=4000,4500", "--sizes", "1000",
                          "--spacing-us", "100", "--count", "100000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _until(lambda: mtu(hosts.b) == 4000)
    proc.kill()  # no chance to restore anything itself
    proc.wait(10)
    _until(lambda: mtu(hosts.b) == 1500, timeout_s=30)


def test_suite_sweep_keeps_a_summary_row_per_step(tuned, tmp_path) -> None:
    hosts, secret, port, _ = tuned
    out = tmp_path / "suite.h5"
    r = nicrig(hosts.a, "udpmon", "suite", "--peer", f"{hosts.b.address}:{port}", "--secret-file", str(secret),
               "--sweep", "mtu=1500,4000,9000", "--tests", "udp-send-1472,tcp-send", "--connections", "2",
               "--trial-s", "0.1", "--max-trials", "2", "--link-mbps", "1000", "-o", str(out))
    assert r.returncode == 0, r.stderr
    with ResultsFile.open(out) as rf:
        rows = rf.read_table("sweep/suite")
        assert rf.table_attrs("sweep/step2/suite/tests")["mtu"] == 9000
    assert list(rows["step"]) == [0, 0, 1, 1, 2, 2] and (rows["throughput"] > 0).all()
    tcp_rows = rows[rows["test"] == b"tcp-send"]
    # the TCP maximum follows the step's MTU (jumbo segments carry more per frame)
    assert tcp_rows["theoretical"] == pytest.approx([1000 * m / (m + 78) for m in (1460, 3960, 8960)])
    assert mtu(hosts.a) == mtu(hosts.b) == 1500
    # each step is one item of seed 000's Table 2: the analysis correlates the tests across them
    from nicrig.analysis.cpu import correlation
    from nicrig.udpmon.suite import throughput_columns

    columns = throughput_columns(rows)
    assert list(columns) == ["udp-send-1472", "tcp-send"] and all(len(c) == 3 for c in columns.values())
    corr = correlation(columns, ["udp-send-1472"], ["tcp-send"])
    assert corr.items == 3 and corr.coefficients.shape == (1, 1)
    assert corr.coefficients[0, 0] == pytest.approx(np.corrcoef(columns["udp-send-1472"], columns["tcp-send"])[0, 1])
