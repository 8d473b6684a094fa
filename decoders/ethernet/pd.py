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
import struct
import sigrokdecode as srd

'''
Input: the 'gmii' decoder's OUTPUT_PYTHON ['FRAME', <dict>] packets (see
decoders/gmii/pd.py); other packets are ignored.

OUTPUT_PYTHON format:

['FRAME', <record>] per frame that ended inside the capture, where <record>
is the dict the binary class 'records' writes as one JSON line:
 - 'ss', 'es': first preamble octet (EN rises), first clock after the FCS.
 - 'direction': 'tx' or 'rx' (gmii's option).
 - 'length': octets from the destination address through the FCS.
 - 'dst', 'src': 'aa:bb:cc:dd:ee:ff' (None when the frame is too short).
 - 'vlan': VLAN ID of the outer 802.1Q / 802.1ad tag, -1 when untagged.
 - 'ethertype': the Length/Type field at octet 12 (0x8100 / 0x88A8 for a
   tagged frame, as Wireshark's eth.type); 'inner_ethertype': the
   Length/Type after all tags (equal to 'ethertype' when untagged); -1 when
   the frame is too short.
 - 'fcs_ok': bool. 'error_octets': octets received with ER high.
 - 'pause_quanta', 'pause_ns': PAUSE (opcode 0x0001) pause_time and its
   duration at option 'link_rate' (quanta x 512 bit times), else -1.
 - 'pfc': the eight time[0..7] quanta of a PFC frame (opcode 0x0101), else
   None.
 - 'ip_src', 'ip_dst' (dotted quad or None), 'ip_proto', 'frag_offset' (the
   IPv4 fragment offset field, in units of 8 octets), 'udp_sport',
   'udp_dport': -1 when absent.
 - 'nicrig_kind' (1 stream, 2 request, 3 response), 'seq': from the nicrig
   header at the start of the UDP payload, -1 when absent. A later fragment
   of an IPv4 datagram takes them from the first fragment (same source,
   destination, protocol and id) when that one was decoded before it.
'''

(A_DST, A_SRC, A_VLAN, A_TYPE, A_MACCTRL, A_PAUSE, A_PFC, A_IPV4, A_UDP, A_NICRIG,
 A_PAYLOAD, A_FCS, A_FRAME, A_WARNING) = range(14)

B_PCAP, B_RECORDS = range(2)

TPID_NAMES = {0x8100: '802.1Q C-VLAN', 0x88A8: '802.1ad S-VLAN'}
ETHERTYPE_NAMES = {
    0x0800: 'IPv4', 0x0806: 'ARP', 0x22F0: 'AVTP', 0x8100: '802.1Q', 0x86DD: 'IPv6',
    0x8808: 'MAC Control', 0x8809: 'Slow protocols', 0x8847: 'MPLS', 0x8848: 'MPLS multicast',
    0x8863: 'PPPoE discovery', 0x8864: 'PPPoE session', 0x888E: '802.1X', 0x88A8: '802.1ad',
    0x88CC: 'LLDP', 0x88F7: 'PTP', 0x8906: 'FCoE', 0x8914: 'FIP',
}
MAC_CONTROL_OPCODES = {
    0x0001: 'PAUSE', 0x0002: 'GATE', 0x0003: 'REPORT', 0x0004: 'REGISTER_REQ',
    0x0005: 'REGISTER', 0x0006: 'REGISTER_ACK', 0x0101: 'PFC',
}
IP_PROTOS = {1: 'ICMP', 2: 'IGMP', 6: 'TCP', 17: 'UDP', 47: 'GRE', 50: 'ESP', 58: 'ICMPv6', 132: 'SCTP'}
NICRIG_MAGIC = 0x4E524731
NICRIG_KINDS = {1: 'stream', 2: 'request', 3: 'response'}
MAC_CONTROL_DST = '01:80:c2:00:00:01'
PAUSE_QUANTUM_BITS = 512
MAX_BASIC_FRAME = 1518
MAX_ENVELOPE_FRAME = 2000
PCAP_SNAPLEN = 65535
MAX_TAGS = 8
MAX_DATAGRAMS = 256


def u16(d, i):
    return (d[i] << 8) | d[i + 1]


def mac_str(b):
    return ':'.join('%02x' % x for x in b)


def ip_str(b):
    return '%d.%d.%d.%d' % tuple(b)


