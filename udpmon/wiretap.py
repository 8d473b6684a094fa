"""Recording the wire during a udpmon run: an interface's frames through a packet socket, time-stamped.

``nicrig udpmon stream|latency --capture IFACE`` (root: a packet socket needs CAP_NET_RAW)
opens an ``AF_PACKET`` socket on the interface with ``SO_TIMESTAMPING`` (packet(7),
Documentation/networking/timestamping.rst), so every frame, sent or received, arrives with
the kernel's software stamp and, where the NIC stamps received frames itself, its hardware
stamp. A thread reads them in batches (``nicrig.udpmon._engine.capture``, recvmmsg with the GIL
released) into a spool on disk while the run goes on; at the end they become a wire source
(:mod:`nicrig.acquisition.wire`) of the results file:

- frames stamped by the kernel (CLOCK_REALTIME) form interface 0, whose origin is
  CLOCK_REALTIME - CLOCK_MONOTONIC, measured at the start (``_engine.clock_offset``), so
  ``t_ns`` is the engine's own clock;
- frames the NIC stamped form interface 1, on the NIC's clock (PTP hardware clock), whose
  origin is that clock's reading at CLOCK_MONOTONIC 0, measured against the host's clocks by
  bracketed reads of ``/dev/ptpN``;
- outbound frames (packet type PACKET_OUTGOING: the copy the kernel hands packet sockets as it
  gives the frame to the driver) carry ``epb_flags`` outbound, the others inbound; on loopback
  each frame is seen both ways.

Frames the socket could not take (its buffer full) are counted by the kernel
(``PACKET_STATISTICS``) and stored as the interface's ``os_drops``.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.errors import UsageError
from nicrig.readiness import readable

META_DTYPE = np.dtype([("sw_ns", "<i8"), ("hw_ns", "<i8"), ("caplen", "<i4"), ("origlen", "<i4"),
                       ("ifindex", "<i4"), ("pkttype", "u1"), ("pad", "V3")])
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET, PACKET_STATISTICS = 263, 6
SO_RCVBUFFORCE = 33
#: Octets kept of each frame: loopback's 64 KiB MTU and an Ethernet header.
SNAPLEN = 65535 + 14
#: The socket's receive buffer: room for a burst while the reading thread is off the CPU.
RCVBUF_BYTES = 64 << 20
FRAMES_PER_READ = 4096
READ_TIMEOUT_NS = 50_000_000
#: SIOCGHWTSTAMP / SIOCSHWTSTAMP and struct hwtstamp_config (include/uapi/linux/net_tstamp.h).
SIOCSHWTSTAMP, SIOCGHWTSTAMP = 0x89B0, 0x89B1
HWTSTAMP_FILTER_ALL = 1


class _HwConfig(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_int), ("tx_type", ctypes.c_int), ("rx_filter", ctypes.c_int)]


def _hwtstamp(sock: socket.socket, interface: str, request: int, config: _HwConfig) -> None:
    """SIOC[GS]HWTSTAMP on ``interface``: struct ifreq with ifr_data pointing at ``config``."""
    ifreq = struct.pack("16sP16x", interface.encode()[:15], ctypes.addressof(config))  # struct ifreq: 40 bytes
    fcntl.ioctl(sock.fileno(), request, ifreq)


def hardware_clock(interface: str) -> int | None:
    """The PTP hardware clock index of ``interface`` whose NIC stamps received frames (``ethtool -T``), or None."""
    try:
        out = subprocess.run(["ethtool", "-T", interface], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"PTP Hardware Clock:\s*(\d+)", out)
    if not m or "hardware-receive" not in out:
        return None
    return int(m[1])


def phc_offset(index: int) -> tuple[int, int]:
    """(PHC - CLOCK_MONOTONIC, its uncertainty), ns: the tightest of 16 reads of ``/dev/ptp<index>`` between two
    of CLOCK_MONOTONIC (a dynamic POSIX clock, clock_gettime(FD_TO_CLOCKID(fd)))."""
    fd = os.open(f"/dev/ptp{index}", os.O_RDONLY)
    try:
        clock = ((~fd) << 3) | 3
        best, offset = None, 0
        for _ in range(16):
            m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            p = time.clock_gettime_ns(clock)
            m2 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            if best is None or m2 - m1 < best:
                best, offset = m2 - m1, p - (m1 + (m2 - m1) // 2)
        return offset, (best or 0) // 2
    finally:
        os.close(fd)


def link_type(interface: str) -> int:
    """The pcap link type of ``interface``'s frames as a packet socket gives them (ARPHRD, /sys/class/net)."""
    try:
        arphrd = int(Path(f"/sys/class/net/{interface}/type").read_text())
    except (OSError, ValueError):
        raise UsageError(f"--capture {interface}: no such interface") from None
    if arphrd in (1, 772):  # ARPHRD_ETHER, ARPHRD_LOOPBACK: Ethernet headers
        return 1
    raise UsageError(f"--capture {interface}: ARPHRD type {arphrd} is not an Ethernet interface")


