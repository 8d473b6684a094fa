"""Rigol MSO5000, as its programming guide describes the logic analyzer (LA) channels.

Sixteen digital channels D0-D15 in two pods. ``:SINGle`` arms;
``:TRIGger:STATus?`` answers ``WAIT`` until the acquisition is done, then
``STOP``. The memory depth is ``:ACQuire:MDEPth`` (1k to 200M points); the
sample rate follows from it and ``:TIMebase:MAIN:SCALe`` (ten divisions);
``:TIMebase:MAIN:OFFSet`` moves the trigger from the screen centre. The
internal memory is read in RAW mode only while stopped: ``:WAVeform:SOURce
D0`` (any channel of the pod), ``:WAVeform:MODE RAW``, ``:WAVeform:FORMat
BYTE``, then in batches of at most 250 000 points ``:WAVeform:STARt a``,
``:WAVeform:STOP b`` (1-based, inclusive) and ``:WAVeform:DATA?``, each a
``#9`` block of one byte per point holding the pod's eight channels (D7..D0
from the highest bit). Without a record to send (none acquired, still
running, a range past the record) ``:WAVeform:DATA?`` answers an empty block
and ``:WAVeform:PREamble?`` 0 points, each queueing the error. ``:WAVeform:PREamble?`` has the 10 fields
format, type, points, count, xincrement, xorigin, xreference, yincrement,
yorigin, yreference.
"""

from __future__ import annotations

from nicrig.acquisition.instruments.rigol import MAX_BATCH, MEMORY_DEPTHS
from nicrig.acquisition.instruments.sim.scope import ScpiError
from nicrig.acquisition.instruments.sim.server import (
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
    whole,
)

_DEPTH_WORDS = {"1K": 1_000, "10K": 10_000, "100K": 100_000, "1M": 1_000_000, "10M": 10_000_000,
                "25M": 25_000_000, "50M": 50_000_000, "100M": 100_000_000, "200M": 200_000_000}


