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
One interrupt request line (a PCI INTx# pin, an MSI-less NIC's IRQ, a GPIO):
each assertion is shown with how long it lasted, each deasserted stretch
between two assertions with its length. Durations come from the capture's
sample rate (timing captures).

Binary output 'records': JSON Lines, one object per assertion that both
starts and ends inside the capture.
'''

from .pd import Decoder