def link_speed_bps(interface: str) -> int:
    """The interface's speed (bit/s, /sys/class/net/<if>/speed), -1 when it states none."""
    try:
        mbps = int(Path(f"/sys/class/net/{interface}/speed").read_text())
    except (OSError, ValueError):
        return -1
    return mbps * 1_000_000 if mbps > 0 else -1


@dataclass
class Recorded:
    """What a :class:`WireTap` recorded: the spool's frames and how the capture went."""

    interface: str
    spool: Path
    frames: int
    packets: int
    drops: int
    realtime_offset_ns: tuple[int, int]
    realtime_offset_end_ns: tuple[int, int]
    hardware: dict[str, Any] = field(default_factory=dict)
    #: the far engine's CLOCK_MONOTONIC against this host's: ``{"offset_ns", "uncertainty_ns", "host"}`` (add the
    #: offset to the far host's times), set by the run
    far_clock: dict[str, Any] = field(default_factory=dict)

    def meta(self) -> np.ndarray:
        return np.fromfile(self.spool / "meta", dtype=META_DTYPE)

    def write(self, f: Any, name: str) -> None:
        """Store the frames as wire source ``name`` of the open results file (or capture set) ``f``."""
        from nicrig.acquisition import wire
        from nicrig.acquisition.pcap import FLAG_INBOUND, FLAG_OUTBOUND, Batch, Interface

        meta = self.meta()
        hw = meta["hw_ns"] >= 0
        ifaces = [Interface(link_type=link_type(self.interface), snaplen=SNAPLEN, name=self.interface,
                            description="stamped by the kernel (software, CLOCK_REALTIME)", tsresol=9, fcs_bytes=0,
                            speed_bps=link_speed_bps(self.interface), os_drops=self.drops,
                            os=f"{os.uname().sysname} {os.uname().release}")]
        clocks, origins = ["kernel"], [self.realtime_offset_ns[0]]
        if hw.any():
            ifaces.append(Interface(link_type=ifaces[0].link_type, snaplen=SNAPLEN, name=self.interface,
                                    description="stamped by the NIC (its PTP hardware clock)", tsresol=9,
                                    fcs_bytes=0, speed_bps=ifaces[0].speed_bps, os=ifaces[0].os))
            clocks.append("adapter-unsynced")
            origins.append(int(self.hardware.get("phc_offset_ns", 0)))
        writer = wire.WireWriter(f, name)
        starts = np.zeros(len(meta), np.int64)
        np.cumsum(meta["caplen"][:-1].astype(np.int64), out=starts[1:])
        last = 0
        with open(self.spool / "data", "rb") as data:
            for first in range(0, len(meta), 1 << 16):
                m = meta[first:first + (1 << 16)]
                s = starts[first:first + len(m)]
                octets = np.frombuffer(data.read(int(m["caplen"].astype(np.int64).sum())), np.uint8)
                on_hw = m["hw_ns"] >= 0
                stamp = np.where(on_hw, m["hw_ns"], m["sw_ns"])
                batch = Batch(offset=np.full(len(m), -1, np.int64), interface=on_hw.astype(np.int32),
                              stamp=stamp, stamped=stamp >= 0, caplen=m["caplen"], origlen=m["origlen"].astype(np.int64),
                              flags=np.where(m["pkttype"] == PACKET_OUTGOING, FLAG_OUTBOUND, FLAG_INBOUND).astype(np.uint32),
                              starts=s - s[0] if len(s) else s, data=octets)
                times = wire.fill_unstamped(stamp, batch.stamped, last)
                last = int(times[-1]) if len(times) else last
                writer.append(batch, times,
                              np.where(on_hw, wire.clock_code("adapter-unsynced"), wire.clock_code("kernel")))
        writer.finish(ifaces, clocks, origins, wire.WireInfo(
            name=name, origin="kernel stamps: CLOCK_REALTIME - CLOCK_MONOTONIC at the start (t_ns is "
                              "CLOCK_MONOTONIC); NIC stamps: the hardware clock's offset to CLOCK_MONOTONIC",
            format="live", file="", frames=len(meta), capture=self.describe(),
            notes=f"recorded by nicrig on {self.interface} with a packet socket"))

    def describe(self) -> dict[str, Any]:
        return {"interface": self.interface, "frames": self.frames, "packets": self.packets, "drops": self.drops,
                "realtime_offset_ns": self.realtime_offset_ns[0],
                "realtime_offset_uncertainty_ns": self.realtime_offset_ns[1],
                "realtime_offset_end_ns": self.realtime_offset_end_ns[0], "hardware": self.hardware,
                "far_clock": self.far_clock}