def ones_sum(data):
    if len(data) % 2:
        data = data + b'\x00'
    total = sum(struct.unpack('!%dH' % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def epoch_ns(text):
    ''''1764158400.000123456' (seconds since the epoch, decimal) -> integer ns; None if it is not such a number.'''
    whole, _, frac = str(text).strip().partition('.')
    if not whole.isdigit() or (frac and not frac.isdigit()):
        return None
    return int(whole) * 10 ** 9 + int((frac + '000000000')[:9])


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


def num(x):
    '''A float as an int when it is whole (JSON "512" rather than "512.0").'''
    r = round(x)
    return int(r) if abs(x - r) < 1e-9 else round(x, 3)


class Decoder(srd.Decoder):
    api_version = 3
    id = 'ethernet'
    name = 'Ethernet'
    longname = 'IEEE 802.3 Ethernet frames'
    desc = 'Ethernet MAC frames: addresses, VLAN, PAUSE/PFC, IPv4/UDP, nicrig header.'
    license = 'gplv3+'
    inputs = ['gmii']
    outputs = ['ethernet']
    tags = ['Networking', 'PC']
    options = (
        {'id': 'link_rate', 'desc': 'Link rate in bit/s (PAUSE quanta to time)', 'default': 1e9},
        {'id': 'pcap_resolution', 'desc': 'pcap timestamp resolution',
            'default': 'us', 'values': ('us', 'ns')},
        {'id': 'pcap_start', 'desc': 'pcap time of sample 0: seconds since 1970-01-01 UTC '
            '(decimal, to the ns; nicrig export prints it)', 'default': '0'},
    )
    annotations = (
        ('dst', 'Destination address'),
        ('src', 'Source address'),
        ('vlan', 'VLAN tag'),
        ('type', 'Length/Type'),
        ('mac-control', 'MAC Control opcode'),
        ('pause', 'PAUSE'),
        ('pfc', 'Priority flow control'),
        ('ipv4', 'IPv4 header'),
        ('udp', 'UDP header'),
        ('nicrig', 'nicrig header'),
        ('payload', 'Payload'),
        ('fcs', 'FCS'),
        ('frame', 'Frame summary'),
        ('warning', 'Warning'),
    )
    annotation_rows = (
        ('header', 'MAC header', (A_DST, A_SRC, A_VLAN, A_TYPE, A_FCS)),
        ('protocol', 'Protocol', (A_MACCTRL, A_PAUSE, A_PFC, A_IPV4, A_UDP, A_NICRIG, A_PAYLOAD)),
        ('frames', 'Frames', (A_FRAME,)),
        ('warnings', 'Warnings', (A_WARNING,)),
    )
    binary = (
        ('pcap', 'pcap stream (link type Ethernet, FCS stripped)'),
        ('records', 'JSON Lines, one object per frame'),
    )

    def __init__(self):
        self.reset()

    def reset(self):
        self.samplerate = None
        self.pcap_started = False
        # (src, dst, protocol, id) of IPv4 datagrams whose first fragment
        # carried a nicrig header -> (kind, seq), for their later fragments.
        self.fragments = {}

    def metadata(self, key, value):
        if key == srd.SRD_CONF_SAMPLERATE:
            self.samplerate = value

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)
        self.out_python = self.register(srd.OUTPUT_PYTHON)
        self.out_binary = self.register(srd.OUTPUT_BINARY)
        try:
            self.link_rate = float(self.options['link_rate'])
        except (TypeError, ValueError):
            self.link_rate = 1e9
        if not self.link_rate > 0:
            self.link_rate = 1e9
        self.pcap_ns = self.options['pcap_resolution'] == 'ns'
        self.pcap_start_ns = epoch_ns(self.options['pcap_start'])
        if self.pcap_start_ns is None:
            raise ValueError('option pcap_start=%r: give seconds since 1970-01-01 UTC, e.g. 1764158400.5'
                             % (self.options['pcap_start'],))

    def decode(self, ss, es, data):
        try:
            ptype, f = data
        except (TypeError, ValueError):
            return
        if ptype != 'FRAME' or not isinstance(f, dict):
            return
        try:
            self.frame(f)
        except Exception as exc:    # never let a malformed frame stop the decoder
            self.put(ss, es, self.out_ann, [A_WARNING, ['Internal error: %r' % (exc,), 'Internal error']])

    # -- annotation helpers -------------------------------------------------------------------

    def ann(self, i, j, cls, texts):
        '''Annotate frame octets [i, j).'''
        j = min(j, self.n)
        if i < 0 or j <= i:
            return
        self.put(self.bss[i], self.bes[j - 1], self.out_ann, [cls, texts])

    def warn(self, i, j, texts):
        if j <= i or i >= self.n:
            self.put(self.f_ss, self.f_es, self.out_ann, [A_WARNING, texts])
        else:
            self.ann(i, j, A_WARNING, texts)

    # -- one frame ------------------------------------------------------------------------------

    def frame(self, f):
        d = bytes(f.get('data') or b'')
        self.n = n = len(d)
        self.f_ss, self.f_es = f.get('ss', 0), f.get('es', 0)
        self.bss = list(f.get('byte_ss') or [])
        self.bes = list(f.get('byte_es') or [])
        if len(self.bss) != n or len(self.bes) != n:
            self.bss = [self.f_ss] * n
            self.bes = [self.f_es] * n
        truncated = bool(f.get('truncated'))
        fcs_ok = bool(f.get('fcs_ok'))
        errors = [e for e in (f.get('errors') or []) if e.get('kind') == 'data_error']
        self.body_end = n if truncated else max(n - 4, 0)
        rec = {
            'ss': self.f_ss, 'es': self.f_es, 'direction': f.get('direction', ''),
            'length': n, 'dst': None, 'src': None, 'vlan': -1, 'ethertype': -1,
            'inner_ethertype': -1, 'fcs_ok': fcs_ok, 'error_octets': len(errors),
            'pause_quanta': -1, 'pause_ns': -1, 'pfc': None,
            'ip_src': None, 'ip_dst': None, 'ip_proto': -1, 'frag_offset': -1,
            'udp_sport': -1, 'udp_dport': -1, 'nicrig_kind': -1, 'seq': -1,
        }
        self.summary = []
        self.header(d, rec)
        if not truncated and n >= 4:
            self.ann(n - 4, n, A_FCS, ['FCS %s' % ('OK' if fcs_ok else 'error'),
                                       'FCS OK' if fcs_ok else 'FCS!', 'F'])
        status = 'truncated' if truncated else ('FCS OK' if fcs_ok else 'FCS error')
        if errors:
            status += ', %d error octet(s)' % len(errors)
        what = ', '.join(self.summary) if self.summary else 'frame'
        self.put(self.f_ss, self.f_es, self.out_ann, [A_FRAME, [
            '%s: %s, %d octets, %s' % (rec['direction'].upper() or 'Frame', what, n, status),
            '%s, %d B, %s' % (what, n, status), what]])
        if truncated:
            return
        self.put(self.f_ss, self.f_es, self.out_python, ['FRAME', rec])
        self.write_pcap(d[:self.body_end])
        line = json.dumps(rec) + '\n'
        self.put(self.f_ss, self.f_es, self.out_binary, [B_RECORDS, line.encode('utf-8')])

    def header(self, d, rec):
        n = self.n
        if n < 6:
            self.warn(0, n, ['Frame of %d octets: too short for a MAC header' % n, 'Too short'])
            return
        dst = mac_str(d[0:6])
        rec['dst'] = dst
        if d[0:6] == b'\xff' * 6:
            kind = 'broadcast'
        elif d[0] & 1:
            kind = 'MAC Control multicast' if dst == MAC_CONTROL_DST else 'multicast'
        else:
            kind = 'unicast'
        self.ann(0, 6, A_DST, ['Destination %s (%s)' % (dst, kind), 'DA %s' % dst, 'DA'])
        if n < 12:
            self.warn(6, n, ['Frame ends inside the source address', 'Too short'])
            return
        src = mac_str(d[6:12])
        rec['src'] = src
        self.ann(6, 12, A_SRC, ['Source %s' % src, 'SA %s' % src, 'SA'])
        if d[6] & 1:
            self.warn(6, 12, ['Source address %s is a group address (802.3 3.2.3)' % src, 'Group SA'])
        end = self.body_end
        off = 12
        tags = 0
        while off + 4 <= end and tags < MAX_TAGS:
            tpid = u16(d, off)
            if tpid not in TPID_NAMES:
                break
            tci = u16(d, off + 2)
            vid, pcp, dei = tci & 0xFFF, tci >> 13, (tci >> 12) & 1
            if tags == 0:
                rec['vlan'] = vid
                rec['ethertype'] = tpid
            self.ann(off, off + 4, A_VLAN, ['%s tag (0x%04X): VID %d, PCP %d, DEI %d'
                                            % (TPID_NAMES[tpid], tpid, vid, pcp, dei),
                                            'VLAN %d' % vid, 'V'])
            if tags == 0:
                self.summary.append('VLAN %d' % vid)
            tags += 1
            off += 4
        if off + 2 > end:
            self.warn(off, n, ['Frame ends before the Length/Type field', 'No Length/Type'])
            return
        lt = u16(d, off)
        if tags == 0:
            rec['ethertype'] = lt
        rec['inner_ethertype'] = lt
        maxlen = MAX_BASIC_FRAME if tags == 0 else MAX_ENVELOPE_FRAME
        if n > maxlen and end == n - 4:
            self.warn(0, n, ['Frame of %d octets exceeds the %d-octet maximum (802.3 3.2.7)'
                             % (n, maxlen), 'Oversize (%d)' % n])
        p = off + 2
        if lt <= 1500:
            avail = end - p
            self.ann(off, p, A_TYPE, ['Length %d' % lt, 'Len %d' % lt, 'L'])
            self.summary.append('802.3 length %d' % lt)
            if lt > avail:
                self.warn(off, p, ['Length field %d exceeds the %d-octet data field' % (lt, avail),
                                   'Bad length'])
            elif avail >= 3:
                self.ann(p, p + lt, A_PAYLOAD, ['LLC DSAP 0x%02X SSAP 0x%02X, %d octets'
                                                % (d[p], d[p + 1], lt), 'LLC', 'L'])
            if lt < avail:
                self.ann(p + lt, end, A_PAYLOAD, ['Pad %d octets' % (avail - lt), 'Pad', 'P'])
            return
        if lt < 0x0600:
            self.ann(off, p, A_TYPE, ['Length/Type 0x%04X' % lt, '0x%04X' % lt, 'T'])
            self.warn(off, p, ['Length/Type 0x%04X is neither a length nor a type (802.3 3.2.6)'
                               % lt, 'Bad Length/Type'])
            return
        name = ETHERTYPE_NAMES.get(lt)
        self.ann(off, p, A_TYPE, ['EtherType 0x%04X%s' % (lt, ' (%s)' % name if name else ''),
                                  name or '0x%04X' % lt, 'T'])
        if lt == 0x8808:
            self.mac_control(d, p, rec)
        elif lt == 0x0800:
            self.ipv4(d, p, rec)
        else:
            self.summary.append(name or 'EtherType 0x%04X' % lt)
            if end > p:
                self.ann(p, end, A_PAYLOAD, ['Payload %d octets' % (end - p), 'Payload', 'P'])

    def mac_control(self, d, p, rec):
        end = self.body_end
        if p + 2 > end:
            self.warn(p, end, ['MAC Control frame without an opcode', 'No opcode'])
            self.summary.append('MAC Control')
            return
        op = u16(d, p)
        name = MAC_CONTROL_OPCODES.get(op)
        self.ann(p, p + 2, A_MACCTRL, ['MAC Control opcode 0x%04X (%s)' % (op, name or 'unknown'),
                                       name or 'Op 0x%04X' % op, 'O'])
        q = p + 2
        if op == 0x0001:
            self.summary.append('PAUSE')
            if q + 2 > end:
                self.warn(q, end, ['PAUSE frame ends before pause_time', 'No pause_time'])
                return
            quanta = u16(d, q)
            pause_ns = quanta * PAUSE_QUANTUM_BITS * 1e9 / self.link_rate
            rec['pause_quanta'] = quanta
            rec['pause_ns'] = num(pause_ns)
            self.summary[-1] = 'PAUSE %d quanta (%s)' % (quanta, fmt_ns(pause_ns))
            texts = ['PAUSE pause_time %d quanta = %s at %g bit/s%s'
                     % (quanta, fmt_ns(pause_ns), self.link_rate, ' (resume)' if quanta == 0 else ''),
                     'PAUSE %d (%s)' % (quanta, fmt_ns(pause_ns)), 'PAUSE']
            self.ann(q, q + 2, A_PAUSE, texts)
            self.reserved(d, q + 2, end)
        elif op == 0x0101:
            self.summary.append('PFC')
            if q + 18 > end:
                self.warn(q, end, ['PFC frame ends before its eight time fields', 'Short PFC'])
                return
            cev = u16(d, q)
            enabled = [c for c in range(8) if cev & (1 << c)]
            self.ann(q, q + 2, A_PFC, ['Priority enable vector 0x%04X: classes %s'
                                       % (cev, ','.join(str(c) for c in enabled) or 'none'),
                                       'Enable 0x%02X' % (cev & 0xFF), 'E'])
            if cev >> 8:
                self.warn(q, q + 2, ['PFC enable vector: reserved upper octet 0x%02X not zero'
                                     % (cev >> 8), 'Reserved bits set'])
            times = []
            for c in range(8):
                t = u16(d, q + 2 + 2 * c)
                times.append(t)
                on = c in enabled
                tns = t * PAUSE_QUANTUM_BITS * 1e9 / self.link_rate
                self.ann(q + 2 + 2 * c, q + 4 + 2 * c, A_PFC,
                         ['Class %d: %d quanta (%s)%s' % (c, t, fmt_ns(tns), '' if on else ', not enabled'),
                          'C%d %d%s' % (c, t, '' if on else '-'), 'C%d' % c])
            rec['pfc'] = times
            self.summary[-1] = 'PFC classes %s' % (','.join(str(c) for c in enabled) or 'none')
            self.reserved(d, q + 18, end)
        else:
            self.summary.append('MAC Control %s' % (name or '0x%04X' % op))
            if end > q:
                self.ann(q, end, A_PAYLOAD, ['MAC Control parameters, %d octets' % (end - q),
                                             'Parameters', 'P'])

    def reserved(self, d, i, end):
        if end <= i:
            return
        nonzero = any(d[i:end])
        self.ann(i, end, A_PAYLOAD, ['Reserved, %d octets%s' % (end - i, ' (not zero)' if nonzero else ''),
                                     'Reserved', 'R'])

    def ipv4(self, d, p, rec):
        end = self.body_end
        if end - p < 20:
            self.summary.append('IPv4')
            self.warn(p, end, ['IPv4 header truncated (%d octets)' % max(end - p, 0), 'Short IPv4'])
            return
        ver, ihl = d[p] >> 4, d[p] & 15
        hl = ihl * 4
        if ver != 4 or ihl < 5 or p + hl > end:
            self.summary.append('IPv4')
            self.warn(p, p + 1, ['Bad IPv4 version/IHL 0x%02X' % d[p], 'Bad IPv4'])
            return
        tot = u16(d, p + 2)
        ident = u16(d, p + 4)
        ff = u16(d, p + 6)
        df, mf, fo = (ff >> 14) & 1, (ff >> 13) & 1, ff & 0x1FFF
        ttl, proto = d[p + 8], d[p + 9]
        src, dst = ip_str(d[p + 12:p + 16]), ip_str(d[p + 16:p + 20])
        rec.update({'ip_src': src, 'ip_dst': dst, 'ip_proto': proto, 'frag_offset': fo})
        pname = IP_PROTOS.get(proto, 'proto %d' % proto)
        self.ann(p, p + hl, A_IPV4, [
            'IPv4 %s -> %s, %s, total length %d, id 0x%04X, fragment offset %d (%d octets), MF %d, DF %d, TTL %d'
            % (src, dst, pname, tot, ident, fo, fo * 8, mf, df, ttl),
            'IPv4 %s -> %s %s' % (src, dst, pname), 'IPv4'])
        if ones_sum(d[p:p + hl]) != 0xFFFF:
            self.warn(p + 10, p + 12, ['IPv4 header checksum 0x%04X wrong' % u16(d, p + 10),
                                       'IP checksum!'])
        avail = end - p
        if tot < hl or tot > avail:
            self.warn(p + 2, p + 4, ['IPv4 total length %d, but %d octets follow the MAC header'
                                     % (tot, avail), 'Bad IP length'])
            ip_end = end
        else:
            ip_end = p + tot
        frag = ''
        if mf or fo:
            frag = ' fragment @%d%s' % (fo * 8, ' MF' if mf else '')
        key = (src, dst, proto, ident)
        if proto == 17 and fo == 0:
            self.udp(d, p, p + hl, ip_end, rec, src, dst, frag, bool(mf))
            if mf and rec['seq'] >= 0:
                if len(self.fragments) >= MAX_DATAGRAMS:
                    self.fragments.pop(next(iter(self.fragments)))
                self.fragments[key] = (rec['nicrig_kind'], rec['seq'])
        else:
            self.summary.append('IPv4 %s -> %s %s%s' % (src, dst, pname, frag))
            if ip_end > p + hl:
                self.ann(p + hl, ip_end, A_PAYLOAD, ['IPv4 payload %d octets%s' % (ip_end - p - hl, frag),
                                                     'IP payload', 'P'])
            known = self.fragments.get(key) if fo else None
            if known is not None:
                rec['nicrig_kind'], rec['seq'] = known
                kname = NICRIG_KINDS.get(known[0], 'kind %d' % known[0])
                self.summary.append('nicrig %s #%d (first fragment)' % (kname, known[1]))
                if not mf:
                    del self.fragments[key]
        if end > ip_end:
            self.ann(ip_end, end, A_PAYLOAD, ['Pad %d octets' % (end - ip_end), 'Pad', 'P'])

    def udp(self, d, ip, u, ip_end, rec, src, dst, frag, more_fragments):
        if ip_end - u < 8:
            self.summary.append('IPv4 %s -> %s UDP%s' % (src, dst, frag))
            self.warn(u, ip_end, ['UDP header truncated', 'Short UDP'])
            return
        sport, dport, ulen, csum = struct.unpack('!HHHH', d[u:u + 8])
        rec['udp_sport'], rec['udp_dport'] = sport, dport
        self.ann(u, u + 8, A_UDP, ['UDP %d -> %d, length %d, checksum 0x%04X' % (sport, dport, ulen, csum),
                                   'UDP %d -> %d' % (sport, dport), 'UDP'])
        self.summary.append('UDP %s:%d -> %s:%d%s' % (src, sport, dst, dport, frag))
        if ulen < 8:
            self.warn(u + 4, u + 6, ['UDP length %d below 8' % ulen, 'Bad UDP length'])
            pl_end = ip_end
        elif more_fragments:
            pl_end = ip_end
        else:
            pl_end = min(ip_end, u + ulen)
            if u + ulen > ip_end:
                self.warn(u + 4, u + 6, ['UDP length %d exceeds the IPv4 payload (%d)' % (ulen, ip_end - u),
                                         'Bad UDP length'])
            elif csum != 0:
                pseudo = d[ip + 12:ip + 20] + struct.pack('!BBH', 0, 17, ulen)
                if ones_sum(pseudo + d[u:u + ulen]) != 0xFFFF:
                    self.warn(u + 6, u + 8, ['UDP checksum 0x%04X wrong' % csum, 'UDP checksum!'])
        pl = u + 8
        if pl_end - pl >= 16 and struct.unpack('!I', d[pl:pl + 4])[0] == NICRIG_MAGIC:
            _, kind, flags, seq, test_id = struct.unpack('!IHHII', d[pl:pl + 16])
            rec['nicrig_kind'], rec['seq'] = kind, seq
            kname = NICRIG_KINDS.get(kind, 'kind %d' % kind)
            self.ann(pl, pl + 16, A_NICRIG, ['nicrig %s, seq %d, test %d, flags 0x%04X'
                                             % (kname, seq, test_id, flags),
                                             'nicrig %s #%d' % (kname, seq), 'NRG'])
            self.summary.append('nicrig %s #%d' % (kname, seq))
            if pl_end > pl + 16:
                self.ann(pl + 16, pl_end, A_PAYLOAD, ['Payload %d octets' % (pl_end - pl - 16), 'Payload', 'P'])
        elif pl_end > pl:
            self.ann(pl, pl_end, A_PAYLOAD, ['UDP payload %d octets' % (pl_end - pl), 'Payload', 'P'])

    # -- pcap ---------------------------------------------------------------------------------

    def write_pcap(self, pkt):
        out = b''
        if not self.pcap_started:
            self.pcap_started = True
            magic = 0xA1B23C4D if self.pcap_ns else 0xA1B2C3D4
            out += struct.pack('<IHHiIII', magic, 2, 4, 0, 0, PCAP_SNAPLEN, 1)
        scale = 10 ** 9 if self.pcap_ns else 10 ** 6
        ns = self.pcap_start_ns
        if self.samplerate:
            ns += (int(self.f_ss) * 10 ** 9) // int(self.samplerate)
        secs, frac = divmod(ns * scale // 10 ** 9, scale)
        caplen = min(len(pkt), PCAP_SNAPLEN)
        out += struct.pack('<IIII', secs & 0xFFFFFFFF, frac, caplen, len(pkt)) + pkt[:caplen]
        self.put(self.f_ss, self.f_es, self.out_binary, [B_PCAP, out])
