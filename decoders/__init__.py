"""Custom sigrok protocol decoders, one folder each.

The folders below are real libsigrokdecode protocol decoders (API version 3):
point ``SIGROKDECODE_DIR`` at this folder, or run ``nicrig decoders install``,
and sigrok-cli and PulseView load them. They are not importable Python
modules outside libsigrokdecode.
"""

from pathlib import Path

DECODERS_DIR = Path(__file__).resolve().parent
