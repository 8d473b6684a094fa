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

['IRQ', <record>] per assertion that starts and ends inside the capture,
put when the line is deasserted; <record> is the dict the binary class
'records' writes as one JSON line:
 - 'ss': sample of the asserting edge, 'es': sample of the deasserting edge.
 - 'duration_ns': (es - ss) / samplerate in ns, -1 when the sample rate is
   unknown.
'''

IRQ = 0
A_ASSERT, A_DEASSERT, A_WARNING = range(3)
B_RECORDS = 0


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
    id = 'irq'
    name = 'IRQ'
    longname = 'Interrupt request line'
    desc = 'Interrupt line assertions and how long they last.'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = ['irq']
    tags = ['PC']
    channels = (
        {'id': 'irq', 'name': 'IRQ', 'desc': 'Interrupt request line'},
    )
    options = (
        {'id': 'polarity', 'desc': 'Asserted level', 'default': 'active-low',
            'values': ('active-low', 'active-high')},
    )
    annotations = (
        ('assert', 'Asserted'),
        ('deassert', 'Deasserted'),
        ('warning', 'Warning'),
    )
    annotation_rows = (
        ('irq', 'IRQ', (A_ASSERT, A_DEASSERT)),
        ('warnings', 'Warnings', (A_WARNING,)),
    )
    binary = (
        ('records', 'JSON Lines, one object per assertion'),
    )

    def __init__(self):
        self.reset()

    def reset(self):
        self.samplerate = None
        self.asserted = False
        self.ss = None
        self.partial = False
        self.last_deassert = None
        self.count = 0

    def metadata(self, key, value):
        if key == srd.SRD_CONF_SAMPLERATE:
            self.samplerate = value

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)
        self.out_python = self.register(srd.OUTPUT_PYTHON)
        self.out_binary = self.register(srd.OUTPUT_BINARY)
        self.active_level = 0 if self.options['polarity'] == 'active-low' else 1

    def ann(self, ss, es, cls, texts):
        self.put(ss, es, self.out_ann, [cls, texts])

    def duration(self, samples):
        '''(ns or -1, text) for a span of samples.'''
        if self.samplerate:
            ns = samples * 1e9 / self.samplerate
            return ns, fmt_ns(ns)
        return -1, '%d samples' % samples

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
                if self.asserted and self.ss is not None:
                    self.ann(self.ss, self.ss, A_WARNING,
                             ['IRQ still asserted at the end of the capture', 'Still asserted', '!'])
            except Exception:
                pass

    def run(self):
        low = self.active_level == 0
        c_assert = {IRQ: 'f' if low else 'r'}
        c_deassert = {IRQ: 'r' if low else 'f'}
        pins = self._wait()
        if pins[IRQ] == self.active_level:
            self.asserted, self.ss, self.partial = True, self.samplenum, True
        while True:
            if not self.asserted:
                self._wait(c_assert)
                ss = self.samplenum
                if self.last_deassert is not None:
                    _, text = self.duration(ss - self.last_deassert)
                    self.ann(self.last_deassert, ss, A_DEASSERT,
                             ['Deasserted for %s' % text, 'Idle %s' % text, 'D'])
                self.asserted, self.ss, self.partial = True, ss, False
            else:
                self._wait(c_deassert)
                es = self.samplenum
                self.asserted = False
                self.last_deassert = es
                ns, text = self.duration(es - self.ss)
                if self.partial:
                    self.ann(self.ss, es, A_ASSERT, ['Asserted at least %s (since before the capture)'
                                                     % text, '>= %s' % text, 'A'])
                    self.ann(self.ss, es, A_WARNING, ['IRQ already asserted when the capture started',
                                                      'Asserted at start', '!'])
                    continue
                self.count += 1
                self.ann(self.ss, es, A_ASSERT, ['IRQ asserted for %s' % text, 'Asserted %s' % text,
                                                 text, 'A'])
                rec = {'ss': self.ss, 'es': es, 'duration_ns': num(ns) if ns >= 0 else -1}
                self.put(self.ss, es, self.out_python, ['IRQ', rec])
                self.put(self.ss, es, self.out_binary, [B_RECORDS, (json.dumps(rec) + '\n').encode()])
