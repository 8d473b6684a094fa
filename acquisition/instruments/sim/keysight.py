"""Keysight InfiniiVision 3000/4000 X-Series MSO, as its programmer's guide describes the digital channels.

Sixteen digital channels D0-D15 in two pods (POD1 = D0-D7, POD2 = D8-D15).
A single acquisition is ``:SINGle``; ``:TER?`` reads (and clears) the trigger
event register and bit 3 (Run, 8) of ``:OPERegister:CONDition?`` stays set
until the acquisition is complete. ``:DIGitize [<source>[,...]]`` is the
guide's sequential acquisition command: it acquires, stops the instrument,
and the commands after it (``*OPC?`` in the guide's "blocking
synchronization") run only when it is done. Before any acquisition
``:WAVeform:PREamble?`` answers 0 points and a zero x increment ("no data has
been acquired") and ``:WAVeform:DATA?`` an empty block, each queueing -230.
The sample rate follows from ``:TIMebase:RANGe`` and the record length
(``:WAVeform:POINts`` in RAW mode);
``:TIMebase:REFerence LEFT|CENTer|RIGHt`` puts the trigger at 10, 50 or 90 %
of the record. Pod data: ``:WAVeform:SOURce POD1``, ``:WAVeform:UNSigned ON``
(required for pods), ``:WAVeform:FORMat BYTE`` (one byte per point, bit k =
D(8(p-1)+k)) or ``WORD`` (two bytes, the other byte 0, order by
``:WAVeform:BYTeorder``), ``:WAVeform:PREamble?`` (10 fields) and
``:WAVeform:DATA?`` (a definite-length block).
"""

from __future__ import annotations

import re

from nicrig.acquisition.instruments.sim.scope import EXTERNAL, ScpiError
from nicrig.acquisition.instruments.sim.server import (
    AfterAcquisition,
    Answer,
    Block,
    Dialect,
    Handler,
    choice,
    on_off,
    parse_bool,
    parse_choice,
    parse_number,
    query_only,
    short_form,
)

THRESHOLD_PRESETS = {"TTL": 1.4, "CMOS50": 2.5, "CMOS33": 1.65, "CMOS25": 1.25, "ECL": -1.3, "PECL": 3.7}
REFERENCE_FRACTION = {"LEFT": 0.1, "CENTer": 0.5, "RIGHt": 0.9}


def nr3(value: float) -> str:
    return f"{value:+.8E}"


#: What ``:DIGitize`` may name: analog channels, digital channels, pods, buses, math (4000 X guide, ":DIGitize").
DIGITIZE_SOURCE = re.compile(r"^(?:CHAN(?:NEL)?[1-4]|DIG(?:ITAL)?(?:[0-9]|1[0-5])|POD[12]|BUS[12]|FUNC(?:TION)?|MATH)$")


