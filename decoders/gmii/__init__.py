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
GMII, the gigabit media-independent interface of IEEE 802.3 clause 35, one
direction at a time: TX_EN/TX_ER/TXD<7:0> (MAC to PHY) or RX_DV/RX_ER/RXD<7:0>
(PHY to MAC). One octet per clock, RXD<0>/TXD<0> the least significant bit.

The decoder finds the preamble (0x55 octets) and the start frame delimiter
(0xD5), hands the octets of each frame (destination address through FCS) to
stacked decoders (see 'ethernet'), checks the FCS by its CRC-32 residue,
shows error symbols (ER during a frame; ER with EN low: false carrier 0x0E,
carrier extend 0x0F, carrier extend error 0x1F, LPI 0x01) and measures the
inter-frame gap in clocks and nanoseconds.

Clocking: with the 'clk' channel (GTX_CLK or RX_CLK) connected, samples are
taken on its rising edges (timing capture). Without it, every sample is one
125 MHz clock (a state-mode capture); option 'clock' forces either.
'''

from .pd import Decoder
