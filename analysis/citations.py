"""The published sources the analyses follow, as a reader of the report can find them.

User-facing text (the report, the command line) cites them by these short
names with a section ("Hughes-Jones et al. 2003, §4.2.3"); the report ends
with :data:`REFERENCES`, the full entries.
"""

from __future__ import annotations

HUGHES_JONES = "Hughes-Jones et al. 2003"
PAI = "Pai, Rixner and Kim 2004"
FENG = "Feng et al. 2003"
GEIST = "Geist et al."

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
           "(slides), Clemson University.",
}
