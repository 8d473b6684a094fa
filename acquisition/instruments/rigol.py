"""Rigol MSO5000: the logic analyzer channels over SCPI.

The commands, from the MSO5000 programming guide:

* setup: ``:STOP``; ``:LA:STATe ON``; ``:LA:POD<n>:DISPlay ON`` and
  ``:LA:POD<n>:THReshold <V>``; ``:ACQuire:MDEPth <points>`` (1k, 10k, 100k,
  1M, 10M, 25M, 50M, 100M, 200M); ``:TIMebase:MAIN:SCALe <s/div>`` (ten
  divisions: rate = depth / (10 * scale)); ``:TIMebase:MAIN:OFFSet`` (the
  trigger's distance from the screen centre); ``:TRIGger:MODE EDGE``,
  ``:TRIGger:EDGE:SOURce D<n>``, ``:TRIGger:EDGE:SLOPe POSitive|NEGative|RFALl``;
  ``:ACQuire:SRATe?`` reads the rate back. The MSO5000 has no external trigger
  input: wire the master's trigger output to a digital channel and trigger on it.
* acquire: ``:SINGle``, then poll ``:TRIGger:STATus?`` until ``STOP``.
* read (stopped, RAW mode): per pod ``:WAVeform:SOURce D0`` (or D8),
  ``:WAVeform:MODE RAW``, ``:WAVeform:FORMat BYTE``, ``:WAVeform:PREamble?``
  (kept verbatim); then in batches of at most 250 000 points
  ``:WAVeform:STARt <a>``, ``:WAVeform:STOP <b>``, ``:WAVeform:DATA?``, each a
  ``#9`` block, one byte per point holding the pod's eight channels.
* errors: ``:SYSTem:ERRor?`` until ``0,"No error"``.
"""

from __future__ import annotations

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

MEMORY_DEPTHS = (1_000, 10_000, 100_000, 1_000_000, 10_000_000, 25_000_000, 50_000_000, 100_000_000, 200_000_000)
#: Points one RAW-mode :WAVeform:DATA? may return in BYTE format.
MAX_BATCH = 250_000
SLOPES = {"rising": "POSitive", "falling": "NEGative", "either": "RFALl"}


class RigolMso5000(ScpiInstrument):
    model = "rigol-mso5000"
    manufacturers = r"^RIGOL"
    models = r"^MSO5\d{3}"
    pods = 2

    def read_errors(self) -> list[str]:
        return self.drain_error_queue(":SYSTem:ERRor?")

    def setup_commands(self, settings: Settings) -> list[str]:
        pm, trig, n = settings.probe_map, settings.trigger, settings.record_length
        if n not in MEMORY_DEPTHS:
            raise UnsupportedSetting(f"{self.label}: record length {n}: the MSO5000's memory depths are "
                                     f"{', '.join(f'{d:,}' for d in MEMORY_DEPTHS)}")
        if trig.signal is None:
            raise UnsupportedSetting(f"{self.label}: the MSO5000 has no external trigger input; wire the master's "
                                     "trigger output to a digital channel (TRIG in the probe map) and trigger on it")
        if not 1 <= settings.batch_points <= MAX_BATCH:
            raise UnsupportedSetting(f"{self.label}: batches of 1 to {MAX_BATCH:,} points")
        pod, bit = pm.where(trig.signal)
        scale = n / (10 * settings.sample_rate_hz)
        cmds = [":STOP", ":LA:STATe ON"]
        for p in pm.pods:
            cmds += [f":LA:POD{p}:DISPlay ON", f":LA:POD{p}:THReshold {settings.threshold_v:g}"]
        return cmds + [
            f":ACQuire:MDEPth {n}", f":TIMebase:MAIN:SCALe {scale:.6E}",
            f":TIMebase:MAIN:OFFSet {(0.5 - trig.position) * 10 * scale:.6E}",
            ":TRIGger:MODE EDGE", f":TRIGger:EDGE:SOURce D{8 * (pod - 1) + bit}",
            f":TRIGger:EDGE:SLOPe {SLOPES[trig.slope]}",
        ]

    def actual_rate(self) -> float:
        return float(self.conn.query(":ACQuire:SRATe?"))

    def arm(self) -> None:
        self.conn.write(":SINGle")
        self.info = None

    def done(self) -> bool:
        return self.conn.query(":TRIGger:STATus?").upper() == "STOP"

    def _select(self, pod: int) -> None:
        self.conn.write(f":WAVeform:SOURce D{8 * (pod - 1)}")

    def record_info(self) -> RecordInfo:
        self.conn.write(":STOP")
        preambles, parsed = {}, []
        for pod in self.settings.probe_map.pods:  # type: ignore[union-attr]
            self._select(pod)
            self.conn.write(":WAVeform:MODE RAW")
            self.conn.write(":WAVeform:FORMat BYTE")
            text = self.conn.query(":WAVeform:PREamble?")
            preambles[f"D{8 * (pod - 1)}-D{8 * pod - 1}"] = text
            parsed.append(parse_preamble(text))
        first = parsed[0]
        if any((p.points, p.xincrement, p.xorigin) != (first.points, first.xincrement, first.xorigin) for p in parsed):
            raise InstrumentError(f"{self.label}: the pods' preambles disagree: {preambles}")
        self.info = RecordInfo(1.0 / first.xincrement, first.points, first.trigger_sample, preambles)
        return self.info

    def fetch(self, assembler: PodAssembler, progress: Progress | None = None) -> None:
        def select(pod: int, first: int, last: int) -> None:
            self._select(pod)
            self.conn.write(f":WAVeform:STARt {first}")
            self.conn.write(f":WAVeform:STOP {last}")

        self.fetch_in_batches(assembler, progress, ":WAVeform:DATA?", select)
