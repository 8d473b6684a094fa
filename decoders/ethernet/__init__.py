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

'''
IEEE 802.3 Ethernet frames (clause 3), stacked on the 'gmii' decoder.

Shows the destination and source addresses, 802.1Q / 802.1ad VLAN tags
(TPID 0x8100 / 0x88A8), the Length/Type field, MAC Control frames (PAUSE,
802.3 Annex 31B; priority-based flow control, IEEE 802.1Qbb), an IPv4 and
UDP summary, and the 16-octet nicrig test header at the start of a UDP
payload (magic "NRG1": kind and sequence number).

Binary outputs:
 - 'pcap': a pcap stream (link type 1, Ethernet; frames without their FCS),
   so that "sigrok-cli ... -B ethernet=pcap > x.pcap" opens in Wireshark.
 - 'records': JSON Lines, one object per frame.

Frames cut off by the end of the capture are annotated but written to
neither binary output.
'''

from .pd import Decoder
