"""Keysight (Agilent) InfiniiVision 3000 X / 4000 X MSO: the digital channels over SCPI.

The commands, from the InfiniiVision 3000 X / 4000 X programmer's guides:

* setup: ``:STOP``; ``:POD<n>:DISPlay ON`` and ``:POD<n>:THReshold <V>`` per pod;
  ``:TRIGger:MODE EDGE``, ``:TRIGger:EDGE:SOURce D<n>|EXTernal``,
  ``:TRIGger:EDGE:SLOPe POSitive|NEGative|EITHer``; ``:TIMebase:REFerence
  LEFT|CENTer|RIGHt`` (trigger at 10, 50 or 90 % of the record);
  ``:WAVeform:POINts:MODE RAW``, ``:WAVeform:POINts <n>``,
  ``:TIMebase:RANGe <n / rate>``; ``:ACQuire:SRATe?`` reads the rate back;
* acquire: ``:TER?`` (clears the trigger event register), ``:SINGle``, then
  poll ``:TER?`` until 1 and ``:OPERegister:CONDition?`` until its Run bit
  (8) clears;
* read: per pod ``:WAVeform:SOURce POD1|POD2``, ``:WAVeform:UNSigned ON``,
  ``:WAVeform:FORMat BYTE|WORD``, ``:WAVeform:BYTeorder LSBFirst``,
  ``:WAVeform:PREamble?`` (10 fields, kept verbatim) and ``:WAVeform:DATA?``,
  a definite-length block. Sample ``i`` is at ``(i - xreference) * xincrement + xorigin``.
* errors: ``:SYSTem:ERRor?`` until ``+0,"No error"``.
"""

from __future__ import annotations

import numpy as np
from nicrig.acquisition.instruments.driver import (
    InstrumentError,
    Progress,
    RecordInfo,
    ScpiInstrument,
    Settings,
    UnsupportedSetting,
    parse_preamble,
)
from nicrig.acquisition.instruments.probemap import PodAssembler

REFERENCES = {0.1: "LEFT", 0.5: "CENTer", 0.9: "RIGHt"}
SLOPES = {"rising": "POSitive", "falling": "NEGative", "either": "EITHer"}
#: Run bit of the operation status condition register: set while an acquisition runs.
RUN_BIT = 8


class WordLowBytes:
    """WORD pod data (LSB first) to one byte per point, across chunk boundaries; the upper bytes must be 0."""

    def __init__(self) -> None:
        self._odd = b""

    def __call__(self, data: bytes) -> bytes:
        data = self._odd + data
        cut = len(data) - len(data) % 2
        self._odd = data[cut:]
        words = np.frombuffer(data[:cut], dtype="<u2")
        if np.any(words >> 8):
            raise InstrumentError("WORD pod data with a non-zero upper byte: not pod data")
        return words.astype(np.uint8).tobytes()


class KeysightInfiniiVision(ScpiInstrument):
    model = "keysight-msox4000"
    manufacturers = r"^(KEYSIGHT|AGILENT)"
    models = r"^MSO-?X\s*4\d{3}"
    pods = 2
    data_formats = ("BYTE", "WORD")

    def __init__(self, name: str, resource: str, **kw):  # type: ignore[no-untyped-def]
        super().__init__(name, resource, **kw)
        self._triggered = False

    def read_errors(self) -> list[str]:
        return self.drain_error_queue(":SYSTem:ERRor?")

    def setup_commands(self, settings: Settings) -> list[str]:
        pm, trig = settings.probe_map, settings.trigger
        reference = REFERENCES.get(round(trig.position, 3))
        if reference is None:
            raise UnsupportedSetting(f"{self.label}: trigger position {trig.position:g}: InfiniiVision places the "
                                     "trigger at 0.1, 0.5 or 0.9 of the record (:TIMebase:REFerence LEFT|CENTer|RIGHt)")
        if trig.signal is None:
            source = "EXTernal"
        else:
            pod, bit = pm.where(trig.signal)
            source = f"D{8 * (pod - 1) + bit}"
        cmds = [":STOP", f":TIMebase:REFerence {reference}"]
        for pod in pm.pods:
            cmds += [f":POD{pod}:DISPlay ON", f":POD{pod}:THReshold {settings.threshold_v:g}"]
        return cmds + [
            ":TRIGger:MODE EDGE", f":TRIGger:EDGE:SOURce {source}", f":TRIGger:EDGE:SLOPe {SLOPES[trig.slope]}",
            ":WAVeform:POINts:MODE RAW", f":WAVeform:POINts {settings.record_length}",
            f":TIMebase:RANGe {settings.record_length / settings.sample_rate_hz:.9E}",
            ":WAVeform:UNSigned ON", f":WAVeform:FORMat {self.data_format}", ":WAVeform:BYTeorder LSBFirst",
        ]

    def actual_rate(self) -> float:
        return float(self.conn.query(":ACQuire:SRATe?"))

    def arm(self) -> None:
        self.conn.query(":TER?")
        self.conn.write(":SINGle")
        self._triggered = False
        self.info = None

    def done(self) -> bool:
        if not self._triggered:
            self._triggered = int(float(self.conn.query(":TER?"))) == 1
        return self._triggered and not int(float(self.conn.query(":OPERegister:CONDition?"))) & RUN_BIT

    def record_info(self) -> RecordInfo:
        preambles, parsed = {}, []
        for pod in self.settings.probe_map.pods:  # type: ignore[union-attr]
            self.conn.write(f":WAVeform:SOURce POD{pod}")
            text = self.conn.query(":WAVeform:PREamble?")
            preambles[f"POD{pod}"] = text
            parsed.append(parse_preamble(text))
        first = parsed[0]
        expected = {"BYTE": 0, "WORD": 1}[self.data_format]
        for pod, p in zip(self.settings.probe_map.pods, parsed):  # type: ignore[union-attr]
            if p.format != expected:
                raise InstrumentError(f"{self.label}: POD{pod} preamble says format {p.format}, "
                                      f"not {expected} ({self.data_format})")
            if (p.points, p.xincrement, p.xorigin, p.xreference) != (first.points, first.xincrement, first.xorigin,
                                                                     first.xreference):
                raise InstrumentError(f"{self.label}: the pods' preambles disagree: {preambles}")
        self.info = RecordInfo(1.0 / first.xincrement, first.points, first.trigger_sample, preambles)
        return self.info

    def fetch(self, assembler: PodAssembler, progress: Progress | None = None) -> None:
        info = self.record_info() if self.info is None else self.info
        width = 2 if self.data_format == "WORD" else 1
        for pod in assembler.pm.pods:
            self.conn.write(f":WAVeform:SOURce POD{pod}")
            convert = WordLowBytes() if width == 2 else bytes
            self.read_pod(":WAVeform:DATA?", pod, info.points, assembler, progress, convert, width)

    def describe(self) -> dict[str, object]:
        return super().describe() | {"data_format": self.data_format}


class KeysightInfiniiVision3000(KeysightInfiniiVision):
    model = "keysight-msox3000"
    models = r"^MSO-?X\s*3\d{3}"