class RigolMso5000(Dialect):
    model = "rigol-mso5000"
    idn = "RIGOL TECHNOLOGIES,MSO5104,MS5A000000001,00.01.03.00.02"
    block_digits = 9
    pods = 2

    def __init__(self, scope):  # type: ignore[no-untyped-def]
        super().__init__(scope)
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.scale_s = 1e-6
        self.offset_s = 0.0
        self.source_channel = 0
        self.mode = "NORMal"
        self.fmt = "BYTE"
        self.start, self.stop = 1, 1000
        self.la_on = True
        self.scope.points = 1000

    def commands(self) -> list[tuple[str, Handler]]:
        return self.common() + [
            (":SYSTem:ERRor[:NEXT]", lambda q, a, n: query_only(q) or self.system_error("0")),
            (":SINGle", self._single),
            (":STOP", lambda q, a, n: self.scope.stop()),
            (":RUN", self._single),
            (":TRIGger:STATus", self._status),
            (":ACQuire:MDEPth", self._mdepth),
            (":ACQuire:SRATe", lambda q, a, n: query_only(q) or f"{self._apply_rate():.6E}"),
            (":TIMebase:MAIN:SCALe", self._scale),
            (":TIMebase:MAIN:OFFSet", self.setting("offset_s", parse_number, lambda v: f"{v:.6E}")),
            (":LA:STATe", self.setting("la_on", parse_bool, on_off)),
            (":LA:POD#:DISPlay", lambda q, a, n: "1" if q else parse_bool(a) and None),
            (":LA:POD#:THReshold", self._threshold),
            (":TRIGger:MODE", lambda q, a, n: "EDGE" if q else parse_choice(a, ["EDGE"]) and None),
            (":TRIGger:EDGE:SOURce", self._trigger_source),
            (":TRIGger:EDGE:SLOPe", self._slope),
            (":WAVeform:SOURce", self._source),
            (":WAVeform:MODE", self.setting("mode", choice("NORMal", "MAXimum", "RAW"), short_form)),
            (":WAVeform:FORMat", self.setting("fmt", choice("WORD", "BYTE", "ASCii"), short_form)),
            (":WAVeform:STARt", self.setting("start", whole)),
            (":WAVeform:STOP", self.setting("stop", whole)),
            (":WAVeform:PREamble", self._preamble),
            (":WAVeform:DATA", self._data),
        ]

    def _apply_rate(self) -> float:
        return self.scope.fit_rate(10 * self.scale_s)  # ten divisions

    def _single(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            raise ScpiError(-113, "Undefined header")
        self._apply_rate()
        self.scope.pre_fraction = min(1.0, max(0.0, 0.5 - self.offset_s / (10 * self.scale_s)))
        self.scope.arm()
        return None

    def _status(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        return "WAIT" if self.scope.update() == "armed" else "STOP"

    def _mdepth(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return str(self.scope.points)
        key = arg.strip().upper()
        depth = _DEPTH_WORDS.get(key) or (int(parse_number(arg)) if key not in ("AUTO",) else 1_000)
        if depth not in MEMORY_DEPTHS:
            raise ScpiError(-224, "Illegal parameter value")
        self.scope.points = depth
        return None

    def _scale(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return f"{self.scale_s:.6E}"
        value = parse_number(arg)
        if not 1e-9 <= value <= 1000:
            raise ScpiError(-222, "Data out of range")
        self.scale_s = value
        return None

    def _threshold(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if nums[0] not in (1, 2):
            raise ScpiError(-114, "Header suffix out of range")
        if query:
            return f"{self.scope.thresholds.get(nums[0], 1.4):.6E}"
        value = parse_number(arg)
        if not -15.0 <= value <= 15.0:
            raise ScpiError(-222, "Data out of range")
        self.scope.thresholds[nums[0]] = value
        return None

    def _trigger_source(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        s = self.scope
        a = arg.strip().upper()
        if query:
            return self._trigger_name
        if a.startswith("D") and a[1:].isdigit() and int(a[1:]) < 16:
            d = int(a[1:])
            s.trigger_wire, self._trigger_name = s.wire_of(d // 8 + 1, d % 8) or "", f"D{d}"
        elif a.startswith("CHAN") and a[-1:] in "1234":
            s.trigger_wire, self._trigger_name = "", f"CHAN{a[-1]}"
        else:
            raise ScpiError(-224, "Illegal parameter value")
        return None

    _trigger_name = "CHAN1"

    def _slope(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return {"rising": "POS", "falling": "NEG", "either": "RFAL"}[self.scope.trigger_slope]
        choice = parse_choice(arg, ["POSitive", "NEGative", "RFALl"])
        self.scope.trigger_slope = {"POSitive": "rising", "NEGative": "falling", "RFALl": "either"}[choice]
        return None

    def _source(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        a = arg.strip().upper()
        if query:
            return f"D{self.source_channel}"
        if not (a.startswith("D") and a[1:].isdigit() and int(a[1:]) < 16):
            raise ScpiError(-224, "Illegal parameter value")
        self.source_channel = int(a[1:])
        return None

    def _preamble(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        mode = {"NORMal": 0, "MAXimum": 1, "RAW": 2}[self.mode]
        points, xincrement, xorigin = self.record_geometry()
        return f"0,{mode},{points},1,{xincrement:.6E},{xorigin:.6E},0,{1.0:.6E},{0.0:.6E},0"

    def _data(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        try:
            return Block(self._data_bytes())
        except ScpiError as exc:
            return self.no_data(exc)

    def _data_bytes(self) -> bytes:
        rec = self.scope.require_record()
        pod_bytes = rec.pods.get(self.source_channel // 8 + 1)
        if self.mode == "NORMal":
            if pod_bytes is None:
                return bytes(1000)
            step = max(1, rec.points // 1000)
            return ((pod_bytes[::step][:1000] >> (self.source_channel % 8)) & 1).tobytes()
        if self.scope.update() == "armed":
            raise ScpiError(-221, "Settings conflict; stop the instrument to read its memory")
        if not 1 <= self.start <= self.stop <= rec.points or self.stop - self.start + 1 > MAX_BATCH:
            raise ScpiError(-222, "Data out of range")
        if pod_bytes is None:
            return bytes(self.stop - self.start + 1)
        return bytes(pod_bytes[self.start - 1:self.stop])
