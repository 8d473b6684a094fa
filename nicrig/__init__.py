"""nicrig: find out why a network interface card, its I/O bus and its host perform as they do."""

from nicrig._version import __version__

__all__ = ["__version__"]
