"""The NIC registers that tell a driver's code paths apart on the bus, from the controllers' manuals.

With AD probed, a register access's address less its BAR's base is the
register's offset; a memory BAR is naturally aligned to its size (PCI 3.0
§6.2.5.1), so the offset is the address modulo the BAR's size, whatever base
the host's firmware gave it. The bus analysis (``analysis.bus``) needs two
registers' meanings per controller:

- the **transmit tail** (producer index): the driver has put frames in the
  transmit ring, and the NIC answers by fetching their descriptors: the end of
  a send's setup, its doorbell;
- the **receive tail** (producer index): the driver hands receive descriptors
  back to the NIC, the ring's refill, once the stack has taken their frames.

Offsets and names are the manuals': Intel's 8254x Family of Gigabit Ethernet
Controllers Software Developer's Manual (register summary: RDT at 0x02818, TDT
at 0x03818; §3.2.6 and §3.3: software writes RDT to return receive descriptors
and TDT to queue frames); SysKonnect's GEnesis register set (each BMU queue's
control/status register Q_CSR at +0x34 of the queue, the queues from 0x0400:
receive queue 1 at +0x000, synchronous and asynchronous transmit queues 1 at
+0x200 and +0x280; the driver starts a queue, CSR_START, after filling its
descriptors); Alteon's Tigon host registers (the producer mailboxes TxPrd at
0x514 and RxStdPrd, RxJumboPrd, RxMiniPrd at 0x51C, 0x524, 0x52C).

Each map also names the other registers the Linux 2.4 drivers touch on their
send and interrupt paths, so that every access of a capture can be named:
Intel (SDM register summary) STATUS, ICR, IMS, IMC and the ring heads;
SysKonnect (sk98lin ``skgehw.h``, Bank 0) the interrupt source and mask
registers B0_ISRC 0x0008, B0_IMSK 0x000C and B0_SP_ISRC 0x0018, whose read
also masks the NIC's interrupts (sk98lin ``SkGeIsrOnePort`` reads it first and
unmasks through B0_IMSK last); Alteon (``struct ace_regs`` in ``acenic.h``)
HostCtrl 0x040, the interrupt mailbox Mb0Lo 0x504 (``ace_interrupt`` writes 1
to hold interrupts off during its service and 0 after it), the event consumer
EvtCsm 0x628 and the receive return consumer RxRetCsm 0x680.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RegisterMap:
    """One controller's memory BAR size (bytes), the offsets of its transmit and receive tail registers and
    the manual's name of each register the drivers' send and interrupt paths touch (by offset)."""

    controller: str
    bar_bytes: int
    transmit_tail: frozenset[int]
    receive_tail: frozenset[int]
    names: dict[int, str] = field(default_factory=dict, compare=False, hash=False)

    def offsets(self, addresses: np.ndarray) -> np.ndarray:
        """Register offsets (bytes into the BAR) of bus addresses in the BAR (PCI 3.0 §6.2.5.1: naturally aligned)."""
        return np.asarray(addresses, dtype=np.uint64) % np.uint64(self.bar_bytes)

    def name(self, offset: int) -> str | None:
        """The manual's name of the register at ``offset`` (bytes into the BAR); None when the map has none."""
        return self.names.get(int(offset))


#: Intel 82544 (PRO/1000 XT and T server adapters), 128 KB memory BAR: TDT and RDT.
INTEL_82544 = RegisterMap(
    "Intel 82544", 0x20000, transmit_tail=frozenset({0x3818}), receive_tail=frozenset({0x2818}),
    names={0x0000: "CTRL", 0x0008: "STATUS", 0x00C0: "ICR", 0x00C8: "ICS", 0x00D0: "IMS", 0x00D8: "IMC",
           0x2810: "RDH", 0x2818: "RDT", 0x3810: "TDH", 0x3818: "TDT"})
#: SysKonnect SK-98xx (GEnesis), 16 KB memory BAR: Q_CSR of Q_XS1 and Q_XA1, and of Q_R1.
SYSKONNECT_GENESIS = RegisterMap(
    "SysKonnect GEnesis", 0x4000, transmit_tail=frozenset({0x0634, 0x06B4}), receive_tail=frozenset({0x0434}),
    names={0x0004: "B0_CTST", 0x0008: "B0_ISRC", 0x000C: "B0_IMSK", 0x0010: "B0_HWE_ISRC",
           0x0014: "B0_HWE_IMSK", 0x0018: "B0_SP_ISRC", 0x0434: "Q_R1 Q_CSR", 0x04B4: "Q_R2 Q_CSR",
           0x0634: "Q_XS1 Q_CSR", 0x06B4: "Q_XA1 Q_CSR", 0x0734: "Q_XS2 Q_CSR", 0x07B4: "Q_XA2 Q_CSR"})
#: Alteon Tigon (AceNIC), 16 KB memory BAR: TxPrd, and RxStdPrd, RxJumboPrd, RxMiniPrd.
ALTEON_TIGON = RegisterMap(
    "Alteon Tigon", 0x4000, transmit_tail=frozenset({0x0514}), receive_tail=frozenset({0x051C, 0x0524, 0x052C}),
    names={0x0040: "HostCtrl", 0x0504: "Mb0Lo", 0x050C: "CmdPrd", 0x0514: "TxPrd", 0x051C: "RxStdPrd",
           0x0524: "RxJumboPrd", 0x052C: "RxMiniPrd", 0x0628: "EvtCsm", 0x062C: "CmdCsm", 0x0680: "RxRetCsm"})

#: By PCI vendor:device ID (lower-case hex, as a capture set records a source's ``device``).
BY_DEVICE: dict[str, RegisterMap] = {
    "8086:1008": INTEL_82544, "8086:1009": INTEL_82544, "8086:100c": INTEL_82544, "8086:100d": INTEL_82544,
    "1148:4300": SYSKONNECT_GENESIS, "12ae:0001": ALTEON_TIGON,
}


def for_device(device: str | None) -> RegisterMap | None:
    """The register map of a PCI ``vendor:device`` (e.g. ``"8086:1008"``); None when nicrig has none for it."""
    return BY_DEVICE.get(device.strip().lower()) if device else None
