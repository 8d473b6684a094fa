##
## This file is part of nicrig.
##
## This program is free software; you can redistribute it and/or modify
## it under the terms of the GNU General Public License as published by
## the Free Software Foundation; either version 3 of the License, or
## (at your option) any later version.
##
## This program is distributed in the hope that it will be useful,
## but WITHOUT ANY WARRANTY; without even the implied warranty of
## MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
## GNU General Public License for more details.
##

import sigrokdecode as srd

'''
OUTPUT_PYTHON format:

Packet:
[<ptype>, <pdata>]

'FRAME', <dict>: one per frame, put (from 'ss' to 'es') as soon as EN drops
after it, or when the capture ends inside it ('truncated'). Keys:
 - 'ss': sample of the first clock with EN high (first preamble octet);
   'es': sample of the first clock with EN low after the frame (for a
   truncated frame: one clock after its last octet).
 - 'sfd_ss': sample of the SFD octet.
 - 'data': bytes, destination address through FCS, in wire order.
 - 'byte_ss', 'byte_es': lists, start/end sample of each octet of 'data'.
 - 'direction': the 'direction' option ('tx' or 'rx').
 - 'fcs_ok': True when the CRC-32 over 'data' leaves the 802.3 residue
   (always False for a truncated frame); 'fcs': the received FCS and
   'fcs_calc' the FCS computed over data[:-4], as the 32-bit value whose
   little-endian octets go on the wire (None when under 4 octets or truncated).
 - 'errors': list of dicts {'kind', 'offset', 'ss', 'es'}: kind
   'data_error' (ER with EN high: data reception error on RX, transmit
   error propagation on TX; 'offset' indexes 'data') or 'preamble_error'
   (the same before the SFD; 'offset' is None).
 - 'warnings': list of strings among 'runt' (< 64 octets), 'truncated',
   'preamble_length' (TX: not 7 preamble octets), 'preamble_junk',
   'short_ifg', 'capture_start' (EN was already high when the capture began).
 - 'preamble_len': number of 0x55 octets before the SFD.
 - 'ifg_clocks', 'ifg_ns': idle time before this frame (EN low, from the end
   of the previous burst to this frame's first preamble octet), -1 for the
   first burst of the capture or when unknown.
 - 'truncated': True when the capture ended before EN dropped.

'SYMBOL', <dict>: a run of one idle-time error symbol (ER high, EN low):
 {'ss', 'es', 'code' (the data octet), 'kind' ('false_carrier',
 'carrier_extend', 'carrier_extend_error', 'lpi', 'reserved'), 'clocks',
 'direction'}.
'''

# Channel indices: the required channels first, then the optional ones.
EN = 0
D0 = 1                  # D0..D7: 1..8
ER = 9
CLK = 10

PREAMBLE_OCTET = 0x55
SFD_OCTET = 0xD5
MIN_FRAME = 64
TX_PREAMBLE_OCTETS = 7
# zlib.crc32() of a frame with a correct FCS (802.3 clause 3.2.9 remainder
# 0xC704DD7B, bit-reflected and complemented).
CRC_RESIDUE = 0x2144DF1C
# GTX_CLK / RX_CLK at 1000 Mb/s: 125 MHz.
CLOCK_NS = 8.0
CLOCK_HZ = 125e6
# Minimum inter-packet gap, 802.3 clause 4.4.2: 96 bit times = 12 clocks on
# transmit; a receiver sees it shrink down to 64 bit times (8 clocks).
MIN_IFG_CLOCKS = {'tx': 12, 'rx': 8}

try:
    from zlib import crc32
except ImportError:             # pragma: no cover - zlib is built into CPython
    def _table():
        t = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
            t.append(c)
        return t
    _TABLE = _table()

    def crc32(data):
        c = 0xFFFFFFFF
        for b in data:
            c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF

(A_PREAMBLE, A_SFD, A_DATA, A_FCS_OK, A_FCS_BAD, A_ERROR, A_FALSE_CARRIER,
 A_EXTEND, A_LPI, A_FRAME, A_IFG, A_WARNING) = range(12)

IDLE_SYMBOLS = {
    0x01: ('lpi', A_LPI, 'Assert LPI', 'LPI'),
    0x0E: ('false_carrier', A_FALSE_CARRIER, 'False carrier indication', 'False carrier'),
    0x0F: ('carrier_extend', A_EXTEND, 'Carrier extend', 'Extend'),
    0x1F: ('carrier_extend_error', A_ERROR, 'Carrier extend error', 'Extend error'),
}


