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
A one-wire frame-presence probe on an Ethernet link (in the manner of the
Manchester Gigabit Ethernet probe card): the line is high while a frame is
on the fibre. For each frame the decoder shows how long the line was high,
the frame size this means at the link rate (duration x rate / 8, less the 8
preamble/SFD octets when the probe's pulse includes them) and the gap to the
previous frame.

Binary output 'records': JSON Lines, one object per frame that both starts
and ends inside the capture.
'''

from .pd import Decoder
