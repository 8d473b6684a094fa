"""The order a run measures in: rounds, each visiting every size (or size and spacing) in a fresh random order.

Measuring each size in one block, smallest first (UDPmon's sweep), lets any
drift of the hosts during the run pass for a dependence on size: a host that
slows down halfway through makes the large sizes look slow. Interleaved
rounds in random order decouple the two, and the spread between rounds
measures what drift and host states do to the result
(:mod:`nicrig.analysis.rounds`). ``ascending`` keeps UDPmon's sweep for
comparison. The order is drawn from a generator seeded once per run (a
swept run draws every step's rounds from it in turn); the seed is recorded
with the run, so the same seed gives the same orders again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

ORDERS = ("random", "ascending")


@dataclass(frozen=True)
class Visit:
    """One item (an index into the run's list of sizes or points) at ``position`` in round ``round``."""

    round: int
    position: int
    item: int


def new_seed() -> int:
    """A fresh seed for a run's order, from the operating system's randomness."""
    return secrets.randbits(32)


def plan(items: int, rounds: int, order: str, rng: np.random.Generator) -> list[Visit]:
    """Every item once per round, round by round: in a fresh permutation per round drawn from ``rng``
    (``random``) or in the items' own order (``ascending``)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)}")
    visits = []
    for r in range(rounds):
        sequence = rng.permutation(items) if order == "random" else np.arange(items)
        visits += [Visit(r, p, int(k)) for p, k in enumerate(sequence)]
    return visits


def split(count: int, rounds: int) -> list[int]:
    """``count`` repetitions shared out over ``rounds`` as evenly as whole numbers allow (the first rounds get the
    remainder)."""
    base, extra = divmod(count, rounds)
    return [base + (r < extra) for r in range(rounds)]