class _EndOfCapture(Exception):
    pass


def fmt_ns(ns):
    if ns is None or ns < 0:
        return '?'
    if ns >= 1e9:
        return '%.6g s' % (ns / 1e9)
    if ns >= 1e6:
        return '%.6g ms' % (ns / 1e6)
    if ns >= 1e3:
        return '%.6g us' % (ns / 1e3)
    return '%.6g ns' % ns


class Decoder(srd.Decoder):
    api_version = 3
    id = 'gmii'
    name = 'GMII'
    longname = 'Gigabit media-independent interface'
    desc = 'IEEE 802.3 clause 35 GMII: preamble, SFD, frame octets, FCS, error symbols.'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = ['gmii']
    tags = ['Networking', 'PC']
    channels = (
        {'id': 'en', 'name': 'EN', 'desc': 'TX_EN or RX_DV'},
        {'id': 'd0', 'name': 'D0', 'desc': 'TXD<0> / RXD<0> (LSB)'},
        {'id': 'd1', 'name': 'D1', 'desc': 'TXD<1> / RXD<1>'},
        {'id': 'd2', 'name': 'D2', 'desc': 'TXD<2> / RXD<2>'},
        {'id': 'd3', 'name': 'D3', 'desc': 'TXD<3> / RXD<3>'},
        {'id': 'd4', 'name': 'D4', 'desc': 'TXD<4> / RXD<4>'},
        {'id': 'd5', 'name': 'D5', 'desc': 'TXD<5> / RXD<5>'},
        {'id': 'd6', 'name': 'D6', 'desc': 'TXD<6> / RXD<6>'},
        {'id': 'd7', 'name': 'D7', 'desc': 'TXD<7> / RXD<7> (MSB)'},
    )
    optional_channels = (
        {'id': 'er', 'name': 'ER', 'desc': 'TX_ER or RX_ER'},
        {'id': 'clk', 'name': 'CLK', 'desc': 'GTX_CLK or RX_CLK (timing captures)'},
    )
    options = (
        {'id': 'clock', 'desc': 'Clocking (auto: CLK if connected, else one sample per clock)',
            'default': 'auto', 'values': ('auto', 'clk', 'state')},
        {'id': 'direction', 'desc': 'Direction (label carried to the outputs)',
            'default': 'tx', 'values': ('tx', 'rx')},
    )
    annotations = (
        ('preamble', 'Preamble'),
        ('sfd', 'Start frame delimiter'),
        ('data', 'Frame octet'),
        ('fcs-ok', 'FCS OK'),
        ('fcs-error', 'FCS error'),
        ('error', 'Error symbol'),
        ('false-carrier', 'False carrier'),
        ('carrier-extend', 'Carrier extend'),
        ('lpi', 'Low power idle'),
        ('frame', 'Frame'),
        ('ifg', 'Inter-frame gap'),
        ('warning', 'Warning'),
    )
    annotation_rows = (
        ('octets', 'Octets', (A_PREAMBLE, A_SFD, A_DATA)),
        ('fcs', 'FCS', (A_FCS_OK, A_FCS_BAD)),
        ('symbols', 'Error and idle symbols', (A_ERROR, A_FALSE_CARRIER, A_EXTEND, A_LPI)),
        ('frames', 'Frames', (A_FRAME,)),
        ('gaps', 'Inter-frame gaps', (A_IFG,)),
        ('warnings', 'Warnings', (A_WARNING,)),
    )

    def __init__(self):
        self.reset()

    def reset(self):
        self.samplerate = None
        self.state_mode = True
        self.active = False
        self.period_sum = 0
        self.period_n = 0
        self.prev_sn = None
        self.in_burst = False
        self.bursts = 0
        self.en_at_start = False
        self.last_end = None
        self.cur = None
        self.ext = None
        self._new_burst()

    def _new_burst(self):
        self.phase = 'pre'
        self.burst_ss = None
        self.run_kind = None
        self.run_ss = self.run_es = None
        self.run_n = 0
        self.run_vals = []
        self.pre_len = 0
        self.sfd_ss = None
        self.data = bytearray()
        self.byte_ss = []
        self.byte_es = []
        self.errors = []
        self.warnings = []
        self.ifg_clocks = -1
        self.ifg_ns = -1

    def metadata(self, key, value):
        if key == srd.SRD_CONF_SAMPLERATE:
            self.samplerate = value

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)
        self.out_python = self.register(srd.OUTPUT_PYTHON)
        self.direction = self.options['direction']
        if self.direction == 'rx':
            self.er_name, self.data_error_text = 'RX_ER', 'Data reception error'
        else:
            self.er_name, self.data_error_text = 'TX_ER', 'Transmit error propagation'

    # -- helpers ------------------------------------------------------------------------

    def ann(self, ss, es, cls, texts):
        self.put(ss, es, self.out_ann, [cls, texts])

    def warn(self, ss, es, texts, key=None):
        self.ann(ss, es, A_WARNING, texts)
        if key is not None and key not in self.warnings:
            self.warnings.append(key)

    def period(self):
        '''Samples per clock, or None when unknown.'''
        if self.state_mode:
            return 1.0
        if self.period_n:
            return self.period_sum / self.period_n
        if self.samplerate:
            return self.samplerate / CLOCK_HZ
        return None

    def ns(self, samples):
        if self.state_mode:
            return samples * CLOCK_NS
        if self.samplerate:
            return samples * 1e9 / self.samplerate
        return None

    def clocks(self, samples):
        per = self.period()
        return int(round(samples / per)) if per else -1

    def _wait(self, conds=None):
        # libsigrokdecode 0.5.3 ends a decoder by making wait() fail at the
        # end of the data (no end-of-data callback); later versions raise EOFError.
        try:
            return self.wait() if conds is None else self.wait(conds)
        except Exception:
            raise _EndOfCapture()

    # -- main loop ------------------------------------------------------------------------

    def decode(self):
        try:
            self.run()
        except _EndOfCapture:
            try:
                self.end_of_capture()
            except Exception:
                pass

    def run(self):
        pins = self._wait()
        has_er = pins[ER] in (0, 1)
        has_clk = pins[CLK] in (0, 1)
        self.en_at_start = pins[EN] == 1
        mode = self.options['clock']
        if mode == 'clk' and not has_clk:
            self.warn(0, 0, ['Option clock=clk but no CLK channel: one sample per clock',
                             'No CLK channel', 'No CLK'])
        self.state_mode = not (has_clk and mode in ('auto', 'clk'))
        if self.state_mode:
            c_next = {'skip': 1}
            c_idle = [{EN: 'h'}, {ER: 'h'}] if has_er else {EN: 'h'}
            self.clock(self.samplenum, pins)
        else:
            c_next = {CLK: 'r'}
            c_idle = ([{CLK: 'r', EN: 'h'}, {CLK: 'r', ER: 'h'}] if has_er
                      else {CLK: 'r', EN: 'h'})
        while True:
            pins = self._wait(c_next if self.active else c_idle)
            self.clock(self.samplenum, pins)

    def clock(self, sn, p):
        '''One clock: EN, ER and the data octet sampled at sample sn.'''
        if not self.state_mode and self.active and self.prev_sn is not None:
            # The previous wait was for the very next clock edge.
            delta = sn - self.prev_sn
            if delta > 0:
                self.period_sum += delta
                self.period_n += 1
        en = p[EN] == 1
        er = p[ER] == 1
        d = (p[1] | (p[2] << 1) | (p[3] << 2) | (p[4] << 3) | (p[5] << 4) |
             (p[6] << 5) | (p[7] << 6) | (p[8] << 7)) & 0xFF
        if en:
            if self.ext is not None:
                self.ext_flush(sn)
            if not self.in_burst:
                self.burst_start(sn)
            elif self.cur is not None:
                self.octet(self.cur, sn)
            self.cur = (sn, d, er)
        else:
            if self.in_burst:
                if self.cur is not None:
                    self.octet(self.cur, sn)
                    self.cur = None
                self.burst_end(sn)
            if er:
                self.ext_symbol(sn, d)
            elif self.ext is not None:
                self.ext_flush(sn)
        self.active = en or er
        self.prev_sn = sn

    # -- bursts (EN high) ---------------------------------------------------------------------

    def burst_start(self, sn):
        self._new_burst()
        self.in_burst = True
        self.burst_ss = sn
        if self.bursts == 0 and self.en_at_start:
            self.warnings.append('capture_start')
        self.bursts += 1
        if self.last_end is None:
            return
        gap = sn - self.last_end
        clocks = self.clocks(gap)
        ns = self.ns(gap)
        self.ifg_clocks = clocks
        self.ifg_ns = ns if ns is not None else -1
        if clocks >= 0:
            texts = ['IFG %d clocks (%s)' % (clocks, fmt_ns(ns)), 'IFG %d' % clocks, 'IFG']
        else:
            texts = ['IFG %d samples' % gap, 'IFG', 'IFG']
        self.ann(self.last_end, sn, A_IFG, texts)
        need = MIN_IFG_CLOCKS[self.direction]
        if 0 <= clocks < need:
            self.warn(self.last_end, sn,
                      ['Inter-frame gap of %d clocks, below the %d-bit-time minimum'
                       % (clocks, need * 8), 'Short IFG (%d)' % clocks, 'IFG!'], 'short_ifg')

    def octet(self, cur, es):
        ss, v, er = cur
        if self.phase == 'skip':
            return
        if self.phase == 'data':
            idx = len(self.data)
            self.data.append(v)
            self.byte_ss.append(ss)
            self.byte_es.append(es)
            self.ann(ss, es, A_DATA, ['Octet %d: 0x%02X' % (idx, v), '0x%02X' % v, '%02X' % v])
            if er:
                self.errors.append({'kind': 'data_error', 'offset': idx, 'ss': ss, 'es': es})
                self.ann(ss, es, A_ERROR, ['%s (%s)' % (self.data_error_text, self.er_name),
                                           self.er_name, 'E'])
            return
        if er:
            self.errors.append({'kind': 'preamble_error', 'offset': None, 'ss': ss, 'es': es})
            self.ann(ss, es, A_ERROR, ['%s in the preamble (%s)' % (self.data_error_text, self.er_name),
                                       self.er_name, 'E'])
        if v == PREAMBLE_OCTET:
            self.run_add('pre', ss, es, v)
            self.pre_len += 1
        elif v == SFD_OCTET:
            self.run_flush()
            self.ann(ss, es, A_SFD, ['Start frame delimiter', 'SFD', 'S'])
            self.phase = 'data'
            self.sfd_ss = ss
            if self.direction == 'tx' and self.pre_len != TX_PREAMBLE_OCTETS \
                    and 'capture_start' not in self.warnings:
                self.warn(self.burst_ss, es,
                          ['Preamble of %d octets (802.3: 7 before the SFD)' % self.pre_len,
                           'Preamble %d octets' % self.pre_len, 'Pre!'], 'preamble_length')
        elif 'capture_start' in self.warnings:
            # EN was already high when the capture began and this is no
            # preamble: the frame started before the capture. Like a MAC
            # coming up mid-frame, wait for the next carrier.
            self.run_flush()
            self.phase = 'skip'
        else:
            self.run_add('junk', ss, es, v)

    def run_add(self, kind, ss, es, v):
        if self.run_kind != kind:
            self.run_flush()
            self.run_kind = kind
            self.run_ss = ss
            self.run_n = 0
            self.run_vals = []
        self.run_es = es
        self.run_n += 1
        if len(self.run_vals) < 8:
            self.run_vals.append(v)

    def run_flush(self):
        kind, self.run_kind = self.run_kind, None
        if kind == 'pre':
            self.ann(self.run_ss, self.run_es, A_PREAMBLE,
                     ['Preamble (%d octets)' % self.run_n, 'Preamble', 'P'])
        elif kind == 'junk':
            vals = ' '.join('%02X' % v for v in self.run_vals)
            if self.run_n > len(self.run_vals):
                vals += ' ...'
            self.warn(self.run_ss, self.run_es,
                      ['%d unexpected octet(s) before the SFD: %s' % (self.run_n, vals),
                       'Junk before SFD', 'Junk'], 'preamble_junk')

    def burst_end(self, es):
        if self.phase in ('pre', 'skip'):
            self.run_flush()
            if 'capture_start' in self.warnings:
                texts = ['Capture starts inside a frame: its octets are ignored', 'Partial frame',
                         'Partial']
            else:
                texts = ['EN high for %d clocks without an SFD' % max(self.clocks(es - self.burst_ss), 1),
                         'No SFD', 'No SFD']
            self.warn(self.burst_ss, es, texts, 'no_sfd')
        else:
            self.frame_done(es, False)
        self.in_burst = False
        self.last_end = es

    def frame_done(self, es, truncated):
        data = bytes(self.data)
        n = len(data)
        if n == 0:
            self.warn(self.burst_ss, es, ['SFD without frame octets', 'Empty frame', 'Empty'])
            return
        fcs = fcs_calc = None
        fcs_ok = False
        if truncated:
            self.warn(self.byte_ss[0], es,
                      ['Capture ends inside the frame (%d octets after the SFD)' % n,
                       'Truncated frame', 'Trunc'], 'truncated')
        elif n >= 4:
            fcs = int.from_bytes(data[-4:], 'little')
            fcs_calc = crc32(data[:-4]) & 0xFFFFFFFF
            fcs_ok = (crc32(data) & 0xFFFFFFFF) == CRC_RESIDUE
            if fcs_ok:
                self.ann(self.byte_ss[-4], es, A_FCS_OK,
                         ['FCS 0x%08X OK' % fcs, 'FCS OK', 'OK'])
            else:
                self.ann(self.byte_ss[-4], es, A_FCS_BAD,
                         ['FCS 0x%08X wrong (calculated 0x%08X)' % (fcs, fcs_calc),
                          'FCS error', 'FCS!'])
        if not truncated and n < MIN_FRAME:
            self.warn(self.byte_ss[0], es, ['Runt frame: %d octets (minimum 64)' % n,
                                            'Runt (%d)' % n, 'Runt'], 'runt')
        nerr = sum(1 for e in self.errors if e['kind'] == 'data_error')
        status = 'truncated' if truncated else ('FCS OK' if fcs_ok else 'FCS error')
        extra = ', %d error symbol(s)' % nerr if nerr else ''
        self.ann(self.burst_ss, es, A_FRAME,
                 ['%s frame: %d octets, %s%s' % (self.direction.upper(), n, status, extra),
                  'Frame %d B, %s' % (n, status), 'Frame'])
        self.put(self.burst_ss, es, self.out_python, ['FRAME', {
            'ss': self.burst_ss, 'es': es, 'sfd_ss': self.sfd_ss,
            'data': data, 'byte_ss': list(self.byte_ss), 'byte_es': list(self.byte_es),
            'direction': self.direction, 'fcs_ok': fcs_ok, 'fcs': fcs, 'fcs_calc': fcs_calc,
            'errors': list(self.errors), 'warnings': list(self.warnings),
            'preamble_len': self.pre_len, 'ifg_clocks': self.ifg_clocks,
            'ifg_ns': self.ifg_ns, 'truncated': truncated,
        }])

    # -- idle-time symbols (ER high, EN low) -------------------------------------------------

    def ext_symbol(self, sn, code):
        if self.ext is not None:
            if self.ext[0] == code:
                self.ext[2] = sn
                return
            self.ext_flush(sn)
        self.ext = [code, sn, sn]

    def ext_flush(self, es):
        code, ss, _ = self.ext
        self.ext = None
        if code == 0x00 and self.direction == 'rx':
            return          # Table 35-2: RX_ER with RXD 0x00 is normal inter-frame.
        clocks = max(self.clocks(es - ss), 1)
        if code in IDLE_SYMBOLS:
            kind, cls, long_text, short_text = IDLE_SYMBOLS[code]
            if code == 0x0E and self.direction == 'tx':
                long_text += ' (a reserved TX_ER code)'
            self.ann(ss, es, cls, ['%s (0x%02X, %d clocks)' % (long_text, code, clocks),
                                   short_text, short_text[0]])
        else:
            kind = 'reserved'
            self.warn(ss, es, ['Reserved code 0x%02X with %s high and EN low (%d clocks)'
                               % (code, self.er_name, clocks), 'Reserved 0x%02X' % code, 'R'])
        self.put(ss, es, self.out_python, ['SYMBOL', {
            'ss': ss, 'es': es, 'code': code, 'kind': kind, 'clocks': clocks,
            'direction': self.direction}])

    # -- end of the capture ------------------------------------------------------------------

    def end_of_capture(self):
        per = self.period() or 1.0
        if self.in_burst and self.cur is not None:
            es = int(round(self.cur[0] + per))
            self.octet(self.cur, es)
            self.cur = None
            if self.phase in ('pre', 'skip'):
                self.run_flush()
                self.warn(self.burst_ss, es, ['Capture ends before the SFD', 'No SFD', 'No SFD'])
            else:
                self.frame_done(es, True)
            self.in_burst = False
        if self.ext is not None:
            self.ext_flush(int(round(self.ext[2] + per)))
