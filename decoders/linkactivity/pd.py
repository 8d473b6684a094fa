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

import json
import sigrokdecode as srd

'''
OUTPUT_PYTHON format:

['FRAME', <record>] per activity pulse that starts and ends inside the
capture, put when the line drops; <record> is the dict the binary class
'records' writes as one JSON line:
 - 'ss', 'es': samples of the rising and the falling edge.
 - 'duration_ns': (es - ss) / samplerate in ns.
 - 'est_bytes': duration x link_rate / 8, less 8 octets (preamble and SFD)
   when option includes_preamble is 'yes'; rounded to a whole octet, never
   below 0.
 - 'gap_ns': from the previous pulse's falling edge to this rising edge, -1
   for the first pulse.
All three are -1 when the sample rate is unknown.
'''

ACT = 0
A_FRAME, A_GAP, A_WARNING = range(3)
B_RECORDS = 0
PREAMBLE_SFD_OCTETS = 8
MIN_FRAME_OCTETS = 64
MIN_IFG_OCTETS = 12


class _EndOfCapture(Exception):
    pass


def fmt_ns(ns):
    if ns >= 1e9:
        return '%.6g s' % (ns / 1e9)
    if ns >= 1e6:
        return '%.6g ms' % (ns / 1e6)
    if ns >= 1e3:
        return '%.6g us' % (ns / 1e3)
    return '%.6g ns' % ns


def num(x):
    r = round(x)
    return int(r) if abs(x - r) < 1e-9 else round(x, 3)


class Decoder(srd.Decoder):
    api_version = 3
    id = 'linkactivity'
    name = 'Link activity'
    longname = 'Ethernet frame-presence probe'
    desc = 'One-wire frame-presence probe: frame durations, sizes and gaps.'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = ['linkactivity']
    tags = ['Networking']
    channels = (
        {'id': 'act', 'name': 'ACT', 'desc': 'Frame presence (asserted while a frame is on the link)'},
    )
    options = (
        {'id': 'link_rate', 'desc': 'Link rate in bit/s', 'default': 1e9},
        {'id': 'includes_preamble', 'desc': 'Pulse includes preamble and SFD',
            'default': 'yes', 'values': ('yes', 'no')},
        {'id': 'polarity', 'desc': 'Level while a frame is present', 'default': 'active-high',
            'values': ('active-high', 'active-low')},
    )
    annotations = (
        ('frame', 'Frame'),
        ('gap', 'Gap'),
        ('warning', 'Warning'),
    )
    annotation_rows = (
        ('frames', 'Frames', (A_FRAME,)),
        ('gaps', 'Gaps', (A_GAP,)),
        ('warnings', 'Warnings', (A_WARNING,)),
    )
    binary = (
        ('records', 'JSON Lines, one object per frame'),
    )

    def __init__(self):
        self.reset()

    def reset(self):
        self.samplerate = None
        self.active = False
        self.ss = None
        self.partial = False
        self.last_es = None

    def metadata(self, key, value):
        if key == srd.SRD_CONF_SAMPLERATE:
            self.samplerate = value

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)
        self.out_python = self.register(srd.OUTPUT_PYTHON)
        self.out_binary = self.register(srd.OUTPUT_BINARY)
        try:
            self.rate = float(self.options['link_rate'])
        except (TypeError, ValueError):
            self.rate = 1e9
        if not self.rate > 0:
            self.rate = 1e9
        self.overhead = PREAMBLE_SFD_OCTETS if self.options['includes_preamble'] == 'yes' else 0
        self.active_level = 1 if self.options['polarity'] == 'active-high' else 0

    def ann(self, ss, es, cls, texts):
        self.put(ss, es, self.out_ann, [cls, texts])

    def ns(self, samples):
        return samples * 1e9 / self.samplerate if self.samplerate else -1

    def octets(self, ns):
        return ns * self.rate / 8e9

    def _wait(self, conds=None):
        # libsigrokdecode 0.5.3 makes wait() fail at the end of the data.
        try:
            return self.wait() if conds is None else self.wait(conds)
        except Exception:
            raise _EndOfCapture()

    def decode(self):
        try:
            self.run()
        except _EndOfCapture:
            try:
                if self.active and self.ss is not None:
                    self.ann(self.ss, self.ss, A_WARNING,
                             ['Frame still on the link at the end of the capture', 'Truncated', '!'])
            except Exception:
                pass

    def run(self):
        high = self.active_level == 1
        c_start = {ACT: 'r' if high else 'f'}
        c_end = {ACT: 'f' if high else 'r'}
        pins = self._wait()
        if pins[ACT] == self.active_level:
            self.active, self.ss, self.partial = True, self.samplenum, True
        while True:
            if not self.active:
                self._wait(c_start)
                self.active, self.ss, self.partial = True, self.samplenum, False
            else:
                self._wait(c_end)
                self.pulse(self.ss, self.samplenum)
                self.active = False

    def pulse(self, ss, es):
        prev, self.last_es = self.last_es, es
        if self.partial:
            self.ann(ss, es, A_WARNING, ['Frame already on the link when the capture started',
                                         'Partial frame', '!'])
            return
        dur = self.ns(es - ss)
        gap = self.ns(ss - prev) if prev is not None else -1
        if prev is not None:
            if gap >= 0:
                gb = self.octets(gap)
                self.ann(prev, ss, A_GAP, ['Gap %s (%.1f octet times)' % (fmt_ns(gap), gb),
                                           'Gap %s' % fmt_ns(gap), 'G'])
                need = MIN_IFG_OCTETS + PREAMBLE_SFD_OCTETS - self.overhead
                if gb < need - 0.5:
                    self.ann(prev, ss, A_WARNING, ['Gap of %.1f octet times, below the %d minimum'
                                                   % (gb, need), 'Short gap', '!'])
            else:
                self.ann(prev, ss, A_GAP, ['Gap %d samples' % (ss - prev), 'Gap', 'G'])
        if dur >= 0:
            est = max(0, int(round(self.octets(dur) - self.overhead)))
            self.ann(ss, es, A_FRAME, ['Frame ~%d octets (%s)' % (est, fmt_ns(dur)),
                                       '~%d B' % est, 'F'])
            if est < MIN_FRAME_OCTETS:
                self.ann(ss, es, A_WARNING, ['Pulse of %s: shorter than a 64-octet frame' % fmt_ns(dur),
                                             'Too short', '!'])
        else:
            est = -1
            self.ann(ss, es, A_FRAME, ['Frame, %d samples' % (es - ss), 'Frame', 'F'])
        rec = {'ss': ss, 'es': es, 'duration_ns': num(dur) if dur >= 0 else -1,
               'est_bytes': est, 'gap_ns': num(gap) if gap >= 0 else -1}
        self.put(ss, es, self.out_python, ['FRAME', rec])
        self.put(ss, es, self.out_binary, [B_RECORDS, (json.dumps(rec) + '\n').encode()])