class WireTap:
    """Record ``interface`` on a packet socket: ``with WireTap("lo") as tap: ...; recorded = tap.stop()``.

    The spool is a temporary folder removed when the block is left; write the frames
    (:meth:`Recorded.write`) inside it.
    """

    def __init__(self, interface: str, *, hardware: bool = True):
        link_type(interface)
        self.interface = interface
        self.hardware = hardware
        self._sock: socket.socket | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = -1, -1
        self._error: BaseException | None = None
        self._frames = 0
        self._hw_saved: _HwConfig | None = None
        self._hw: dict[str, Any] = {}
        self._packets = self._drops = 0

    def __enter__(self) -> WireTap:
        from nicrig.udpmon import _engine

        try:
            # protocol 0: no frame is queued before the bind below, when every option is set (packet(7))
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise UsageError(f"--capture {self.interface}: a packet socket needs root (CAP_NET_RAW)") from None
        try:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            except OSError:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            hw = self._enable_hardware() if self.hardware else False
            _engine.set_timestamping(self._sock.fileno(), hw)
            self._sock.bind((self.interface, ETH_P_ALL))
            self._read_stats()  # reading them resets the kernel's counters: from here on
            self._tmp = tempfile.TemporaryDirectory(prefix="nicrig-wire-")
            self._offset = _engine.clock_offset()
            self._stop_r, self._stop_w = os.pipe()
            self._thread = threading.Thread(target=self._run, name=f"nicrig-wiretap-{self.interface}", daemon=True)
            self._thread.start()
        except BaseException:
            self._close()
            raise
        return self

    def _enable_hardware(self) -> bool:
        """Ask the NIC to stamp every received frame (SIOCSHWTSTAMP, put back at the end); whether it does."""
        index = hardware_clock(self.interface)
        if index is None:
            self._hw = {"enabled": False, "reason": "the NIC states no hardware receive stamps (ethtool -T)"}
            return False
        assert self._sock is not None
        saved = _HwConfig()
        try:
            _hwtstamp(self._sock, self.interface, SIOCGHWTSTAMP, saved)
            want = _HwConfig(0, saved.tx_type, HWTSTAMP_FILTER_ALL)
            _hwtstamp(self._sock, self.interface, SIOCSHWTSTAMP, want)
        except OSError as exc:
            self._hw = {"enabled": False, "reason": f"SIOCSHWTSTAMP refused: {exc.strerror}"}
            return False
        self._hw_saved = saved
        offset, uncertainty = phc_offset(index)
        self._hw = {"enabled": True, "phc": index, "rx_filter": int(want.rx_filter), "phc_offset_ns": offset,
                    "phc_offset_uncertainty_ns": uncertainty}
        return True

    def _run(self) -> None:
        from nicrig.udpmon import _engine

        assert self._sock is not None and self._tmp is not None
        spool = Path(self._tmp.name)
        try:
            with open(spool / "meta", "wb") as meta, open(spool / "data", "wb") as data:
                stop = self._stop_r
                while True:
                    m, d, n = _engine.capture(self._sock.fileno(), SNAPLEN, FRAMES_PER_READ,
                                              READ_TIMEOUT_NS if stop >= 0 else 0, stop)
                    meta.write(m)
                    data.write(d)
                    self._frames += n
                    if n == 0 and stop < 0:
                        break  # stopped, and the queue is empty
                    if n == 0 and readable(stop):
                        stop = -1  # drain what is queued, without waiting
        except BaseException as exc:  # noqa: BLE001 - handed to stop()
            self._error = exc

    def _read_stats(self) -> None:
        assert self._sock is not None
        packets, drops = struct.unpack("II", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self._packets += packets
        self._drops += drops

    def stop(self) -> Recorded:
        """Stop recording (after reading what is queued); what was recorded."""
        from nicrig.udpmon import _engine

        assert self._thread is not None and self._tmp is not None
        os.write(self._stop_w, b"x")
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise self._error
        self._read_stats()
        end = _engine.clock_offset()
        if self._hw.get("enabled"):
            offset, uncertainty = phc_offset(int(self._hw["phc"]))
            self._hw.update(phc_offset_end_ns=offset, phc_offset_end_uncertainty_ns=uncertainty)
        rec = Recorded(self.interface, Path(self._tmp.name), self._frames, self._packets, self._drops,
                       tuple(self._offset), tuple(end), dict(self._hw))
        self._restore_hardware()
        return rec

    def _restore_hardware(self) -> None:
        if self._hw_saved is not None and self._sock is not None:
            try:
                _hwtstamp(self._sock, self.interface, SIOCSHWTSTAMP, self._hw_saved)
            except OSError:
                pass  # the NIC keeps stamping every frame: harmless, and nothing better to do
            self._hw_saved = None

    def _close(self) -> None:
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join()
            self._thread = None
        self._restore_hardware()
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __exit__(self, *exc: Any) -> None:
        self._close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
