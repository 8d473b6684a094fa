"""Instruments: PyVISA SCPI drivers (Keysight, Rigol, Tektronix), sigrok devices, and a simulated SCPI instrument."""
