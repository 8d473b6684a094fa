# The two commands a newcomer needs: `make demo` and `make test`.
# Both set up everything on a fresh Debian machine: system packages (when
# missing; needs root), a virtual environment in .venv, and nicrig itself.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
NICRIG   := $(VENV)/bin/nicrig
STAMP    := $(VENV)/.installed
DEMO_OUT ?= demo-out
# Debian packages nicrig drives as real peers: sigrok-cli runs our decoders,
# tshark reads the pcap files they write.
SYSTEM_TOOLS := sigrok-cli:sigrok-cli tshark:tshark

.PHONY: demo test sysdeps venv bench clean

sysdeps:
	@missing=""; \
	for pair in $(SYSTEM_TOOLS); do \
	  cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
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

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(STAMP)

test: sysdeps $(STAMP)
	$(PY) -m pytest -n 2 -q

demo: sysdeps $(STAMP)
	@mkdir -p $(DEMO_OUT)
	$(NICRIG) simulate --scenario latency --nic intel-pro1000 --bus pci64-66 --size 1400 --count 20 -o $(DEMO_OUT)/latency.h5
	$(NICRIG) simulate --scenario stream --nic intel-pro1000 --bus pci64-66 --size 1400 --spacing-us 11 --count 4000 -o $(DEMO_OUT)/stream.h5
	$(NICRIG) info $(DEMO_OUT)/latency.h5
	$(NICRIG) info $(DEMO_OUT)/stream.h5
	@echo "demo: wrote $$(ls $(DEMO_OUT)/*.h5 | tr '\n' ' ')"

bench: $(STAMP)
	$(PY) bench/sim.py

clean:
	rm -rf $(VENV) $(DEMO_OUT) build *.egg-info
