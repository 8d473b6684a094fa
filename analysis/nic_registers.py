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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RegisterMap:
    """One controller's memory BAR size (bytes) and the offsets of its transmit and receive tail registers."""

    controller: str
    bar_bytes: int
    transmit_tail: frozenset[int]
    receive_tail: frozenset[int]

    def offsets(self, addresses: np.ndarray) -> np.ndarray:
        """Register offsets (bytes into the BAR) of bus addresses in the BAR (PCI 3.0 §6.2.5.1: naturally aligned)."""
        return np.asarray(addresses, dtype=np.uint64) % np.uint64(self.bar_bytes)


#: Intel 82544 (PRO/1000 XT and T server adapters), 128 KB memory BAR: TDT and RDT.
INTEL_82544 = RegisterMap("Intel 82544", 0x20000, transmit_tail=frozenset({0x3818}),
                          receive_tail=frozenset({0x2818}))
#: SysKonnect SK-98xx (GEnesis), 16 KB memory BAR: Q_CSR of Q_XS1 and Q_XA1, and of Q_R1.
SYSKONNECT_GENESIS = RegisterMap("SysKonnect GEnesis", 0x4000, transmit_tail=frozenset({0x0634, 0x06B4}),
                                 receive_tail=frozenset({0x0434}))
#: Alteon Tigon (AceNIC), 16 KB memory BAR: TxPrd, and RxStdPrd, RxJumboPrd, RxMiniPrd.
ALTEON_TIGON = RegisterMap("Alteon Tigon", 0x4000, transmit_tail=frozenset({0x0514}),
                           receive_tail=frozenset({0x051C, 0x0524, 0x052C}))

#: By PCI vendor:device ID (lower-case hex, as a capture set records a source's ``device``).
BY_DEVICE: dict[str, RegisterMap] = {
    "8086:1008": INTEL_82544, "8086:1009": INTEL_82544, "8086:100c": INTEL_82544, "8086:100d": INTEL_82544,
    "1148:4300": SYSKONNECT_GENESIS, "12ae:0001": ALTEON_TIGON,
}


def for_device(device: str | None) -> RegisterMap | None:
    """The register map of a PCI ``vendor:device`` (e.g. ``"8086:1008"``); None when nicrig has none for it."""
    return BY_DEVICE.get(device.strip().lower()) if device else None
