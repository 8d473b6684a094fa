"""Tektronix 4, 5 and 6 Series MSO, as their programmer manuals describe digital (logic probe) channels.

Each FlexChannel with a logic probe has eight digital channels ``CH<x>_D0``..``D7``;
``CH<x>_DAll`` is all eight as one byte per point (``DATa:WIDth 1``: D7 in the
most significant bit, D0 in the least). ``ACQuire:STOPAfter SEQuence`` and
``ACQuire:STATE ON`` make one acquisition; ``ACQuire:STATE?`` answers 1 until
it is done. ``HORizontal:MODE MANual`` with ``HORizontal:MODE:SAMPLERate`` and
``HORizontal:MODE:RECOrdlength`` sets rate and record; ``HORizontal:POSition``
is the trigger position in percent of the record. Data: ``DATa:SOUrce
CH<x>_DAll``, ``DATa:ENCdg RPBinary``, ``DATa:STARt``/``DATa:STOP`` (1-based,
inclusive), ``WFMOutpre?`` and ``CURVe?``, whose block header gives its digit
count as a hexadecimal digit. Errors go to the event queue: ``*ESR?`` then
``ALLEv?``. ``ACQuire:STATE ON`` with ``STOPAfter SEQuence`` is an
OPC-generating command: ``*OPC?`` answers when the acquisition is over (the
manuals' "Synchronization methods"). Without a record ``CURVe?`` answers an
empty block and ``WFMOutpre?`` 0 points, each queueing the error.
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
    Unit,
    choice,
    on_off,
    parse_bool,
    parse_choice,
    parse_number,
    query_only,
    whole,
)

_DIGITAL = re.compile(r"^CH(\d)_D(\d|ALL)$")


class TektronixMso5(Dialect):
    model = "tektronix-mso5"
    idn = "TEKTRONIX,MSO54,C000001,CF:91.1CT FV:1.30.2.4"
    hex_count = True
    pods = 4
    opc_waits_for_acquisition = True

    def __init__(self, scope):  # type: ignore[no-untyped-def]
        super().__init__(scope)
        self.available: list[tuple[int, str]] = []
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.header = True
        self.stop_after = "RUNSTop"
        self.data_source = "CH1_DALL"
        self.encoding = "RIBinary"
        self.width = 1
        self.start, self.stop = 1, 1000
        self.horizontal_mode = "AUTO"
        self._trigger_name = "CH1"

    def commands(self) -> list[tuple[str, Handler]]:
        return self.common() + [
            ("ALLEv", self._allev),
            ("EVMsg", self._evmsg),
            ("HEADer", self.setting("header", parse_bool, on_off)),
            ("VERBose", lambda q, a, n: "1" if q else parse_bool(a) and None),
            ("ACQuire:STOPAfter", self.setting("stop_after", choice("SEQuence", "RUNSTop"), str.upper)),
            ("ACQuire:STATE", self._acq_state),
            ("ACQuire:MODe", lambda q, a, n: "SAMPLE" if q else parse_choice(a, ["SAMple"]) and None),
            ("TRIGger:STATE", lambda q, a, n: query_only(q) or ("READY" if self.scope.update() == "armed"
                                                                else "SAVE")),
            ("HORizontal:MODE:SAMPLERate", self._samplerate),
            ("HORizontal:MODE:RECOrdlength", self._recordlength),
            ("HORizontal:MODE", self.setting("horizontal_mode", choice("AUTO", "CONStant", "MANual"), str.upper)),
            ("HORizontal:POSition", self._position),
            ("CH#:DIGital#:THReshold", self._threshold),
            ("DISplay:GLObal:CH#:STATE", lambda q, a, n: "1" if q else parse_bool(a) and None),
            ("TRIGger:A:TYPe", lambda q, a, n: "EDGE" if q else parse_choice(a, ["EDGe"]) and None),
            ("TRIGger:A:EDGE:SOUrce", self._trigger_source),
            ("TRIGger:A:EDGE:SLOpe", self._slope),
            ("DATa:SOUrce", self._data_source),
            ("DATa:ENCdg", self.setting("encoding", choice("ASCii", "RIBinary", "RPBinary", "SRIbinary", "SRPbinary",
                                                           "FPBinary", "SFPbinary"), str.upper)),
            ("DATa:WIDth", self._width),
            ("DATa:STARt", self.setting("start", lambda a: max(1, whole(a)))),
            ("DATa:STOP", self.setting("stop", lambda a: max(1, whole(a)))),
            ("WFMOutpre:NR_Pt", lambda q, a, n: query_only(q) or str(self.record_geometry()[0])),
            ("WFMOutpre:XINcr", lambda q, a, n: query_only(q) or f"{self.record_geometry()[1]:.6E}"),
            ("WFMOutpre:XZEro", lambda q, a, n: query_only(q) or f"{self.record_geometry()[2]:.6E}"),
            ("WFMOutpre:PT_Off", lambda q, a, n: query_only(q) or "0"),
            ("WFMOutpre:BYT_Nr", lambda q, a, n: query_only(q) or str(self.width)),
            ("WFMOutpre", self._wfmoutpre),
            ("CURVe", self._curve),
        ]

    def run(self, unit: Unit) -> Answer:
        """With ``HEADer ON`` an answer is preceded by its query's header."""
        answer = super().run(unit)
        if not self.header:
            return answer
        if isinstance(answer, AfterAcquisition) and isinstance(answer.answer, str):
            return AfterAcquisition(self._with_header(unit, answer.answer))
        return self._with_header(unit, answer) if isinstance(answer, str) else answer

    @staticmethod
    def _with_header(unit: Unit, answer: str) -> str:
        return f"{unit.header if unit.header.startswith((':', '*')) else ':' + unit.header} {answer}"

    # -- events ---------------------------------------------------------------------------------
    def _esr(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        """``*ESR?`` also moves the queued events to where ``ALLEv?`` and ``EVMsg?`` read them."""
        answer = super()._esr(query, arg, nums)
        self.available = [(abs(c), m) for c, m in self.scope.errors]
        self.scope.errors.clear()
        return answer

    def _allev(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        events, self.available = self.available, []
        if not events:
            return '0,"No events to report; queue empty"'
        return ",".join(f'{c},"{m}"' for c, m in events)

    def _evmsg(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        if not self.available:
            return '0,"No events to report; queue empty"'
        code, message = self.available.pop(0)
        return f'{code},"{message}"'

    # -- acquisition ----------------------------------------------------------------------------
    def _acq_state(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return "1" if self.scope.update() == "armed" else "0"
        on = arg.strip().upper() in ("ON", "RUN", "1")
        if not on and arg.strip().upper() not in ("OFF", "STOP", "0"):
            raise ScpiError(-224, "Illegal parameter value")
        if on:
            self.scope.arm()
        else:
            self.scope.stop()
        return None

    def _samplerate(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return f"{self.scope.rate_hz:.6E}"
        if self.horizontal_mode != "MANual":
            raise ScpiError(-221, "Settings conflict; HORizontal:MODE MANual first")
        self.scope.set_rate(parse_number(arg))
        return None

    def _recordlength(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return str(self.scope.points)
        self.scope.set_points(int(parse_number(arg)))
        return None

    def _position(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return f"{self.scope.pre_fraction * 100:.6E}"
        value = parse_number(arg)
        if not 0 <= value <= 100:
            raise ScpiError(-222, "Data out of range")
        self.scope.pre_fraction = value / 100
        return None

    def _threshold(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        ch, bit = nums
        if not (1 <= ch <= self.pods and bit <= 7):
            raise ScpiError(-114, "Header suffix out of range")
        if query:
            return f"{self.scope.thresholds.get(ch, 1.4):.6E}"
        value = parse_number(arg)
        if not -40.0 <= value <= 40.0:
            raise ScpiError(-222, "Data out of range")
        self.scope.thresholds[ch] = value
        return None

    def _trigger_source(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        s = self.scope
        if query:
            return self._trigger_name
        a = arg.strip().upper()
        m = _DIGITAL.match(a)
        if a in ("AUX", "AUXILIARY"):
            s.trigger_wire, self._trigger_name = EXTERNAL, "AUXILIARY"
        elif m and m[2] != "ALL" and 1 <= int(m[1]) <= self.pods:
            s.trigger_wire, self._trigger_name = s.wire_of(int(m[1]), int(m[2])) or "", a
        elif re.fullmatch(r"CH\d", a):
            s.trigger_wire, self._trigger_name = "", a
        else:
            raise ScpiError(-224, "Illegal parameter value")
        return None

    def _slope(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return {"rising": "RISE", "falling": "FALL", "either": "EITHER"}[self.scope.trigger_slope]
        choice = parse_choice(arg, ["RISe", "FALL", "EITHer"])
        self.scope.trigger_slope = {"RISe": "rising", "FALL": "falling", "EITHer": "either"}[choice]
        return None

    # -- waveform transfer ----------------------------------------------------------------------
    def _data_source(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return self.data_source
        a = arg.strip().upper()
        m = _DIGITAL.match(a)
        if not m or not 1 <= int(m[1]) <= self.pods:
            raise ScpiError(-224, "Illegal parameter value")
        self.data_source = a
        return None

    def _width(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        if query:
            return str(self.width)
        value = int(parse_number(arg))
        if value not in (1, 2):
            raise ScpiError(-222, "Data out of range")
        self.width = value
        return None

    def _wfmoutpre(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        points, xincrement, xorigin = self.record_geometry()
        enc = "ASCII" if self.encoding == "ASCii" else "BINARY"
        fmt = "RP" if "P" in self.encoding.upper()[1:3] else "RI"
        return (f'{self.width};{8 * self.width};{enc};{fmt};MSB;"{self.data_source}, {points} points, '
                f'Sample mode";{points};Y;LINEAR;"s";{xincrement:.6E};{xorigin:.6E};0;"State";'
                f"1.0E+0;0.0E+0;0.0E+0;TIME;DIGITAL")

    def _curve(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        try:
            return self._curve_data()
        except ScpiError as exc:
            return self.no_data(exc)

    def _curve_data(self) -> Block | str:
        if self.scope.update() == "armed":
            raise ScpiError(-221, "Settings conflict; acquisition in progress")
        rec = self.scope.require_record()
        if self.width != 1:
            raise ScpiError(-221, "Settings conflict; this simulation sends DATa:WIDth 1 only")
        m = _DIGITAL.match(self.data_source)
        assert m is not None
        pod = rec.pods.get(int(m[1]))
        values = pod if pod is not None else bytes(rec.points)
        stop = min(self.stop, rec.points)
        if self.start > stop:
            raise ScpiError(-222, "Data out of range")
        part = bytes(values[self.start - 1:stop])
        if m[2] != "ALL":
            bit = int(m[2])
            part = bytes((b >> bit) & 1 for b in part)
        if self.encoding == "ASCii":
            return ",".join(str(b) for b in part)
        return Block(part)


class TektronixMso4(TektronixMso5):
    model = "tektronix-mso4"
    idn = "TEKTRONIX,MSO44,C000002,CF:91.1CT FV:1.30.2.4"


class TektronixMso6(TektronixMso5):
    model = "tektronix-mso6"
    idn = "TEKTRONIX,MSO64,C000003,CF:91.1CT FV:1.30.2.4"
