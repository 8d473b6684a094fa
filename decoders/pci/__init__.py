##
## This file is part of nicrig.
##
## This program is free software; you can redistribute it and/or modify
## it under the terms of the GNU General Public License as published by
## the Free Software Foundation; either version 3 of the License, or
## (at your option) any later version.
##

'''
PCI (conventional PCI, PCI Local Bus Specification 3.0) bus transactions.

Decodes the 32- and 64-bit multiplexed address/data bus clock by clock:
bus command (all 16 C/BE# codes), address (including dual address cycles),
every data phase with its data and byte enables, master and target wait
states, DEVSEL# decode speed, the termination (normal, retry, disconnect with
or without data, target abort, master abort), address and data parity
(PAR, PAR64, PERR#), 64-bit transfers (REQ64#/ACK64#) and INTA#..INTD#.

Only FRAME#, IRDY#, TRDY# and DEVSEL# are required: without AD/C/BE# the
decoder still reports transactions, data phases, wait states and
terminations.

Clocking ('clock' option): with a CLK channel every rising CLK edge is one
bus clock, the bus value being what the lines held just before the edge
(setup time; zero hold time); without one (state-mode captures, one sample
per bus clock) every sample is one clock.

Option 'bars' lists the device's BAR ranges ('first-last' or 'base+size',
separated by ',' in PulseView, by ';' on the sigrok-cli command line, which
splits -P at ',' and ':'); option 'msi' is the MSI address window.

Binary output 'records': one JSON object per line and transaction (keys
ss, es, command, command_code, address, dac, data_phases, bytes,
termination, kind, master_wait_clocks, target_wait_clocks, devsel, wide,
parity_error, stop, data); the Python output carries the same dict.

PulseView shows at most 64 logic channels: for a 64-bit bus, leave out
AD[63:32], C/BE#[7:4] and PAR64 (or other channels you do not need).
'''

from .pd import Decoder
