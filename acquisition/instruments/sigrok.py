"""Logic analyzers that libsigrok drives (``demo``, ``fx2lafw``, ``dreamsourcelab-dslogic`` ...), through sigrok-cli.

Arming starts ``sigrok-cli -d DRIVER ... -O srzip -o FILE.sr``; the acquisition
is done when sigrok-cli exits; the session file is read with
:func:`nicrig.acquisition.srzip.read_sr` and streamed into the capture set.
Pod ``p`` bit ``b`` of a probe map is the device's logic channel ``8(p-1)+b``
(``D0``..``D15`` on fx2lafw, ``0``..``15`` on DSLogic); sigrok-cli renames
the channels to the probe map's signals (``-C D0=FRAME#,...``). Without a
probe map every logic channel is recorded under the device's names.

libsigrok triggers in software: with a trigger, the recording starts at the
trigger (``captureratio=0``), so the trigger is sample 0 and there are no
pre-trigger samples.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition.instruments.driver import (
    Identity,
    Instrument,
    InstrumentError,
    Progress,
    RecordInfo,
    Settings,
    UnsupportedSetting,
)
from nicrig.acquisition.instruments.probemap import POD_BITS, PodAssembler, ProbeMap
from nicrig.acquisition.srzip import read_sr

from nicrig.errors import UsageError

SLOPES = {"rising": "r", "falling": "f", "either": "e"}
#: Samples handed to the capture set at a time.
BLOCK = 1 << 20


def sigrok_cli() -> str:
    path = shutil.which("sigrok-cli")
    if path is None:
        raise UsageError("sigrok-cli is not installed (Debian/Ubuntu: apt-get install sigrok-cli)")
    return path


def parse_show(text: str) -> list[str]:
    """The logic channels ``sigrok-cli -d DRIVER --show`` lists, in device order."""
    group = re.search(r"^\s*Logic: channels (.+)$", text, re.MULTILINE)
    if group:
        return group[1].split()
    header = re.search(r"with \d+ channels?: (.+)$", text, re.MULTILINE)
    if header:
        return header[1].split()
    raise InstrumentError(f"sigrok-cli --show named no channels: {text.strip()[:200]!r}")


def device_probe_map(driver: str, channels: list[str]) -> ProbeMap:
    """Every logic channel under the device's own name: channel ``i`` on pod ``i // 8 + 1``, bit ``i % 8``."""
    return ProbeMap(name=f"sigrok-{driver}", signals={(i // POD_BITS + 1, i % POD_BITS): ch
                                                     for i, ch in enumerate(channels)})


class SigrokDevice(Instrument):
    model = "sigrok"

    def __init__(self, name: str, driver: str, *, conn: str | None = None, options: list[str] | None = None,
                 timeout_s: float = 20.0):
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", driver):
            raise UsageError(f"sigrok driver {driver!r}: a libsigrok driver name such as demo or fx2lafw")
        self.driver = driver
        self.conn = conn
        self.options = list(options or [])
        for opt in self.options:
            if "=" not in opt or ":" in opt:
                raise UsageError(f"sigrok option {opt!r}: KEY=VALUE (one per option)")
        super().__init__(name, f"sigrok:{self.device}")
        self.timeout_s = timeout_s
        self.channels: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._argv: list[str] = []
        self._session: Any = None

    @property
    def device(self) -> str:
        return self.driver + (f":conn={self.conn}" if self.conn else "")

    def identify(self) -> Identity:
        try:
            proc = subprocess.run([sigrok_cli(), "-d", self.device, "--show"], capture_output=True, text=True, check=False,
                                  timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise InstrumentError(f"{self.name}: sigrok-cli --show for {self.device} took over {self.timeout_s:g} s")
        text = proc.stdout + proc.stderr
        if proc.returncode != 0 or "No devices found" in text:
            raise InstrumentError(f"{self.name}: no sigrok device {self.device!r} found "
                                  f"({' '.join(text.split())[:200] or 'sigrok-cli exit ' + str(proc.returncode)})")
        self.channels = parse_show(text)
        version = subprocess.run([sigrok_cli(), "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
        self.identity = Identity("sigrok", self.driver, self.conn or "", version.strip())
        return self.identity

    def default_probe_map(self) -> ProbeMap:
        return device_probe_map(self.driver, self.channels)

    def configure(self, settings: Settings) -> None:
        pm = settings.probe_map
        renames = []
        for (pod, bit), signal in sorted(pm.signals.items()):
            index = POD_BITS * (pod - 1) + bit
            if index >= len(self.channels):
                raise UnsupportedSetting(f"{self.label}: probe map {pm.name!r} puts {signal} on pod {pod} bit {bit}, "
                                         f"but the device has {len(self.channels)} logic channels")
            device_name = self.channels[index]
            if any(c in signal for c in ",:="):
                raise UnsupportedSetting(f"{self.label}: sigrok-cli cannot name a channel {signal!r}")
            renames.append(device_name if device_name == signal else f"{device_name}={signal}")
        config = [f"samplerate={round(settings.sample_rate_hz)}", *self.options]
        argv = [sigrok_cli(), "-d", self.device, "-C", ",".join(renames), "--samples", str(settings.record_length)]
        if settings.trigger.signal is not None:
            pm.where(settings.trigger.signal)
            argv += ["-t", f"{settings.trigger.signal}={SLOPES[settings.trigger.slope]}"]
            config.append("captureratio=0")
        self._argv = argv + ["-c", ":".join(config)]
        self.settings = settings

    def arm(self) -> None:
        self.close()
        self._tmp = tempfile.TemporaryDirectory(prefix="nicrig-sigrok-")
        out = Path(self._tmp.name) / "capture.sr"
        self._proc = subprocess.Popen([*self._argv, "-O", "srzip", "-o", str(out)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
        self._session = None

    def done(self) -> bool:
        if self._proc is None:
            raise InstrumentError(f"{self.label}: not armed")
        if self._proc.poll() is None:
            return False
        _, err = self._proc.communicate()
        text = " ".join(err.decode("utf-8", "replace").split())
        out = Path(self._tmp.name) / "capture.sr"  # type: ignore[union-attr]
        if self._proc.returncode != 0 or not out.exists():
            raise InstrumentError(f"{self.label}: sigrok-cli failed (exit {self._proc.returncode}): {text[:300]}")
        self._session = read_sr(out)
        self._stderr = text
        return True

    def record_info(self) -> RecordInfo:
        if self._session is None:
            raise InstrumentError(f"{self.label}: no acquisition to read")
        s = self._session
        rate = s.samplerate_hz or float(self.settings.sample_rate_hz)  # type: ignore[union-attr]
        return RecordInfo(rate, len(s.samples), 0, {"sigrok-cli": " ".join(self._argv[1:])})

    def fetch(self, assembler: PodAssembler, progress: Progress | None = None) -> None:
        samples: np.ndarray = self._session.samples
        for start in range(0, len(samples), BLOCK):
            block = samples[start:start + BLOCK]
            for pod in assembler.pm.pods:
                column = block[:, pod - 1] if pod - 1 < block.shape[1] else np.zeros(len(block), np.uint8)
                assembler.add(pod, np.ascontiguousarray(column).tobytes())
            if progress:
                progress(len(block) * len(assembler.pm.pods))

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"driver": self.driver, "conn": self.conn, "argv": self._argv[1:],
                                     "notes": getattr(self, "_stderr", "")}

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
