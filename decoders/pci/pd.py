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

One dict per transaction, put when the transaction has ended (the same dict
the binary class 'records' writes as one JSON line):

 - 'ss', 'es': first sample of the address phase, sample of the first clock
   after the last clock of the transaction.
 - 'command' (spec name or None), 'command_code' (0..15 or None),
   'address' (int or None), 'dac' (bool): with a dual address cycle,
   'command' is the command of the second address phase and 'address' the
   64-bit address.
 - 'data_phases': data phases that transferred data (IRDY# and TRDY#
   asserted on the same clock); 'bytes': byte lanes enabled (C/BE# low) in
   those phases, or None when the C/BE# lines are not probed; 'data': the
   data of the first 64 such phases (AD[31:0], or AD[63:0] for 64-bit phases).
 - 'termination': 'normal', 'retry', 'disconnect_with_data',
   'disconnect_without_data', 'target_abort' or 'master_abort'.
 - 'kind': 'config', 'csr', 'msi', 'dma' or 'unknown'.
 - 'master_wait_clocks', 'target_wait_clocks', 'devsel' ('fast', 'medium',
   'slow', 'subtractive', 'none'), 'wide', 'parity_error', 'stop'.
'''

# Channel indices: the required channels first, then the optional ones.
FRAME, IRDY, TRDY, DEVSEL = 0, 1, 2, 3
CLK, STOP = 4, 5
AD0 = 6                     # AD[0]..AD[63]: 6..69
CBE0 = AD0 + 64             # C/BE#[0]..C/BE#[7]: 70..77
PAR = CBE0 + 8
PAR64 = PAR + 1
REQ64 = PAR + 2
ACK64 = PAR + 3
REQ = PAR + 4
GNT = PAR + 5
PERR = PAR + 6
INTA = PAR + 7              # INTA#..INTD#
NUM_CHANNELS = INTA + 4

UNCONNECTED = 0xff
# Pin values as binary digits; an unconnected line (0xff) reads as 0.
PIN_DIGITS = bytes.maketrans(b'\x00\x01\xff', b'010')

CMD_NAMES = (
    'Interrupt Acknowledge', 'Special Cycle', 'I/O Read', 'I/O Write',
    'Reserved', 'Reserved', 'Memory Read', 'Memory Write',
    'Reserved', 'Reserved', 'Configuration Read', 'Configuration Write',
    'Memory Read Multiple', 'Dual Address Cycle', 'Memory Read Line',
    'Memory Write and Invalidate',
)
CMD_SHORT = (
    'IACK', 'SPC', 'IOR', 'IOW', 'RSV4', 'RSV5', 'MRd', 'MWr',
    'RSV8', 'RSV9', 'CfgRd', 'CfgWr', 'MRdM', 'DAC', 'MRdL', 'MWI',
)
CMD_DAC = 0xd
CMDS_MEM = (0x6, 0x7, 0xc, 0xe, 0xf)
CMDS_MEM_WRITE = (0x7, 0xf)
CMDS_IO = (0x2, 0x3)
CMDS_CONFIG = (0xa, 0xb)
CMDS_READ = (0x0, 0x2, 0x6, 0xa, 0xc, 0xe)
CMDS_WRITE = (0x1, 0x3, 0x7, 0xb, 0xf)
CMDS_RESERVED = (0x4, 0x5, 0x8, 0x9)

DEVSEL_SPEEDS = ('fast', 'fast', 'medium', 'slow', 'subtractive')

TERMINATION_TEXTS = {
    'normal': ['Normal completion', 'Normal', 'N'],
    'retry': ['Retry', 'Retry', 'R'],
    'disconnect_with_data': ['Disconnect with data', 'Disc+data', 'D'],
    'disconnect_without_data': ['Disconnect without data', 'Disc', 'D'],
    'target_abort': ['Target abort', 'T-abort', 'TA'],
    'master_abort': ['Master abort', 'M-abort', 'MA'],
}

A_ADDRESS, A_DATA, A_WAIT, A_TERMINATION, A_TRANSACTION, A_WARNING, \
    A_INTERRUPT = range(7)


def channel_list():
    chans = [
        {'id': 'clk', 'name': 'CLK', 'desc': 'Bus clock (optional: state-mode captures)'},
        {'id': 'stop', 'name': 'STOP#', 'desc': 'Target requests a stop'},
    ]
    for i in range(64):
        chans.append({'id': 'ad%d' % i, 'name': 'AD[%d]' % i,
                      'desc': 'Address/data bit %d' % i})
    for i in range(8):
        chans.append({'id': 'cbe%d' % i, 'name': 'C/BE#[%d]' % i,
                      'desc': 'Command/byte enable %d' % i})
    chans += [
        {'id': 'par', 'name': 'PAR', 'desc': 'Parity of AD[31:0], C/BE#[3:0]'},
        {'id': 'par64', 'name': 'PAR64', 'desc': 'Parity of AD[63:32], C/BE#[7:4]'},
        {'id': 'req64', 'name': 'REQ64#', 'desc': '64-bit transfer request'},
        {'id': 'ack64', 'name': 'ACK64#', 'desc': '64-bit transfer acknowledge'},
        {'id': 'req', 'name': 'REQ#', 'desc': "Device's bus request (not decoded)"},
        {'id': 'gnt', 'name': 'GNT#', 'desc': "Device's bus grant"},
        {'id': 'perr', 'name': 'PERR#', 'desc': 'Data parity error'},
    ]
    for x in 'abcd':
        chans.append({'id': 'int' + x, 'name': 'INT%s#' % x.upper(),
                      'desc': 'Interrupt %s' % x.upper()})
    return tuple(chans)


def parse_ranges(text):
    '''Parse "0xfe000000-0xfe01ffff;0xe800+0x20" (entries separated by
    ',', ';', '|' or blanks; 'first-last', 'base+size' or one address) into
    [(first, last)] and the list of entries that could not be parsed.'''
    ranges, bad = [], []
    for sep in ';| \t':
        text = text.replace(sep, ',')
    for item in text.split(','):
        item = item.strip()
        if not item:
            continue
        try:
            if '-' in item:
                a, b = item.split('-', 1)
                first, last = int(a, 0), int(b, 0)
            elif '+' in item:
                a, b = item.split('+', 1)
                first = int(a, 0)
                last = first + int(b, 0) - 1
            else:
                first = last = int(item, 0)
        except ValueError:
            bad.append(item)
            continue
        if first < 0 or last < first:
            bad.append(item)
            continue
        ranges.append((first, last))
    return ranges, bad


class Txn:
    '''One bus transaction being decoded.'''

    def __init__(self, ss, clock):
        self.ss = ss                    # sample of the (first) address phase
        self.addr_clock = clock
        self.last_addr_clock = clock
        self.state = 'data'             # 'dac2' (second address phase next) or 'data'
        self.cmd_code = None
        self.addr = None
        self.addr_lo = None
        self.dac = False
        self.req64 = False
        self.ack64 = False
        self.gnt_master = None          # device's GNT# asserted the clock before
        self.devsel_clock = None
        self.transfers = 0
        self.data = []
        self.bytes = 0
        self.bytes_known = True
        self.mwait = 0
        self.twait = 0
        self.stop = False
        self.term = None                # classified at the first STOP# completion
        self.stop_clock = None
        self.parity_error = False
        self.perr_seen = False
        self.frame_off = False          # FRAME# deasserted: final data phase
        self.addr_ann_done = False
        self.data_ss = None             # sample of the first data-phase clock
        self.run_cat = None             # current wait-state run: 'm' / 't'
        self.run_ss = None
        self.run_n = 0
        self.prev_i = False             # IRDY#/TRDY# of the previous clock ...
        self.prev_t = False
        self.prev_done = True           # ... and whether its phase completed
        self.warned = set()
        self.end_clock = None
        self.es = None
        self.final_clock = None
        self.termination = None


class Decoder(srd.Decoder):
    api_version = 3
    id = 'pci'
    name = 'PCI'
    longname = 'Peripheral Component Interconnect'
    desc = 'Conventional PCI local bus (PCI 3.0) transactions, 32/64 bit.'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = ['pci']
    tags = ['PC']
    channels = (
        {'id': 'frame', 'name': 'FRAME#', 'desc': 'Cycle frame'},
        {'id': 'irdy', 'name': 'IRDY#', 'desc': 'Initiator ready'},
        {'id': 'trdy', 'name': 'TRDY#', 'desc': 'Target ready'},
        {'id': 'devsel', 'name': 'DEVSEL#', 'desc': 'Device select'},
    )
    optional_channels = channel_list()
    options = (
        {'id': 'clock', 'desc': 'Bus clock (auto: CLK edges if CLK is connected, '
            'else one sample per clock)', 'default': 'auto',
            'values': ('auto', 'clk', 'state')},
        {'id': 'bars', 'desc': "Device's BAR ranges (csr), e.g. "
            '0xfe000000-0xfe01ffff;0xe800-0xe81f', 'default': ''},
        {'id': 'msi', 'desc': 'MSI address window', 'default': '0xfee00000-0xfeefffff'},
    )
    annotations = (
        ('address', 'Address phase'),
        ('data', 'Data phase'),
        ('wait', 'Wait states'),
        ('termination', 'Termination'),
        ('transaction', 'Transaction summary'),
        ('warning', 'Warning'),
        ('interrupt', 'Interrupt'),
    )
    annotation_rows = (
        ('transactions', 'Transactions', (A_ADDRESS, A_TERMINATION)),
        ('phases', 'Data phases', (A_DATA, A_WAIT)),
        ('summary', 'Summary', (A_TRANSACTION,)),
        ('warnings', 'Warnings', (A_WARNING,)),
        ('interrupts', 'Interrupts', (A_INTERRUPT,)),
    )
    binary = (
        ('records', 'Transaction records (JSON lines)'),
    )

    def __init__(self):
        self.reset()

    def reset(self):
        self.txn = None
        self.pending = []           # ended transactions awaiting PAR/PERR#
        self.deferred = []          # annotations ending at the next clock
        self.par_checks = []        # (clock, txn, what, parity_lo, parity_hi)
        self.recent_xfer = {}       # clock -> txn with a data transfer there
        self.prev = None            # control values of the previous clock
        self.prev_clock = None
        self.prev_sample = None
        self.period = None          # CLK period in samples (clk mode)
        self.contiguous = False     # no clock skipped since prev_clock
        self.need_clock = False
        self.unsynced = False
        self.idle_warned = set()
        self.last = {}              # last seen level of watched channels
        self.edges = {}             # glitch watch: channel -> [count, first sample]
        self.gnt_hist = []          # (sample, asserted) changes of GNT#
        self.perr_prev = False

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)
        self.out_binary = self.register(srd.OUTPUT_BINARY)
        self.out_python = self.register(srd.OUTPUT_PYTHON)

    # ---- output helpers -------------------------------------------------

    def ann(self, ss, es, cls, texts):
        self.put(ss, es, self.out_ann, [cls, texts])

    def ann_clock(self, ss, cls, texts):
        '''Annotation over the clock starting at ss (ends at the next clock).'''
        if self.state_mode:
            self.put(ss, ss + 1, self.out_ann, [cls, texts])
        else:
            self.deferred.append((ss, cls, texts))

    def warn(self, ss, text, short=None):
        texts = [text, short] if short else [text]
        self.ann_clock(ss, A_WARNING, texts)

    def txn_warn(self, txn, ss, key, text, short=None):
        if key not in txn.warned:
            txn.warned.add(key)
            self.warn(ss, text, short)

    # ---- channel setup --------------------------------------------------

    def setup(self, pins):
        conn = [p != UNCONNECTED for p in pins]
        self.conn = conn
        self.ad_lo = [AD0 + i for i in range(32) if conn[AD0 + i]]
        self.ad_hi = [AD0 + i for i in range(32, 64) if conn[AD0 + i]]
        self.have_ad_lo = len(self.ad_lo) == 32
        self.have_ad_hi = len(self.ad_hi) == 32
        self.have_cbe_lo = all(conn[CBE0 + i] for i in range(4))
        self.have_cbe_hi = all(conn[CBE0 + i] for i in range(4, 8))
        self.have_par = conn[PAR] and self.have_ad_lo and self.have_cbe_lo
        self.have_par64 = conn[PAR64] and self.have_ad_hi and self.have_cbe_hi
        self.have_stop = conn[STOP]
        self.have_perr = conn[PERR]
        self.have_gnt = conn[GNT]
        self.have_req64 = conn[REQ64]
        self.have_ack64 = conn[ACK64]
        self.ints = [INTA + i for i in range(4) if conn[INTA + i]]

        mode = self.options['clock']
        self.mode_note = None
        if mode == 'auto':
            mode = 'clk' if conn[CLK] else 'state'
        elif mode == 'clk' and not conn[CLK]:
            self.mode_note = 'clock=clk but CLK is not connected: one sample per clock'
            mode = 'state'
        self.state_mode = mode == 'state'

        # Channels watched for level changes (GNT# history, interrupts,
        # glitches) and for leaving idle time without a per-clock wait.
        self.glitch_watch = [c for c in (FRAME, IRDY, TRDY, DEVSEL, STOP) if conn[c]]
        watch = self.glitch_watch + [c for c in (PERR, GNT) if conn[c]] + self.ints
        self.watch = watch
        if self.state_mode:
            # Every sample is a clock: step sample by sample while the bus
            # is busy, skip idle time until a watched line changes.
            self.idle_conds = [{c: 'e'} for c in watch]
            self.step_conds = {'skip': 1}
        else:
            # From the falling CLK edge on, every connected line is watched
            # so that the levels just before the rising edge are known (see
            # decode()); from the rising to the falling edge only the lines
            # needed for glitches, GNT# and interrupts.
            self.idle_conds = [{c: 'e'} for c in watch]
            self.fall_conds = [{CLK: 'f'}] + self.idle_conds
            self.rise_conds = [{CLK: 'r'}] + [
                {c: 'e'} for c in range(NUM_CHANNELS) if conn[c] and c != CLK]
        self.held = pins
        self.clk_phase = 'rise'
        for c in watch:
            self.last[c] = pins[c]
        if self.have_gnt:
            self.gnt_hist = [(-1, pins[GNT] == 0)]

        self.bars, bad = parse_ranges(self.options['bars'])
        msi, bad_msi = parse_ranges(self.options['msi'])
        self.msi = msi
        for item in bad + bad_msi:
            self.ann(0, 0, A_WARNING, ['Ignored bad address range option entry %r' % item])
        if self.mode_note:
            self.ann(0, 0, A_WARNING, [self.mode_note])

    # ---- main loop ------------------------------------------------------

    def decode(self):
        pins = self.wait({'skip': 0})
        self.setup(pins)
        if self.state_mode:
            self.decode_state(pins)
        else:
            self.decode_clk()

    def decode_state(self, pins):
        '''Every sample is one bus clock.'''
        self.process_clock(pins, self.samplenum)
        while True:
            if self.want_step():
                pins = self.wait(self.step_conds)
            else:
                self.contiguous = False
                pins = self.wait(self.idle_conds)
            s = self.samplenum
            self.observe(pins, s)
            self.process_clock(pins, s)

    def decode_clk(self):
        '''Every rising CLK edge is one bus clock.

        A PCI agent samples its inputs at the rising CLK edge with a setup
        time before it and zero hold time after it: the bus value of a
        clock is what the lines held on the last sample before CLK is seen
        high. A line that changes on the very sample of the edge (fast
        Tval with coarse sampling, zero-delay simulations) counts for the
        next clock. From the falling edge (or from leaving idle time) to
        the rising edge every connected line is watched, so 'held', the
        pins of the previous wakeup, are the levels just before the edge.
        '''
        while True:
            if not self.want_step():
                self.contiguous = False
                pins = self.wait(self.idle_conds)
                if self.observe(pins, self.samplenum):
                    self.need_clock = True
                self.held = pins
                self.clk_phase = 'rise'
                continue
            if self.clk_phase == 'fall':
                pins = self.wait(self.fall_conds)
                if self.matched[0]:
                    self.clk_phase = 'rise'
                if self.observe(pins, self.samplenum):
                    self.need_clock = True
                self.held = pins
                continue
            pins = self.wait(self.rise_conds)
            s = self.samplenum
            if self.matched[0]:
                self.process_clock(self.held, s)
                self.clk_phase = 'fall'
            if self.observe(pins, s):
                self.need_clock = True
            self.held = pins

    def want_step(self):
        if self.txn or self.pending or self.deferred or self.par_checks:
            return True
        if self.unsynced or self.prev is None:
            return True
        if self.prev[0] or self.prev[1] or self.perr_prev:
            return True     # FRAME#/IRDY#/PERR# asserted on the last clock
        if not self.state_mode and (self.need_clock or self.period is None):
            return True
        return False

    def observe(self, pins, s):
        '''Track level changes of the watched channels; True when a bus
        control signal changed (it must then be looked at on a clock).'''
        changed = False
        for c in self.watch:
            v = pins[c]
            old = self.last[c]
            if v == old:
                continue
            self.last[c] = v
            if c == GNT:
                self.gnt_hist.append((s, v == 0))
                if len(self.gnt_hist) > 8:
                    del self.gnt_hist[0]
            elif c >= INTA:
                name = 'INT%s#' % 'ABCD'[c - INTA]
                if v == 0:
                    self.ann(s, s, A_INTERRUPT, ['%s asserted' % name, '%s low' % name, name])
                else:
                    self.ann(s, s, A_INTERRUPT, ['%s deasserted' % name, '%s high' % name, name])
            else:
                changed = True
                if not self.state_mode and c != PERR:
                    e = self.edges.get(c)
                    if e is None:
                        self.edges[c] = [1, s]
                    else:
                        e[0] += 1
        return changed

    def gnt_at(self, t):
        v = None
        for smp, asserted in self.gnt_hist:
            if smp <= t:
                v = asserted
            else:
                break
        return v

    # ---- per-clock processing -------------------------------------------

    def value(self, pins, idxs, base):
        '''The number lines idxs carry, line i weighing 2**(i - base).'''
        n = len(idxs)
        if n and idxs[-1] - idxs[0] == n - 1:
            # Consecutive lines (a fully probed AD bus): one C-level pass
            # instead of a Python loop over 32 or 64 pins per data phase.
            first = idxs[0]
            digits = bytes(pins[first:first + n])[::-1].translate(PIN_DIGITS)
            return int(digits, 2) << (first - base)
        v = 0
        for i in idxs:
            if pins[i] == 1:
                v |= 1 << (i - base)
        return v

    def cbe(self, pins, lanes):
        return int(bytes(pins[CBE0:CBE0 + lanes])[::-1].translate(PIN_DIGITS), 2)

    def clock_index(self, s):
        if self.state_mode:
            return s
        if self.prev_clock is None:
            return 0
        if self.contiguous:
            p = s - self.prev_sample
            if p > 0:
                self.period = p
            return self.prev_clock + 1
        if self.period:
            gap = int(round((s - self.prev_sample) / self.period))
            return self.prev_clock + max(1, gap)
        return self.prev_clock + 1000

    def process_clock(self, pins, s):
        c = self.clock_index(s)
        self.need_clock = False
        F = pins[FRAME] == 0
        I = pins[IRDY] == 0
        T = pins[TRDY] == 0
        D = pins[DEVSEL] == 0
        S = self.have_stop and pins[STOP] == 0

        # Annotations waiting for the end of the previous clock.
        if self.deferred:
            for ss, cls, texts in self.deferred:
                self.put(ss, s if s > ss else ss, self.out_ann, [cls, texts])
            self.deferred = []

        # Glitches: a control signal changed more than once within a clock.
        if self.edges:
            for ch, (n, first) in sorted(self.edges.items()):
                if n >= 2:
                    name = self.channels[ch]['name'] if ch < 4 else 'STOP#'
                    self.ann(first, s, A_WARNING,
                             ['Glitch on %s: %d level changes within one clock' % (name, n),
                              'Glitch %s' % name])
            self.edges = {}

        # Transactions that ended on the previous clock get their end sample.
        for t in self.pending:
            if t.es is None:
                t.es = s
                self.put_termination(t)

        # PAR / PAR64: even parity, valid one clock after each phase.
        if self.par_checks:
            for clock, t, what, plo, phi in self.par_checks:
                if clock != c - 1:
                    continue
                bad = []
                if plo is not None and pins[PAR] != plo:
                    bad.append('PAR')
                if phi is not None and pins[PAR64] != phi:
                    bad.append('PAR64')
                if bad:
                    t.parity_error = True
                    ss = self.prev_sample if self.prev_sample is not None else s
                    self.ann(ss, s, A_WARNING,
                             ['%s parity error (%s wrong)' % (what, ' and '.join(bad)),
                              '%s parity error' % what, 'Parity'])
            self.par_checks = [x for x in self.par_checks if x[0] >= c]

        # PERR#: asserted two clocks after a data phase with a parity error.
        perr = self.have_perr and pins[PERR] == 0
        if perr:
            t = self.recent_xfer.get(c - 2)
            if t is not None:
                t.parity_error = True
                if not t.perr_seen:
                    t.perr_seen = True
                    self.warn(s, 'PERR#: data parity error reported', 'PERR#')
            elif not self.perr_prev:
                self.warn(s, 'PERR# asserted without a data phase two clocks earlier', 'PERR#?')
        self.perr_prev = perr
        if self.recent_xfer:
            for k in [k for k in self.recent_xfer if k < c - 2]:
                del self.recent_xfer[k]

        # Records of ended transactions, once PAR and PERR# were seen.
        if self.pending:
            keep = []
            for t in self.pending:
                if c >= t.final_clock:
                    self.finalize(t)
                else:
                    keep.append(t)
            self.pending = keep

        self.bus_clock(pins, s, c, F, I, T, D, S)

        self.prev = (F, I, T, D, S)
        self.prev_clock = c
        self.prev_sample = s
        self.contiguous = True

    def bus_clock(self, pins, s, c, F, I, T, D, S):
        prev = self.prev
        txn = self.txn
        if txn is not None:
            if txn.state == 'dac2':
                self.second_address_phase(txn, pins, s, c, F, I, T, D, S)
            else:
                self.data_clock(txn, pins, s, c, F, I, T, D, S)
            return

        if self.unsynced:
            if not F and not I:
                self.unsynced = False
            elif F and prev is not None and not prev[0]:
                self.unsynced = False
            else:
                return

        if F:
            if prev is None:
                if I or T or D or S:
                    self.unsynced = True
                    self.warn(s, 'Capture starts inside a transaction: skipped until the bus is idle',
                              'Mid-transaction start')
                    return
            elif prev[0]:
                # FRAME# held over from a transaction that was given up.
                self.unsynced = True
                self.warn(s, 'FRAME# asserted outside a transaction', 'FRAME#?')
                return
            self.address_phase(pins, s, c, F, I, T, D, S)
            return

        if prev is None and I:
            self.unsynced = True
            self.warn(s, 'Capture starts inside a transaction: skipped until the bus is idle',
                      'Mid-transaction start')
            return
        self.idle_clock(s, I, T, D, S)

    def idle_clock(self, s, I, T, D, S):
        for key, on, name in (('irdy', I, 'IRDY#'), ('trdy', T, 'TRDY#'),
                              ('devsel', D, 'DEVSEL#'), ('stop', S, 'STOP#')):
            if on:
                if key not in self.idle_warned:
                    self.idle_warned.add(key)
                    self.warn(s, '%s asserted outside a transaction' % name, '%s?' % name)
            else:
                self.idle_warned.discard(key)

    # ---- address phases -------------------------------------------------

    def address_checks(self, txn, s, I, T, D, S):
        for on, name in ((I, 'IRDY#'), (T, 'TRDY#'), (D, 'DEVSEL#'), (S, 'STOP#')):
            if on:
                self.txn_warn(txn, s, 'addr-' + name,
                              '%s asserted during the address phase' % name, '%s?' % name)

    def schedule_parity(self, txn, pins, c, what, wide):
        # PAR makes the ones of AD[31:0], C/BE#[3:0] and PAR even (PCI 3.0
        # 3.7.1): the expected PAR is the parity of the pin sum. Both groups
        # are fully connected here (have_par, have_par64).
        plo = phi = None
        if self.have_par:
            plo = (sum(pins[AD0:AD0 + 32]) + sum(pins[CBE0:CBE0 + 4])) & 1
        if wide and self.have_par64:
            phi = (sum(pins[AD0 + 32:AD0 + 64]) + sum(pins[CBE0 + 4:CBE0 + 8])) & 1
        if plo is not None or phi is not None:
            self.par_checks.append((c, txn, what, plo, phi))

    def address_phase(self, pins, s, c, F, I, T, D, S):
        txn = Txn(s, c)
        self.txn = txn
        self.idle_warned.clear()
        self.address_checks(txn, s, I, T, D, S)
        if self.have_gnt:
            # GNT# as sampled on the previous clock: the master must see it
            # asserted there before it asserts FRAME#.
            if self.state_mode:
                before = s - 1
            elif self.period:
                before = s - self.period - 1
            else:
                before = s - 1
            g = self.gnt_at(before)
            txn.gnt_master = g if g is not None else (pins[GNT] == 0)
        txn.req64 = self.have_req64 and pins[REQ64] == 0
        if self.have_ad_lo:
            txn.addr_lo = self.value(pins, self.ad_lo, AD0)
            txn.addr = txn.addr_lo
        if self.have_cbe_lo:
            txn.cmd_code = self.cbe(pins, 4)
        self.schedule_parity(txn, pins, c, 'Address', txn.req64)
        if txn.cmd_code == CMD_DAC:
            txn.dac = True
            txn.state = 'dac2'
        elif txn.cmd_code in CMDS_RESERVED:
            self.txn_warn(txn, s, 'reserved', 'Reserved bus command %d' % txn.cmd_code,
                          'Reserved command')

    def second_address_phase(self, txn, pins, s, c, F, I, T, D, S):
        if not F and not I:
            self.txn_warn(txn, s, 'frame', 'FRAME# deasserted without IRDY# asserted',
                          'FRAME# w/o IRDY#')
            self.end_txn(txn, c - 1, s)
            self.idle_clock(s, I, T, D, S)
            return
        if not F:
            self.txn_warn(txn, s, 'dacframe',
                          'FRAME# deasserted during the dual address cycle', 'FRAME#?')
            txn.frame_off = True
        self.address_checks(txn, s, I, T, D, S)
        if self.have_ad_lo and txn.addr_lo is not None:
            txn.addr = (self.value(pins, self.ad_lo, AD0) << 32) | txn.addr_lo
        else:
            txn.addr = None
        if self.have_cbe_lo:
            txn.cmd_code = self.cbe(pins, 4)
            if txn.cmd_code == CMD_DAC:
                self.txn_warn(txn, s, 'dacdac', 'Dual Address Cycle command in the second address phase',
                              'DAC twice')
            elif txn.cmd_code in CMDS_RESERVED:
                self.txn_warn(txn, s, 'reserved', 'Reserved bus command %d' % txn.cmd_code,
                              'Reserved command')
        self.schedule_parity(txn, pins, c, 'Address', txn.req64)
        txn.last_addr_clock = c
        txn.state = 'data'

    # ---- data phases ----------------------------------------------------

    def address_annotation(self, txn, s):
        txn.addr_ann_done = True
        txn.data_ss = s
        code = txn.cmd_code
        if code is None:
            name, short = 'Transaction', 'Txn'
        else:
            name, short = CMD_NAMES[code], CMD_SHORT[code]
        if txn.addr is None:
            long_text = name
            mid = short
        else:
            width = 16 if txn.dac else 8
            a = '0x%0*x' % (width, txn.addr)
            long_text = '%s %s' % (name, a)
            mid = '%s %s' % (short, a)
            if code in CMDS_CONFIG:
                long_text += ' (%s)' % self.config_text(txn.addr)
        extra = []
        if txn.dac:
            extra.append('DAC')
        if txn.req64:
            extra.append('REQ64#')
        if extra:
            long_text += ' [%s]' % ', '.join(extra)
        self.ann(txn.ss, s, A_ADDRESS, [long_text, mid, short])

    @staticmethod
    def config_text(addr):
        reg = addr & 0xfc
        fn = (addr >> 8) & 7
        if addr & 3 == 1:
            return 'type 1: bus %d device %d function %d register 0x%02x' % (
                (addr >> 16) & 0xff, (addr >> 11) & 0x1f, fn, reg)
        if addr & 3 == 0:
            return 'type 0: IDSEL AD[31:11]=0x%06x function %d register 0x%02x' % (
                addr >> 11, fn, reg)
        return 'reserved type %d' % (addr & 3)

    def close_run(self, txn, es):
        if txn.run_cat is None:
            return
        who = 'Master' if txn.run_cat == 'm' else 'Target'
        sig = 'IRDY#' if txn.run_cat == 'm' else 'TRDY#'
        n = txn.run_n
        self.ann(txn.run_ss, es, A_WAIT,
                 ['%s wait (%s deasserted): %d clock%s' % (who, sig, n, '' if n == 1 else 's'),
                  '%s wait x%d' % (who, n), 'W' + txn.run_cat])
        txn.run_cat = None
        txn.run_n = 0

    def classify_stop(self, txn, s, T, D):
        if not D:
            term = 'target_abort'
            if txn.devsel_clock is None:
                self.txn_warn(txn, s, 'stopnodevsel', 'STOP# from a target that never asserted DEVSEL#',
                              'STOP# w/o DEVSEL#')
        elif T:
            term = 'disconnect_with_data'
        elif txn.transfers == 0:
            term = 'retry'
        else:
            term = 'disconnect_without_data'
        txn.term = term
        return term

    def data_clock(self, txn, pins, s, c, F, I, T, D, S):
        if not txn.addr_ann_done:
            self.address_annotation(txn, s)

        if not F and not I:
            # Bus idle: the transaction ended on the previous clock without
            # a completed final data phase.
            if not txn.frame_off:
                self.txn_warn(txn, s, 'frame', 'FRAME# deasserted without IRDY# asserted',
                              'FRAME# w/o IRDY#')
            elif txn.devsel_clock is not None and txn.term is None:
                self.txn_warn(txn, s, 'irdydrop',
                              'IRDY# deasserted before the final data phase completed', 'IRDY#?')
            self.end_txn(txn, c - 1, s)
            self.idle_clock(s, I, T, D, S)
            return

        if F and txn.frame_off:
            # A new address phase although the final data phase did not
            # complete: legal only after a master abort (no DEVSEL#).
            if txn.devsel_clock is not None:
                self.txn_warn(txn, s, 'reframe',
                              'FRAME# reasserted before the final data phase completed', 'FRAME#?')
            self.end_txn(txn, c - 1, s)
            self.address_phase(pins, s, c, F, I, T, D, S)
            return

        # Rules for a data phase that did not complete on the previous clock.
        if not txn.prev_done:
            if txn.prev_i and not I:
                self.txn_warn(txn, s, 'irdydrop',
                              'IRDY# deasserted before the data phase completed', 'IRDY#?')
            if txn.prev_i and not F and not txn.frame_off and txn.devsel_clock is not None:
                self.txn_warn(txn, s, 'framedrop',
                              'FRAME# deasserted while IRDY# waited for the data phase', 'FRAME#?')
            if txn.prev_t and not T:
                self.txn_warn(txn, s, 'trdydrop',
                              'TRDY# deasserted before the data phase completed', 'TRDY#?')
        if not F:
            txn.frame_off = True

        if D and txn.devsel_clock is None:
            txn.devsel_clock = c
            if c - txn.last_addr_clock > 4:
                self.txn_warn(txn, s, 'latedevsel',
                              'DEVSEL# asserted after the subtractive decode clock', 'Late DEVSEL#')
        if T and not D:
            self.txn_warn(txn, s, 'trdynodevsel', 'TRDY# asserted without DEVSEL#', 'TRDY# w/o DEVSEL#')
        if self.have_ack64 and pins[ACK64] == 0:
            if not txn.req64:
                self.txn_warn(txn, s, 'ack64', 'ACK64# asserted without REQ64#', 'ACK64#?')
            elif D:
                txn.ack64 = True
        if S:
            txn.stop = True
        if (txn.stop_clock is not None and c > txn.stop_clock and F and I):
            self.txn_warn(txn, s, 'stopframe', 'FRAME# still asserted after STOP#', 'FRAME#?')

        done = False
        cat = None
        if I and T:
            done = True
            if txn.term is not None and txn.stop_clock is not None and c > txn.stop_clock:
                self.txn_warn(txn, s, 'afterstop', 'Data transferred after the target terminated',
                              'Data after STOP#')
            self.transfer(txn, pins, s, c, D)
            if S and txn.term is None:
                self.classify_stop(txn, s, T, D)
                txn.stop_clock = c
        elif I and S:
            done = True
            self.ann_clock(s, A_DATA, ['Data phase completed without data (STOP#)', 'No data', 'ND'])
            if txn.term is None:
                self.classify_stop(txn, s, T, D)
                txn.stop_clock = c
        elif S and not D and txn.devsel_clock is not None and txn.term is None:
            self.classify_stop(txn, s, T, D)
            txn.stop_clock = c
            cat = 'm'
        elif I:
            cat = 't'
        else:
            cat = 'm'
            if not T and not S:
                # Neither side is ready: the clock is a wait state of both.
                txn.twait += 1

        if cat != txn.run_cat:
            self.close_run(txn, s)
            if cat is not None:
                txn.run_cat = cat
                txn.run_ss = s
        if cat == 'm':
            txn.mwait += 1
            txn.run_n += 1
        elif cat == 't':
            txn.twait += 1
            txn.run_n += 1

        txn.prev_i, txn.prev_t, txn.prev_done = I, T, done
        if done and not F:
            self.end_txn(txn, c, None)

    def transfer(self, txn, pins, s, c, D):
        wide = txn.req64 and self.have_ack64 and pins[ACK64] == 0
        if wide:
            txn.ack64 = True
        lanes = 8 if wide else 4
        n = txn.transfers
        txn.transfers += 1
        self.recent_xfer[c] = txn
        be = self.cbe(pins, lanes)
        if (wide and self.have_cbe_hi and self.have_cbe_lo) or (not wide and self.have_cbe_lo):
            nbytes = lanes - bin(be).count('1')
            txn.bytes += nbytes
        else:
            nbytes = None
            txn.bytes_known = False
        value = None
        if self.ad_lo:
            value = self.value(pins, self.ad_lo, AD0)
            if wide and self.ad_hi:
                value |= self.value(pins, self.ad_hi, AD0)
            if len(txn.data) < 64:
                txn.data.append(value)
        self.schedule_parity(txn, pins, c, 'Data', wide)

        rw = ''
        if txn.cmd_code in CMDS_READ:
            rw = 'Read '
        elif txn.cmd_code in CMDS_WRITE:
            rw = 'Write '
        if value is None:
            texts = ['%sdata phase %d' % (rw, n), 'Data %d' % n, 'D']
        else:
            v = '0x%0*x' % (16 if wide else 8, value)
            if nbytes is None:
                texts = ['%sdata phase %d: %s' % (rw, n, v), v]
            else:
                texts = ['%sdata phase %d: %s (BE# 0x%0*x, %d byte%s)' % (
                    rw, n, v, 2 if wide else 1, be, nbytes, '' if nbytes == 1 else 's'),
                    '%s BE#%x' % (v, be), v]
        self.ann_clock(s, A_DATA, texts)

    # ---- ending ---------------------------------------------------------

    def end_txn(self, txn, end_clock, es):
        self.txn = None
        txn.end_clock = end_clock
        if es is not None:
            self.close_run(txn, es)
            if not txn.addr_ann_done:
                self.address_annotation(txn, es)
        if txn.term is not None:
            txn.termination = txn.term
        elif txn.devsel_clock is None:
            txn.termination = 'master_abort'
            if (txn.cmd_code != 1 and end_clock - txn.last_addr_clock < 4
                    and txn.state == 'data'):
                self.txn_warn(txn, txn.data_ss if txn.data_ss is not None else txn.ss,
                              'earlyabort', 'Master abort before the DEVSEL# window ended',
                              'Early master abort')
        else:
            txn.termination = 'normal'
        txn.final_clock = end_clock + (2 if self.have_perr else 1)
        txn.es = es
        if es is not None:
            self.put_termination(txn)
        self.pending.append(txn)

    def put_termination(self, txn):
        if txn.run_cat is not None:
            self.close_run(txn, txn.es)
        ss = txn.data_ss if txn.data_ss is not None else txn.ss
        term = txn.termination
        texts = TERMINATION_TEXTS[term]
        n = txn.transfers
        counts = '%d data phase%s' % (n, '' if n == 1 else 's')
        if txn.bytes_known and self.have_cbe_lo:
            counts += ', %d bytes' % txn.bytes
        self.ann(ss, txn.es, A_TERMINATION,
                 ['%s: %s' % (texts[0], counts), '%s, %d' % (texts[1], n), texts[2]])

    def devsel_speed(self, txn):
        if txn.devsel_clock is None:
            return 'none'
        n = txn.devsel_clock - txn.last_addr_clock
        return DEVSEL_SPEEDS[min(max(n, 1), 4)]

    @staticmethod
    def in_ranges(ranges, addr):
        for first, last in ranges:
            if first <= addr <= last:
                return True
        return False

    def classify(self, txn):
        code = txn.cmd_code
        if code in CMDS_CONFIG:
            return 'config'
        if code is not None and txn.addr is not None:
            if code in CMDS_MEM or code in CMDS_IO:
                if self.in_ranges(self.bars, txn.addr):
                    return 'csr'
                if code in CMDS_MEM_WRITE and self.in_ranges(self.msi, txn.addr):
                    return 'msi'
                if not self.bars and txn.gnt_master is False:
                    return 'csr'
                if self.bars and txn.gnt_master is False:
                    # neither the device's nor addressed to it: another agent's traffic
                    return 'unknown'
                if code in CMDS_MEM:
                    return 'dma'
            return 'unknown'
        if txn.gnt_master is not None:
            return 'dma' if txn.gnt_master else 'csr'
        return 'unknown'

    @staticmethod
    def is_wide(txn):
        '''64-bit transaction: REQ64# asserted with FRAME# and not declined
        (a target that claims it with DEVSEL# but not ACK64# makes it a
        32-bit transaction; with no target at all nobody declined it).'''
        return bool(txn.req64 and (txn.ack64 or txn.devsel_clock is None))

    def finalize(self, txn):
        code = txn.cmd_code
        devsel = self.devsel_speed(txn)
        kind = self.classify(txn)
        rec = {
            'ss': txn.ss,
            'es': txn.es,
            'command': CMD_NAMES[code] if code is not None else None,
            'command_code': code,
            'address': txn.addr,
            'dac': txn.dac,
            'data_phases': txn.transfers,
            'bytes': txn.bytes if txn.bytes_known and self.have_cbe_lo else None,
            'termination': txn.termination,
            'kind': kind,
            'master_wait_clocks': txn.mwait,
            'target_wait_clocks': txn.twait,
            'devsel': devsel,
            'wide': self.is_wide(txn),
            'parity_error': txn.parity_error,
            'stop': txn.stop,
            'data': txn.data[:64],
        }
        line = json.dumps(rec, separators=(', ', ': ')) + '\n'
        self.put(txn.ss, txn.es, self.out_binary, [0, line.encode('utf-8')])
        self.put(txn.ss, txn.es, self.out_python, rec)

        name = rec['command'] or 'Transaction'
        short = CMD_SHORT[code] if code is not None else 'Txn'
        a = ''
        if txn.addr is not None:
            a = ' 0x%0*x' % (16 if txn.dac else 8, txn.addr)
        n = txn.transfers
        parts = ['%d data phase%s' % (n, '' if n == 1 else 's')]
        if rec['bytes'] is not None:
            parts.append('%d bytes' % rec['bytes'])
        parts.append(TERMINATION_TEXTS[txn.termination][0].lower())
        parts.append('DEVSEL# %s' % devsel)
        if txn.mwait or txn.twait:
            parts.append('waits %d master/%d target' % (txn.mwait, txn.twait))
        if rec['wide']:
            parts.append('64-bit')
        elif txn.req64:
            parts.append('REQ64# without ACK64#: 32-bit')
        if txn.parity_error:
            parts.append('PARITY ERROR')
        parts.append(kind)
        self.ann(txn.ss, txn.es, A_TRANSACTION,
                 ['%s%s: %s' % (name, a, ', '.join(parts)),
                  '%s%s %dx %s' % (short, a, n, TERMINATION_TEXTS[txn.termination][1]),
                  short])
