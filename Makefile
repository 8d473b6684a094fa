# The two commands a newcomer needs: `make demo` and `make test`.
# Both set up everything on a fresh Debian machine: system packages (when
# missing; needs root), a virtual environment in .venv, and nicrig itself.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
NICRIG   := $(VENV)/bin/nicrig
STAMP    := $(VENV)/.installed
DEMO_OUT ?= demo-out
# Debian packages nicrig drives as real peers (command:package): sigrok-cli
# runs our decoders, tshark reads the pcap and pcapng files nicrig writes, tcpdump, dumpcap and editcap
# write the captures the tests import, GTKWave's vcd2fst
# reads our VCD exports, Icarus Verilog runs the independent HDL bus models;
# udpmon reads NIC counters with ethtool and lspci and builds test hosts with ip;
# its benchmark runs sockperf and iperf3 beside it; protoc (decode_raw) reads the Perfetto traces
# nicrig trace export writes, in a test, with a protobuf parser of its own; PulseView opens our
# exports under Xvfb; h5dump and h5ls (HDF5's own tools) read the chunks nicrig encodes itself, in a test.
# GNU time reports each decode's peak memory in bench/decode.py.
SYSTEM_TOOLS := sigrok-cli:sigrok-cli tshark:tshark vcd2fst:gtkwave iverilog:iverilog \
                ethtool:ethtool lspci:pciutils ip:iproute2 sockperf:sockperf iperf3:iperf3 \
                protoc:protobuf-compiler pulseview:pulseview Xvfb:xvfb h5dump:hdf5-tools \
                /usr/bin/time:time tcpdump:tcpdump dumpcap:wireshark-common editcap:wireshark-common
# Debian libraries (checked with dpkg-query): libtraceevent and zlib, which the host probe's and the
# simulated rig's frames' C extensions are built against, and the ones PySide6's wheels load: the GUI
# offscreen (EGL, GL, fontconfig, xkbcommon, D-Bus, GLib) and, on a desktop, its X11 (xcb) platform plugin.
SYSTEM_LIBS  := libtraceevent-dev zlib1g-dev libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0 \
                libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 \
                libxcb-randr0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 libx11-xcb1

.PHONY: demo test sysdeps venv bench clean

sysdeps:
	@missing=""; \
	for pair in $(SYSTEM_TOOLS); do \
	  cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	for pkg in $(SYSTEM_LIBS); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "nicrig: installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "nicrig: missing Debian packages:$$missing"; \
	    echo "nicrig: run 'sudo apt-get install$$missing' (or run make as root), then try again"; \
	    exit 1; \
	  fi; \
	fi

