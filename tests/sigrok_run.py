"""Run the real sigrok-cli on a capture with nicrig's decoders, for tests.

Generic on purpose (any decoder in ``decoders/``, stacked or not):

    path = write_session(tmp / "x.sr", ["CLK", "D0"], bits, 1e6)
    spec = decoder_spec("pci", {"frame": "FRAME#", "irdy": "IRDY#"}, {"clock": "state"})
    res = run_sigrok(path, [spec], binary="pci=records")
    res.check()                     # exit code 0, no Python traceback
    res.json_lines()                # the binary output as JSON objects
    run_sigrok(path, [spec], annotations="pci").annotations  # [Annotation(ss, es, instance, text)]

``bits`` is a ``(samples, channels)`` array of 0/1 levels, channel ``k`` in
column ``k``; it is packed as sigrok packs samples and written as a ``.sr``
session with :func:`nicrig.acquisition.srzip.write_sr`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition.capture import pack_bits
from nicrig.acquisition.srzip import write_sr

#: The repository's decoder folder (what ``SIGROKDECODE_DIR`` points at).
DECODERS_DIR = Path(__file__).resolve().parents[1] / "decoders"

_ANN_LINE = re.compile(r"^(?P<ss>\d+)-(?P<es>\d+) (?P<inst>[^:]+): (?P<text>.*)$")


def sigrok_cli_available() -> bool:
    return shutil.which("sigrok-cli") is not None


def write_session(path: str | os.PathLike[str], channels: Sequence[str], bits: Any,
                  samplerate_hz: float = 1e6) -> Path:
    """Write ``(samples, channels)`` 0/1 levels as a sigrok ``.sr`` session file."""
    arr = np.asarray(bits, dtype=np.uint8)
    if arr.ndim != 2 or arr.shape[1] != len(channels):
        raise ValueError(f"bits must be (samples, {len(channels)}), got {arr.shape}")
    path = Path(path)
    write_sr(path, list(channels), samplerate_hz, [pack_bits(arr)])
    return path


def decoder_spec(decoder: str, channels: Mapping[str, str] | None = None,
                 options: Mapping[str, Any] | None = None) -> str:
    """``-P`` argument for one decoder: ``id:chan=NAME:...:option=value``."""
    parts = [decoder]
    for key, value in {**(channels or {}), **(options or {})}.items():
        text = str(value)
        if ":" in text or "," in text or ":" in key:
            raise ValueError(f"sigrok-cli cannot pass {key}={text!r} (':' and ',' separate arguments)")
        parts.append(f"{key}={text}")
    return ":".join(parts)


@dataclass
class Annotation:
    ss: int
    es: int
    instance: str
    text: str


@dataclass
class SigrokResult:
    args: list[str]
    returncode: int
    stdout: bytes
    stderr: str
    annotations: list[Annotation] = field(default_factory=list)

    @property
    def binary(self) -> bytes:
        return self.stdout

    def json_lines(self) -> list[dict[str, Any]]:
        """The binary output read as JSON Lines (one object per line)."""
        return [json.loads(line) for line in self.stdout.decode("utf-8").splitlines() if line.strip()]

    def check(self) -> SigrokResult:
        """Raise unless sigrok-cli exited 0 without complaints.

        sigrok-cli exits 0 even when a decoder raised (``srd: ...`` plus a Python
        traceback on stderr) or a channel map names a missing channel (``cli: No
        channel with name ...``, after which it maps channels by position).
        """
        bad = ("Traceback", "srd: ", "No channel with name")
        if self.returncode != 0 or any(b in self.stderr for b in bad):
            raise AssertionError(
                f"sigrok-cli failed (exit {self.returncode}): {' '.join(self.args)}\n{self.stderr}")
        return self

    def texts(self, contains: str = "") -> list[str]:
        return [a.text for a in self.annotations if contains in a.text]


def run_sigrok(input_path: str | os.PathLike[str], decoders: Sequence[str], *,
               annotations: str | Sequence[str] | None = None, binary: str | None = None,
               decoders_dir: str | os.PathLike[str] = DECODERS_DIR,
               all_texts: bool = False, input_format: str | None = None, timeout: float = 120.0) -> SigrokResult:
    """Run ``sigrok-cli -i input -P dec1,dec2 ...`` with ``SIGROKDECODE_DIR=decoders_dir``.

    ``decoders`` are :func:`decoder_spec` strings, stacked in the order given.
    Give either ``annotations`` (``"pci"`` or ``"pci=warning:data"``; a list
    for several decoders) or ``binary`` (``"pci=records"``), not both: they
    would share stdout. ``all_texts`` shows each annotation as sigrok-cli does at
    log level 4: ``class: "longest text" "shorter" ...`` instead of the longest text.
    ``input_format`` is sigrok-cli's ``-I`` (e.g. ``binary:numchannels=5:samplerate=1000``,
    whose channels are named ``0``, ``1``, ...).
    """
    if annotations is not None and binary is not None:
        raise ValueError("ask for annotations or binary output, not both (run twice)")
    args = ["sigrok-cli", "-i", str(input_path), "-P", ",".join(decoders)]
    if input_format is not None:
        args[1:1] = ["-I", input_format]
    if binary is not None:
        args += ["-B", binary]
    else:
        if annotations is None:
            annotations = [d.split(":", 1)[0] for d in decoders]
        if not isinstance(annotations, str):
            annotations = ",".join(annotations)  # sigrok-cli takes one -A with a comma list
        args += ["-A", annotations]
        args.append("--protocol-decoder-samplenum")
        if all_texts:
            args += ["-l", "4"]
    env = dict(os.environ, SIGROKDECODE_DIR=str(decoders_dir))
    proc = subprocess.run(args, capture_output=True, env=env, timeout=timeout)
    res = SigrokResult(args, proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))
    if binary is None:
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            m = _ANN_LINE.match(line)
            if m:
                res.annotations.append(Annotation(int(m["ss"]), int(m["es"]), m["inst"], m["text"]))
    return res
