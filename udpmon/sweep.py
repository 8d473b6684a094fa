"""``--sweep``: repeat a latency, stream, suite or aggregate run for each value of interface settings.

Hughes-Jones et al. 2003, §8 measures RTT against response size (figure 8.1) and
throughput against transmit spacing (figures 8.2, 8.3) for RxInt 0, 20, 40,
64 and 100 us; Geist et al. n.d. sweeps RxAbsIntDelay and the MTU; Feng et al. 2003 the MTU.
``--sweep rx-usecs=0,20,40,64,100`` (``ethtool -C``) or ``--sweep
mtu=1500,4500,9000`` (``ip link``) runs the whole measurement once per value
(per combination, when ``--sweep`` is repeated), on this host and, through
their daemons (``serve --allow-tuning``), on the far hosts. A spec may name
where it applies: ``local:rx-usecs=...``, ``remote:...`` (every daemon) or a
host label (``peer:``, ``third:``, ``r2:``); by default everywhere.

The settings in force before the sweep are put back when it ends, whether it
ends well, fails, or is interrupted (Ctrl-C, SIGTERM, SIGHUP); each daemon also
puts back what its session changed when the controller disconnects. Only
SIGKILL escapes: the commands that restore this host are printed before the
first change.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nicrig.udpmon import ifsettings as S

from nicrig.errors import NicrigError, UsageError

ALL, REMOTE, LOCAL = "all", "remote", "local"


@dataclass(frozen=True)
class Spec:
    """One ``--sweep`` option: a setting, its values, and the hosts it applies to."""

    where: str
    name: str
    values: tuple[S.Value, ...]


def parse_spec(text: str) -> Spec:
    """``[HOSTS:]SETTING=V1,V2,...`` -> :class:`Spec` (UsageError saying what is wrong)."""
    head, eq, tail = text.partition("=")
    if not eq or not tail.strip():
        raise UsageError(f"--sweep {text!r}: use SETTING=V1,V2,... (e.g. rx-usecs=0,20,40 or mtu=1500,9000)")
    where, colon, name = head.rpartition(":")
    where = where.strip() if colon else ALL
    name = name.strip()
    if not where:
        raise UsageError(f"--sweep {text!r}: name the hosts before the colon (local, remote, all or a host label)")
    values = tuple(S.parse_value(name, v) for v in tail.split(","))
    if len(set(values)) != len(values):
        raise UsageError(f"--sweep {text!r}: a value is repeated")
    return Spec(where=where, name=name, values=values)


@dataclass(frozen=True)
class Plan:
    """Every step of a sweep: the cartesian product of the specs' values, the first spec outermost."""

    specs: tuple[Spec, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise UsageError(f"--sweep names {', '.join(sorted({n for n in names if names.count(n) > 1}))} twice")

    @property
    def steps(self) -> list[dict[str, S.Value]]:
        return [dict(zip((s.name for s in self.specs), combo))
                for combo in itertools.product(*(s.values for s in self.specs))]

    def for_host(self, step: dict[str, S.Value], label: str) -> dict[str, S.Value]:
        """The settings of ``step`` that apply on the host ``label`` (``local`` or a daemon's label)."""
        return {s.name: step[s.name] for s in self.specs if applies(s.where, label)}

    def check_labels(self, labels: Sequence[str]) -> None:
        known = {ALL, REMOTE, *labels}
        for s in self.specs:
            if s.where not in known:
                raise UsageError(f"--sweep {s.where}:{s.name}: no host {s.where!r} in this run "
                                 f"(hosts: {', '.join(labels)}; or all, remote)")


def applies(where: str, label: str) -> bool:
    return where in (ALL, label) or (where == REMOTE and label != LOCAL)


def step_label(step: dict[str, S.Value]) -> str:
    """``rx-usecs=20 mtu=9000``: a step as its settings."""
    return " ".join(f"{k}={S.show(v)}" for k, v in step.items())


def column(name: str) -> str:
    """A setting's column name in ``sweep/steps``: ``rx-usecs`` -> ``rx_usecs``."""
    return name.replace("-", "_")


# ----------------------------------------------------------------------------- applying


class Sweeper:
    """Applies a plan's steps on this host and the run's daemons, and puts everything back.

    ``local_interface`` is this host's interface under test; ``remotes`` are
    :class:`nicrig.udpmon.flows.Remote` objects (their controllers carry the
    ``set_interface`` requests).
    """

    def __init__(self, plan: Plan, local_interface: str | None, remotes: Sequence[Any]):
        self.plan = plan
        self.remotes = list(remotes)
        plan.check_labels([LOCAL, *(r.label for r in self.remotes)])
        self.local_names = [s.name for s in plan.specs if applies(s.where, LOCAL)]
        if self.local_names and local_interface is None:
            raise UsageError("--sweep: this host's interface toward the far host is unknown; give --interface")
        self.tuner = S.Tuner(local_interface or "", "the local host")
        self.applied: list[tuple[int, str, str, str, str, str]] = []  # step, host, interface, setting, before, now

    def check(self) -> dict[str, dict[str, Any]]:
        """What every host has in force now for the settings it will sweep.

        Every step's values are checked against what each host can tell in
        advance (it can report the setting; an MTU within the device's range;
        the daemon allows tuning): SettingRefused or RefusedError otherwise.
        """
        out: dict[str, dict[str, Any]] = {}
        if self.local_names:
            for step in self.plan.steps:
                now = S.check(self.tuner.interface, self.plan.for_host(step, LOCAL), "the local host")
                out.setdefault(LOCAL, {"interface": self.tuner.interface, "settings": now})
        for r in self.remotes:
            for step in self.plan.steps:
                mine = self.plan.for_host(step, r.label)
                if not mine:
                    break
                reply = r.ctl.check_interface(mine)
                if not reply.get("allow_tuning"):
                    raise S.SettingRefused(f"the udpmon daemon at {r.ctl.where} does not change interface settings: "
                                           f"start it with nicrig udpmon serve --allow-tuning")
                out.setdefault(r.label, reply)
        return out

    def apply(self, index: int, step: dict[str, S.Value]) -> None:
        """Put ``step`` into force everywhere it applies, recording before and after values."""
        if self.local_names:
            mine = self.plan.for_host(step, LOCAL)
            before = self.tuner.set(mine)
            now = S.read(self.tuner.interface, list(mine), "the local host")
            self._record(index, LOCAL, self.tuner.interface, before, now)
        for r in self.remotes:
            mine = self.plan.for_host(step, r.label)
            if mine:
                reply = r.ctl.set_interface(mine)
                self._record(index, r.label, str(reply.get("interface")), reply.get("previous", {}),
                             reply.get("settings", {}))

    def _record(self, index: int, host: str, interface: str, before: dict[str, Any], now: dict[str, Any]) -> None:
        self.applied += [(index, host, interface, k, _text(before.get(k)), _text(v)) for k, v in now.items()]

    def restore(self) -> list[str]:
        """Put back every host's settings; one line per host restored. Tries all before raising."""
        lines, failures = [], []
        if self.tuner.original:
            try:
                done = self.tuner.restore()
                lines.append(f"local {self.tuner.interface}: {step_label(done)}")
            except S.SettingRefused as exc:
                failures.append(str(exc))
        for r in self.remotes:
            if not self.plan.for_host(self.plan.steps[0], r.label):
                continue
            try:
                reply = r.ctl.restore_interface()
            except NicrigError as exc:
                failures.append(f"{r.label} ({r.ctl.where}): {exc} (the daemon restores when the session ends)")
                continue
            if reply.get("restored"):
                lines.append(f"{r.label} {reply.get('interface')}: {step_label(reply['restored'])}")
        if failures:
            raise S.SettingRefused("; ".join(failures))
        return lines

    def restore_commands(self, current: dict[str, dict[str, Any]]) -> list[str]:
        """The commands that would put this host back by hand, from :meth:`check`'s values."""
        local = current.get(LOCAL)
        if not local:
            return []
        return [" ".join(c) for c in S.commands(local["interface"], local["settings"])]

    def describe(self, current: dict[str, dict[str, Any]]) -> list[str]:
        """The plan, for ``--dry-run``: what is in force, what each step sets where, and the way back."""
        hosts = [(LOCAL, self.tuner.interface)] if self.local_names else []
        hosts += [(r.label, current.get(r.label, {}).get("interface", "?")) for r in self.remotes
                  if self.plan.for_host(self.plan.steps[0], r.label)]
        lines = [f"sweep: {len(self.plan.steps)} step(s) of " + ", ".join(
            f"{s.name} ({'every host' if s.where == ALL else s.where})" for s in self.plan.specs)]
        for label, iface in hosts:
            now = current.get(label, {}).get("settings", {})
            lines.append(f"  in force on {label} {iface}: {step_label(now)}")
        for i, step in enumerate(self.plan.steps):
            lines.append(f"step {i}: {step_label(step)}")
            for label, iface in hosts:
                for argv in S.commands(iface, self.plan.for_host(step, label)):
                    via = "" if label == LOCAL else "  (by its daemon)"
                    lines.append(f"    {label}: {' '.join(argv)}{via}")
        lines.append("afterwards, restore:")
        for label, iface in hosts:
            for argv in S.commands(iface, current.get(label, {}).get("settings", {})):
                lines.append(f"    {label}: {' '.join(argv)}")
        return lines


def _text(value: Any) -> str:
    return S.show(value) if isinstance(value, (bool, int)) else ("" if value is None else str(value))


def note(line: str) -> None:
    print(f"nicrig: {line}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- tables


def steps_table(plan: Plan) -> np.ndarray:
    """``sweep/steps``: one row per step, a column per setting (booleans as 0/1)."""
    dtype = [("step", "<i4"), ("label", "S96")] + [(column(s.name), "<i8") for s in plan.specs]
    rows = [(i, step_label(step).encode()[:96], *(int(step[s.name]) for s in plan.specs))
            for i, step in enumerate(plan.steps)]
    return np.array(rows, dtype=dtype)


APPLIED_DTYPE = np.dtype([("step", "<i4"), ("host", "S6"), ("interface", "S16"), ("setting", "S24"),
                          ("before", "S16"), ("value", "S16")])


def applied_table(rows: list[tuple[int, str, str, str, str, str]]) -> np.ndarray:
    return np.array([(i, h.encode(), itf.encode(), k.encode(), b.encode(), v.encode()) for i, h, itf, k, b, v in rows],
                    dtype=APPLIED_DTYPE)


def with_step(step: int, table: np.ndarray) -> np.ndarray:
    """``table`` with a leading ``step`` column."""
    out = np.zeros(len(table), dtype=[("step", "<i4"), *[(n, table.dtype.fields[n][0]) for n in table.dtype.names]])
    out["step"] = step
    for n in table.dtype.names:
        out[n] = table[n]
    return out


def curves(steps: np.ndarray, table: np.ndarray, x: str, y: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One curve per sweep step: ``{step label: (x values, y values)}`` sorted by x.

    ``table`` is a summary table with a ``step`` column (``sweep/latency``,
    ``sweep/stream``, ...). Hughes-Jones et al. 2003, figure 8.1 is
    ``curves(steps, sweep/latency, "size_bytes", "mean_us")``; figure 8.2
    ``curves(steps, sweep/stream, "spacing_us", "user_rate_mbps")``.
    """
    out = {}
    for row in steps:
        mine = table[table["step"] == row["step"]]
        order = np.argsort(mine[x], kind="stable")
        label = row["label"].decode() if isinstance(row["label"], bytes) else str(row["label"])
        out[label] = (mine[x][order], mine[y][order])
    return out
