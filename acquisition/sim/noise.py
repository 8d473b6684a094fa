"""A simulated host's noise: how much a message's interrupt entry, wake-up and software vary from one to the next.

A real host never takes a message the same time twice: the interrupt finds
the CPU in its idle loop or busy, the scheduler wakes the receiving
application sooner or later, the stack's code and data are in the cache or
not. Hughes-Jones et al. (2003, §3.1) describe the round trips these add up
to by a full width at half maximum of ~2 us with very few events in the tail
(fig. 6.4), 1.5 us on the SuperMicro P4DP6 with no significant tail (§6.2).

Each kind of variation is a zero-mean gamma variate of shape :data:`SHAPE`
(a delay comes late more often than early, never unboundedly early) with
the host profile's standard deviation; a wake-up now and then comes an
exponential delay later (``tail_probability``, ``tail_us``): something else
ran first. The draws come from their own generator seeded from the run's
seed and the host, so a run is reproducible from ``--seed`` and the payloads'
random bytes do not change with the host's noise. Draws are made a block at
a time (the model asks several times a message).
"""

from __future__ import annotations

import numpy as np

from nicrig.acquisition.sim.profiles import HostProfile

#: Shape of the gamma variates: skewness 2 / sqrt(SHAPE) = 1, a tail to the late side.
SHAPE = 4.0
#: Draws made at a time per kind.
BLOCK = 2048
PS_PER_US = 1_000_000
#: Spawn key of the noise generators under the run's random seed (the payloads' generator is that seed's own).
STREAM = 0x6E6F


class HostNoise:
    """The variations of one host, in integer picoseconds: :meth:`irq`, :meth:`wakeup` and :meth:`cache` each give
    the next draw of their kind (0 for a host without that noise)."""

    def __init__(self, host: HostProfile, seed: int, index: int):
        self.rng = np.random.default_rng([STREAM, seed & 0xFFFF_FFFF_FFFF_FFFF, index])
        self.sigma = {"irq": host.irq_jitter_us, "wakeup": host.wakeup_jitter_us, "cache": host.cache_jitter_us}
        self.tail = (host.tail_probability, host.tail_us)
        self.blocks: dict[str, list[int]] = {kind: [] for kind in self.sigma}
        self.irq = self._drawer("irq")
        self.wakeup = self._drawer("wakeup")
        self.cache = self._drawer("cache")

    def _drawer(self, kind: str):
        sigma = self.sigma[kind]
        tail_p, tail_us = self.tail if kind == "wakeup" else (0.0, 0.0)
        if not sigma and not (tail_p and tail_us):
            return _none
        block = self.blocks[kind]

        def draw() -> int:
            if not block:
                block.extend(self._block(sigma, tail_p, tail_us))
            return block.pop()
        return draw

    def _block(self, sigma_us: float, tail_p: float, tail_us: float) -> list[int]:
        """:data:`BLOCK` draws (ps), in the order they are taken."""
        us = np.zeros(BLOCK)
        if sigma_us:
            scale = sigma_us / np.sqrt(SHAPE)
            us += self.rng.gamma(SHAPE, scale, BLOCK) - SHAPE * scale
        if tail_p and tail_us:
            us += np.where(self.rng.random(BLOCK) < tail_p, self.rng.exponential(tail_us, BLOCK), 0.0)
        return np.rint(us[::-1] * PS_PER_US).astype(np.int64).tolist()


def _none() -> int:
    return 0