# The C extensions are built in place by the editable install: a changed C source (a pull, a rebase)
# reinstalls, or the tests would run the old compiled code.
EXT_SOURCES := $(wildcard nicrig/*.c udpmon/*.c decoders/*.c decoders/*.h acquisition/hostprobe/*.c acquisition/sim/*.c)

$(STAMP): setup.py pyproject.toml $(EXT_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# AMD's ChipScoPy writes the ILA CSV that Vivado writes (ILAWaveform.export_waveform): a test imports its
	# files. Kept in a folder of its own (its pinned rich<14 stays out of nicrig's environment).
	$(PY) -m pip install -q --target $(VENV)/chipscopy 'chipscopy==2026.1.0.45'
	# Byte-compiled as pip compiles a regular install: an editable one is compiled on import, and not kept
	# where PYTHONDONTWRITEBYTECODE is set (~0.1 s at every command's start).
	$(PY) -m compileall -q -j 0 nicrig acquisition decoders gui udpmon analysis >/dev/null
	touch $@

venv: $(STAMP)

test: sysdeps $(STAMP)
	# One worker per module: a module's fixtures (namespace hosts, simulations) are made once, not in both.
	$(PY) -m pytest -n 2 --dist loadscope -q

demo: sysdeps $(STAMP)
	@mkdir -p $(DEMO_OUT)
	# Request-response, SysKonnect SK-9843 on 32-bit 33 MHz PCI, AD/C/BE# recorded, 3000-byte responses (3 frames).
	$(NICRIG) simulate --scenario latency --nic sk9843 --bus pci32-33 --with-ad --size 3000 --count 10 --force -o $(DEMO_OUT)/latency.h5
	# 1400-byte stream every 11 us, Intel PRO/1000s, the sender's on 64-bit 66 MHz PCI, the receiver's on 32-bit 33 MHz:
	# the receiving DMA is slower than the wire, the receive FIFO fills, and the receiver sends PAUSE frames.
	$(NICRIG) simulate --scenario stream --nic intel-pro1000 --bus pci64-66 --recv-bus pci32-33 --size 1400 --spacing-us 11 --count 2000 --rounds 1 --force -o $(DEMO_OUT)/stream.h5
	$(NICRIG) decode $(DEMO_OUT)/latency.h5 $(DEMO_OUT)/stream.h5
	@echo "--- the first PCI transactions of the request on the sending bus:"
	$(NICRIG) events $(DEMO_OUT)/latency.h5 --source send_pci --decoder pci --limit 12
	@echo "--- PAUSE frames from the receiver (802.3x flow control):"
	$(NICRIG) events $(DEMO_OUT)/stream.h5 --source probe --decoder ethernet --where direction=rx --limit 6
	$(NICRIG) export $(DEMO_OUT)/latency.h5 --source send_pci -o $(DEMO_OUT)/latency-send_pci.sr --pulseview
	@echo "--- the probe's frames for Wireshark (nanosecond stamps: a frame's time less the set's creation second is its t_ns):"
	$(NICRIG) export $(DEMO_OUT)/stream.h5 --source probe -o $(DEMO_OUT)/stream-probe.pcapng
	$(NICRIG) info $(DEMO_OUT)/stream.h5
	@echo "--- udpmon between two local endpoints: a daemon on loopback, then latency and stream runs:"
	@set -e; \
	port=$$($(PY) -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	trace=""; if [ "$$(id -u)" = 0 ]; then trace="--allow-trace"; fi; \
	$(NICRIG) udpmon serve --port $$port $$trace 2> $(DEMO_OUT)/udpmon-serve.log & daemon=$$!; \
	trap 'kill $$daemon 2>/dev/null; wait $$daemon 2>/dev/null || true' EXIT; \
	for i in $$(seq 50); do $(PY) -c "import socket; socket.create_connection(('127.0.0.1', $$port), 1)" 2>/dev/null && break; sleep 0.1; done; \
	echo "$(NICRIG) udpmon latency 127.0.0.1 --port $$port --sizes 64:3000:256 --count 500 --force -o $(DEMO_OUT)/udpmon-latency.h5"; \
	$(NICRIG) udpmon latency 127.0.0.1 --port $$port --sizes 64:3000:256 --count 500 --force -o $(DEMO_OUT)/udpmon-latency.h5; \
	echo "$(NICRIG) udpmon stream 127.0.0.1 --port $$port --sizes 64,1472 --spacing-us 0,10,20,40 --count 5000 --force -o $(DEMO_OUT)/udpmon-stream.h5"; \
	$(NICRIG) udpmon stream 127.0.0.1 --port $$port --sizes 64,1472 --spacing-us 0,10,20,40 --count 5000 --force -o $(DEMO_OUT)/udpmon-stream.h5; \
	if [ -n "$$trace" ]; then \
	  echo "--- the host probe: the same stream with both ends' kernel events recorded (interrupts, softirqs, NAPI polls, system calls):"; \
	  echo "$(NICRIG) udpmon stream 127.0.0.1 --port $$port --sizes 1472 --spacing-us 0,20,40 --count 1000 --rounds 1 --trace-host --force -o $(DEMO_OUT)/udpmon-traced.h5"; \
	  $(NICRIG) udpmon stream 127.0.0.1 --port $$port --sizes 1472 --spacing-us 0,20,40 --count 1000 --rounds 1 --trace-host --force -o $(DEMO_OUT)/udpmon-traced.h5; \
	  $(NICRIG) trace show $(DEMO_OUT)/udpmon-traced.h5; \
	  $(NICRIG) trace export $(DEMO_OUT)/udpmon-traced.h5 -o $(DEMO_OUT)/udpmon-traced.perfetto-trace; \
	  echo "--- the wire: the loopback run again, every frame recorded (a packet socket, kernel time stamps) and each datagram paired with its frame:"; \
	  echo "$(NICRIG) udpmon stream 127.0.0.1 --port $$port --sizes 64,1472 --spacing-us 0,20 --count 2000 --rounds 1 --capture lo --force -o $(DEMO_OUT)/udpmon-wire.h5"; \
	  $(NICRIG) udpmon stream 127.0.0.1 --port $$port --sizes 64,1472 --spacing-us 0,20 --count 2000 --rounds 1 --capture lo --force -o $(DEMO_OUT)/udpmon-wire.h5; \
	  $(NICRIG) export $(DEMO_OUT)/udpmon-wire.h5 --source lo -o $(DEMO_OUT)/udpmon-wire.pcapng; \
	else echo "--- the host probe and the wire capture need root: run make demo as root to see a traced run and its frames"; fi
	@echo "demo: wrote $$(ls $(DEMO_OUT) | tr '\n' ' ')in $(DEMO_OUT)/ (after 'nicrig decoders install', 'pulseview $(DEMO_OUT)/latency-send_pci.sr' opens it decoded)"
	@echo "--- the GUI: a 64-byte request and its 1400-byte response, Intel PRO/1000 on 64-bit 66 MHz PCI (Hughes-Jones et al. 2003, fig. 4.7):"
	$(NICRIG) simulate --scenario latency --nic intel-pro1000 --bus pci64-66 --size 1400 --request-size 64 --count 3 --force -o $(DEMO_OUT)/fig47.h5
	$(NICRIG) decode $(DEMO_OUT)/fig47.h5
	@set -e; if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then \
	  echo "$(NICRIG) gui $(DEMO_OUT)/fig47.h5 $(DEMO_OUT)/udpmon-latency.h5 $(DEMO_OUT)/udpmon-stream.h5 --range=-3:135 --measure"; \
	  $(NICRIG) gui $(DEMO_OUT)/fig47.h5 $(DEMO_OUT)/udpmon-latency.h5 $(DEMO_OUT)/udpmon-stream.h5 --range=-3:135 --measure; \
	else \
	  echo "no display: writing the GUI's views as pictures"; \
	  $(NICRIG) gui $(DEMO_OUT)/fig47.h5 --screenshot $(DEMO_OUT)/gui-fig47.png --view timeline --range=-3:135 --measure; \
	  $(NICRIG) gui $(DEMO_OUT)/fig47.h5 --screenshot $(DEMO_OUT)/gui-window.png --range=-3:135 --measure --size 1920x1080; \
	  $(NICRIG) gui $(DEMO_OUT)/stream.h5 --screenshot $(DEMO_OUT)/gui-pause.png --view timeline --range=1000:2300; \
	  $(NICRIG) gui $(DEMO_OUT)/udpmon-latency.h5 --screenshot $(DEMO_OUT)/gui-latency.png --view latency --size 1200x800; \
	  $(NICRIG) gui $(DEMO_OUT)/udpmon-latency.h5 --screenshot $(DEMO_OUT)/gui-histograms.png --view histograms --size 1200x800; \
	  $(NICRIG) gui $(DEMO_OUT)/udpmon-stream.h5 --screenshot $(DEMO_OUT)/gui-stream.png --view stream --size 1000x900; \
	  if [ -f $(DEMO_OUT)/udpmon-traced.h5 ]; then \
	    $(NICRIG) gui $(DEMO_OUT)/udpmon-traced.h5 --screenshot $(DEMO_OUT)/gui-hostprobe.png --view timeline --size 1400x1000; \
	  fi; \
	  if [ -f $(DEMO_OUT)/udpmon-wire.h5 ]; then \
	    $(NICRIG) gui $(DEMO_OUT)/udpmon-wire.h5 --screenshot $(DEMO_OUT)/gui-wire.png --view timeline --size 1400x700; \
	  fi; \
	fi
	@echo "--- the report: latency slope and intercept, throughput against spacing, bus timelines, expected against observed:"
	$(NICRIG) report $(DEMO_OUT)/udpmon-latency.h5 $(DEMO_OUT)/udpmon-stream.h5 $$(ls $(DEMO_OUT)/udpmon-traced.h5 $(DEMO_OUT)/udpmon-wire.h5 2>/dev/null) $(DEMO_OUT)/fig47.h5 $(DEMO_OUT)/latency.h5 $(DEMO_OUT)/stream.h5 -o $(DEMO_OUT)/report.html
	@echo "--- the report checked against itself: digits no finer than their uncertainty, uncertainties no finer than the time stamps resolve, every sentence's numbers in the tables it quotes, no empty figure, terms defined, sources cited:"
	$(PY) -m nicrig.analysis.lint $(DEMO_OUT)/report.html

bench: sysdeps $(STAMP)
	$(PY) bench/sim.py
	$(PY) bench/udpmon.py
	$(PY) bench/udpmon_tcp.py
	$(PY) bench/hostprobe.py
	$(PY) bench/decode.py --sigrok-samples 2e6
	$(PY) bench/gui.py
	$(PY) bench/hostile.py

clean:
	rm -rf $(VENV) $(DEMO_OUT) build *.egg-info
