"""Build script: maps the top-level folders into the one import package ``nicrig``.

The product's layout keeps each responsibility in its own top-level folder
(``acquisition/``, ``decoders/``, ...); ``package_dir`` installs them as
``nicrig.acquisition``, ``nicrig.decoders``, ... so that nothing generic such
as ``gui`` or ``analysis`` lands in site-packages.
"""

from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
FOLDERS = ["acquisition", "decoders", "gui", "udpmon", "analysis", "data"]


def _subpackages(folder: str) -> dict[str, str]:
    """Map every Python package below ``folder`` to ``nicrig.<folder>.<sub>``.

    Sigrok decoder folders (``decoders/pci`` ...) are plain data for the
    package: they import ``sigrokdecode``, which only exists inside
    libsigrokdecode, so they are shipped as package data, not as modules.
    """
    mapping = {f"nicrig.{folder}": folder}
    for init in sorted((HERE / folder).rglob("__init__.py")):
        rel = init.parent.relative_to(HERE)
        if rel.parts[0] == "decoders" and len(rel.parts) > 1:
            continue
        mapping["nicrig." + ".".join(rel.parts)] = str(rel)
    return mapping


package_dir = {"nicrig": "nicrig"}
for f in FOLDERS:
    package_dir.update(_subpackages(f))

version = {}
exec((HERE / "nicrig" / "_version.py").read_text(), version)

setup(
    name="nicrig",
    version=version["__version__"],
    description="Hardware-in-the-loop PCI/link analysis rig: udpmon traffic, "
    "logic-analyzer capture sets, sigrok decoders, reports and GUI",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="GPL-3.0-or-later",
    python_requires=">=3.11",
    packages=sorted(package_dir),
    package_dir=package_dir,
    package_data={
        "nicrig.data": ["profiles/*/*.toml", "*.json", "probemaps/*.toml", "rigs/*.toml"],
        "nicrig.analysis": ["templates/*.j2", "templates/sections/*.j2"],
        "nicrig.decoders": ["*/*.py"],
    },
    install_requires=[
        "numpy>=1.24",
        "h5py>=3.8",
        "imagecodecs>=2024.1.1",  # HDF5's own Fletcher32 (h5checksum), for chunks nicrig encodes itself
        "isal>=1.0",  # ISA-L's deflate for those chunks: zlib streams HDF5 inflates, ~5x faster than zlib level 1
        "scapy>=2.5",
        "rich>=13",
        "simpy>=4,<5",  # the model queues calls and events as SimPy 4 does inside (acquisition/sim/scheduler.py)
        "pyvcd>=0.5",
        "scipy>=1.10",
        "dask[distributed]>=2023.1",
        "pyvisa>=1.13",
        "pyvisa-py>=0.7",
        "PySide6-Essentials>=6.5,!=6.12.0",  # 6.12.0 loses a reference to None per painter call (Python 3.11 aborts)
        "pyqtgraph>=0.13.3",
        "matplotlib>=3.6",
        "jinja2>=3.1",
        "perfetto>=0.59",  # the Perfetto trace format's message classes (nicrig trace export)
    ],
    extras_require={
        "dev": ["pytest>=7", "hypothesis>=6", "pytest-xdist>=3", "pytest-qt>=4.2", "pillow>=9"],
    },
    entry_points={"console_scripts": ["nicrig=nicrig.cli:program"]},
    ext_modules=[
        Extension(
            "nicrig.udpmon._engine",
            ["udpmon/_engine.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # A payload's random fill, as NumPy's integers draws it (udpmon/payload.py UniformBytes).
        Extension(
            "nicrig.udpmon._uniform",
            ["udpmon/_uniform.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # HDF5's shuffle filter for the chunks nicrig encodes itself (nicrig/h5file.py encode_chunk).
        Extension(
            "nicrig._h5shuffle",
            ["nicrig/_h5shuffle.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # The overview pyramid's AND and OR of groups of sample rows (gui/overview.py folds).
        Extension(
            "nicrig.gui._fold",
            ["gui/_fold.c"],
            # -O3: the loops over a row's words vectorise (twice the speed of -O2's on 2- and 3-byte rows)
            extra_compile_args=["-O3", "-Wall"],
        ),
        # The timeline's logic lanes' lines and fills from their runs (gui/timeline.py Batch).
        Extension(
            "nicrig.gui._levels",
            ["gui/_levels.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # The rig model's bus clock arithmetic (acquisition/sim/model.py BusRecord) and event loop (scheduler.py).
        Extension(
            "nicrig.acquisition.sim._clock",
            ["acquisition/sim/_clock.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # The PCI bus renderer's walk over transactions and its painting of control lines (acquisition/sim/pci_bus.py).
        # The GMII probe's samples packed in one pass (acquisition/sim/gmii.py).
        Extension(
            "nicrig.acquisition.sim._gmii_pack",
            ["acquisition/sim/_gmii_pack.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        Extension(
            "nicrig.acquisition.sim._pci_render",
            ["acquisition/sim/_pci_render.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        Extension(
            "nicrig.acquisition.sim._scheduler",
            ["acquisition/sim/_scheduler.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # The simulated rig's frames: a UDP datagram with its checksum, an IPv4 packet's frame with its FCS
        # (acquisition/sim/ethernet.py udp_frames).
        Extension(
            "nicrig.acquisition.sim._inet",
            ["acquisition/sim/_inet.c"],
            libraries=["z"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # The rig model's bus traffic: DMA bursts, register accesses (acquisition/sim/model.py Host.dma, _csr_transaction).
        Extension(
            "nicrig.acquisition.sim._bus",
            ["acquisition/sim/_bus.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        Extension(
            "nicrig.decoders._wait",
            ["decoders/_wait.c"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        Extension(
            "nicrig.decoders._pci_kernel",
            ["decoders/_pci_kernel.c"],
            depends=["decoders/_table_rows.h"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        Extension(
            "nicrig.decoders._gmii_kernel",
            ["decoders/_gmii_kernel.c"],
            depends=["decoders/_table_rows.h"],
            extra_compile_args=["-O2", "-Wall"],
        ),
        # The host probe reads the kernel's trace ring buffer with libtraceevent (Debian libtraceevent-dev).
        Extension(
            "nicrig.acquisition.hostprobe._traceevent",
            ["acquisition/hostprobe/_traceevent.c"],
            include_dirs=["/usr/include/traceevent"],
            libraries=["traceevent"],
            extra_compile_args=["-O2", "-Wall"],
        ),
    ],
)
