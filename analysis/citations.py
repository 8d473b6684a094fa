"""The published sources the analyses follow, as a reader of the report can find them.

User-facing text (the report, the command line) cites them by these short
names, author and year, with a section ("Hughes-Jones et al. 2003, §4.2.3");
a source without a date says so ("n.d.", as Geist et al.'s slides carry
none). The report ends with the full entries of the sources its text cites
(:func:`cited`), and only those.
"""

from __future__ import annotations

from collections.abc import Iterable

HUGHES_JONES = "Hughes-Jones et al. 2003"
PAI = "Pai, Rixner and Kim 2004"
FENG = "Feng et al. 2003"
GEIST = "Geist et al. n.d."

#: Short name -> full reference.
REFERENCES = {
    HUGHES_JONES: "R. Hughes-Jones, S. Dallison, G. Fairey, P. Clarke, I. Bridge, \"Performance Measurements on "
                  "Gigabit Ethernet NICs and Server Quality Motherboards\", 2003.",
    PAI: "V. S. Pai, S. Rixner, H. Kim, \"Isolating the Performance Impacts of Network Interface Cards through "
         "Microbenchmarks\", Rice University Technical Report EE0401, 2004 (SIGMETRICS 2004).",
    FENG: "W. Feng, J. Hurwitz, H. Newman, S. Ravot, R. L. Cottrell, O. Martin, F. Coccetti, C. Jin, X. Wei, S. Low, "
          "\"Optimizing 10-Gigabit Ethernet for Networks of Workstations, Clusters, and Grids: A Case Study\", "
          "Proceedings of the ACM/IEEE Conference on Supercomputing (SC2003), 2003.",
    GEIST: "R. Geist, J. Martin, J. Westall, V. Yalla, \"Performance Tuning of Gigabit Network Interfaces\" "
           "(slides), Clemson University, n.d. (the slides carry no date).",
}


def cited(texts: Iterable[str]) -> list[str]:
    """The short names of :data:`REFERENCES` that ``texts`` cite, in the order of :data:`REFERENCES`."""
    joined = "\n".join(texts)
    return [name for name in REFERENCES if name in joined]