class KeysightX4000(Dialect):
    model = "keysight-msox4000"
    idn = "KEYSIGHT TECHNOLOGIES,MSO-X 4104A,MY00000001,07.50.2021102830"
    pods = 2
    block_digits = 8  # the guide's data blocks: "#800001000"

    def __init__(self, scope):  # type: ignore[no-untyped-def]
        super().__init__(scope)
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.range_s = 1e-6
        self.reference = "CENTer"
        self.wav_source = "POD1"
        self.wav_format = "BYTE"
        self.unsigned = True
        self.byteorder = "MSBFirst"
        self.points_mode = "NORMal"
        self.displayed = {1: True, 2: True}

    def commands(self) -> list[tuple[str, Handler]]:
        return self.common() + [
            (":SYSTem:ERRor", lambda q, a, n: query_only(q) or self.system_error("+0")),
            (":DIGitize", self._digitize),
            (":SINGle", self._single),
            (":STOP", lambda q, a, n: self.scope.stop()),
            (":RUN", self._single),
            (":TER", self._ter),
            (":OPERegister:CONDition", lambda q, a, n: query_only(q) or ("+8" if self.scope.update() == "armed"
                                                                          else "+0")),
            (":TIMebase:RANGe", self._range),
            (":TIMebase:REFerence", self.setting("reference", choice(*REFERENCE_FRACTION), short_form)),
            (":ACQuire:SRATe", lambda q, a, n: query_only(q) or nr3(self._apply_rate())),
            (":ACQuire:POINts", lambda q, a, n: query_only(q) or f"{self.scope.points:+d}"),
            (":POD#:THReshold", self._threshold),
            (":POD#:DISPlay", self._pod_display),
            (":DIGital#:DISPlay", lambda q, a, n: None if not q else "1"),
            (":TRIGger:MODE", lambda q, a, n: "EDGE" if q else parse_choice(a, ["EDGE"]) and None),
            (":TRIGger:EDGE:SOURce", self._trigger_source),
            (":TRIGger:EDGE:SLOPe", self._slope),
            (":WAVeform:SOURce", self._wav_source),
            (":WAVeform:FORMat", self.setting("wav_format", choice("BYTE", "WORD", "ASCii"), short_form)),
            (":WAVeform:UNSigned", self.setting("unsigned", parse_bool, on_off)),
            (":WAVeform:BYTeorder", self.setting("byteorder", choice("LSBFirst", "MSBFirst"), short_form)),
            (":WAVeform:POINts:MODE", self.setting("points_mode", choice("NORMal", "MAXimum", "RAW"), short_form)),
            (":WAVeform:POINts", self._points),
            (":WAVeform:PREamble", self._preamble),
            (":WAVeform:DATA", self._data),
        ]

    # -- acquisition ----------------------------------------------------------------------------
    def _apply_rate(self) -> float:
        return self.scope.fit_rate(self.range_s)

    def _single(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            raise ScpiError(-113, "Undefined header")
        self._apply_rate()
        self.scope.pre_fraction = REFERENCE_FRACTION[self.reference]
        self.scope.arm()
        return None

    def _digitize(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            raise ScpiError(-113, "Undefined header")
        sources = [a.strip().upper() for a in arg.split(",")] if arg.strip() else []
        if any(not DIGITIZE_SOURCE.match(s) for s in sources):
            raise ScpiError(-224, "Illegal parameter value")
        self._single(False, "", nums)
        return AfterAcquisition()

    def format_esr(self, value: int) -> str:
        return f"{value:+d}"

    def _ter(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        self.scope.update()
        fired, self.scope.triggered_flag = self.scope.triggered_flag, False
        return "+1" if fired else "+0"

    def _range(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return nr3(self.range_s)
        value = parse_number(arg)
        if not 2e-9 <= value <= 500.0:
            raise ScpiError(-222, "Data out of range")
        self.range_s = value
        return None

    def _threshold(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        pod = nums[0]
        if pod not in (1, 2):
            raise ScpiError(-114, "Header suffix out of range")
        if query:
            return nr3(self.scope.thresholds.get(pod, 1.4))
        key = arg.strip().upper()
        value = THRESHOLD_PRESETS[key] if key in THRESHOLD_PRESETS else parse_number(arg)
        if not -8.0 <= value <= 8.0:
            raise ScpiError(-222, "Data out of range")
        self.scope.thresholds[pod] = value
        return None

    def _pod_display(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if nums[0] not in (1, 2):
            raise ScpiError(-114, "Header suffix out of range")
        if query:
            return "1" if self.displayed[nums[0]] else "0"
        self.displayed[nums[0]] = parse_bool(arg)
        return None

    def _trigger_source(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        s = self.scope
        if query:
            return "EXT" if s.trigger_wire == EXTERNAL else self._trigger_name
        a = arg.strip().upper()
        if a in ("EXT", "EXTERNAL"):
            s.trigger_wire, self._trigger_name = EXTERNAL, "EXT"
        elif a.startswith("D") and a[1:].isdigit() and int(a[1:]) < 16:
            d = int(a[1:])
            s.trigger_wire, self._trigger_name = s.wire_of(d // 8 + 1, d % 8) or "", f"D{d}"
        elif a.startswith("CHAN") and a[-1:].isdigit():
            s.trigger_wire, self._trigger_name = "", f"CHAN{a[-1]}"  # analog inputs see nothing here
        else:
            raise ScpiError(-224, "Illegal parameter value")
        return None

    _trigger_name = "D0"

    def _slope(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        names = {"falling": "NEG", "rising": "POS", "either": "EITH"}
        if query:
            return names[self.scope.trigger_slope]
        choice = parse_choice(arg, ["POSitive", "NEGative", "EITHer", "ALTernate"])
        self.scope.trigger_slope = {"POSitive": "rising", "NEGative": "falling"}.get(choice, "either")
        return None

    # -- waveform transfer ----------------------------------------------------------------------
    def _wav_source(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return self.wav_source
        a = arg.strip().upper()
        if a not in ("POD1", "POD2", "CHAN1", "CHAN2", "CHAN3", "CHAN4", "CHANNEL1", "CHANNEL2", "CHANNEL3",
                     "CHANNEL4", "BUS1", "BUS2"):
            raise ScpiError(-224, "Illegal parameter value")
        self.wav_source = a.replace("CHANNEL", "CHAN")
        return None

    def _points(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return f"{self.scope.points:+d}"
        self.scope.set_points(int(parse_number(arg)))
        return None

    def _pod(self) -> int:
        if not self.wav_source.startswith("POD"):
            raise ScpiError(-222, "Data out of range; no digital data for an analog source here")
        return int(self.wav_source[3])

    def _preamble(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        fmt = {"BYTE": 0, "WORD": 1, "ASCii": 4}[self.wav_format]
        points, xincrement, xorigin = self.record_geometry()
        return ",".join([f"{fmt:+d}", "+0", f"{points:+d}", "+1", nr3(xincrement), nr3(xorigin), "+0",
                         nr3(1.0), nr3(0.0), "+0"])

    def _data(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        try:
            pod = self._pod()
            rec = self.scope.require_record()
        except ScpiError as exc:
            return self.no_data(exc)
        if not self.unsigned:
            raise ScpiError(-221, "Settings conflict; :WAVeform:UNSigned must be ON for digital channels")
        values = rec.pods[pod]
        if self.wav_format == "BYTE":
            return Block(values.tobytes())
        if self.wav_format == "WORD":
            return Block(values.astype(">u2" if self.byteorder == "MSBFirst" else "<u2").tobytes())
        return Block(",".join(str(int(v)) for v in values).encode())


class KeysightX3000(KeysightX4000):
    model = "keysight-msox3000"
    idn = "KEYSIGHT TECHNOLOGIES,MSO-X 3104T,MY00000002,07.50.2021102830"
