"""The simulated SCPI instrument: the rig's wires, one vendor's dialect, a real TCP server, fault injection."""
