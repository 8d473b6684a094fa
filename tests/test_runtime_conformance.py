"""The builtin engine against the real libsigrokdecode: the same annotations, the same tables.

Two kinds of evidence:
- ``waitprobe`` (tests/decoders/waitprobe), a decoder that runs a scripted
  sequence of ``wait()`` calls and annotates what each returned, pins the
  semantics of ``wait()`` itself: hand-picked scripts for each rule, then
  random scripts on random data (hypothesis);
- every nicrig decoder on simulated captures (PCI in state and timing mode,
  GMII + Ethernet with PAUSE frames, interrupts, link activity) and on random
  bits: every annotation (start, end, instance, class, every text) in the
  order put, compared line for line with sigrok-cli's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from conftest import simulate_set
from hypothesis import strategies as st
from nicrig.acquisition.capture import CaptureSet
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.rig import Recording
from nicrig.decoders import DECODERS_DIR, builtin, runtime, samplerate_for, spec
from nicrig.decoders.sigrok_cli import _command

from sigrok_run import run_sigrok, sigrok_cli_available

pytestmark = pytest.mark.skipif(not sigrok_cli_available(), reason="needs sigrok-cli (make test installs it)")

PROBE_DIR = Path(__file__).resolve().parent / "decoders"
PROBE_CHANNELS = ["c0", "c1", "c2", "c3", "c4"]


def _line(cls_names: dict[str, list[str]], inst: str, ss: int, es: int, cls: int, texts: list[str]) -> str:
    """An annotation as sigrok-cli prints it at log level 4 with sample numbers."""
    name = cls_names[inst.rsplit("-", 1)[0]][cls]
    return f"{ss}-{es} {inst}: {name}: " + " ".join(f'"{t}"' for t in texts)


def _class_names(decoder_ids: list[str], decoders_dir: Path) -> dict[str, list[str]]:
    return {d: [a[0] for a in runtime.load(d, decoders_dir).annotations] for d in decoder_ids}


def _sigrok_lines(packed: np.ndarray, samplerate: int, stack_text: str, ids: list[str],
                  decoders_dir: Path, tmp: Path) -> list[str]:
    """sigrok-cli's annotations for packed samples fed as nicrig's sigrok engine feeds them (binary input).

    The input module matters: with binary input sigrok-cli calls start() before
    metadata(), with a .sr session after it. Channels are named by index.
    """
    raw = tmp / "samples.bin"
    raw.write_bytes(np.ascontiguousarray(packed).tobytes())
    fmt = f"binary:numchannels={packed.shape[1] * 8}:samplerate={samplerate}"
    res = run_sigrok(raw, [stack_text], annotations=",".join(dict.fromkeys(ids)), decoders_dir=decoders_dir,
                     all_texts=True, input_format=fmt)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    return [f"{a.ss}-{a.es} {a.instance}: {a.text}" for a in res.annotations]


# -- wait() semantics with the probe decoder -----------------------------------------------------

@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory) -> Path:
    """A decoder folder sigrok-cli can search: the probe beside a copy of nicrig's decoders."""
    d = tmp_path_factory.mktemp("decoders")
    shutil.copytree(PROBE_DIR / "waitprobe", d / "waitprobe")
    return d


def _probe_builtin(bits: np.ndarray, script: str, block: int, probe_dir: Path,
                   channels: dict[str, int]) -> list[str]:
    names = _class_names(["waitprobe"], probe_dir)
    lines: list[str] = []
    session = runtime.Session([runtime.Call("waitprobe", channels, {"script": script, "limit": "60"})],
                              samplerate=1000, decoders_dir=probe_dir,
                              on_annotation=lambda *a: lines.append(_line(names, *a)))
    packed = np.packbits(bits, axis=1, bitorder="little")
    session.run(iter([packed[i:i + block] for i in range(0, len(packed), block)]), packed.shape[1])
    return lines


def _probe_both(tmp: Path, bits: np.ndarray, script: str, probe_dir: Path, block: int = 5,
                channels: dict[str, int] | None = None) -> tuple[list[str], list[str]]:
    channels = {"c0": 0, "c1": 1, "c2": 2} if channels is None else channels
    text = "waitprobe:" + ":".join(f"{k}={v}" for k, v in channels.items()) + f":script={script}:limit=60"
    packed = np.packbits(bits, axis=1, bitorder="little")
    return (_probe_builtin(bits, script, block, probe_dir, channels),
            _sigrok_lines(packed, 1000, text, ["waitprobe"], probe_dir, tmp))


BITS = np.array([[int(c) for c in row] for row in (
    "10000", "10000", "00000", "01000", "11000", "11000", "11100", "10100", "00100", "00000", "10011", "00000",
)], dtype=np.uint8)

SCRIPTS = [
    "0r",                       # no edge at the first sample (old pins = first sample)
    "0f/0h/0h/s0/s1/0n/N",      # a level matches again at the same sample; skip 0 stays; 'n' too
    "N/N/E/L/Z",                # wait(), wait({}), wait([]) step one sample (none at the very start)
    "Z/Z/N", "_|_/N", "N/_|_",  # only empty conditions: no move, matched None
    "s1/s1", "s2/s2", "s3/N", "s0/s0",
    "1r+s1/N", "s1+1r/N",       # a skip counts only after the terms before it matched
    "0e|1e|2e/0e|1e|2e", "_|0r/N", "0r|_/N",
    "3h|s2/N", "3l/3h", "3r|2r", "3n+0r", "3e|0f",   # unconnected optional channel 3
    "0x/1r",                    # unknown term letter never matches
    "0h+0l", "1f+2l|0e",
]


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("block", [1, 3, 1 << 16])
def test_wait_semantics_equal_libsigrokdecode(tmp_path, probe_dir, script, block):
    ours, theirs = _probe_both(tmp_path, BITS, script, probe_dir, block)
    assert ours == theirs


def test_call_order_and_option_types_equal_libsigrokdecode(tmp_path, probe_dir):
    ours, theirs = _probe_both(tmp_path, BITS, "0r", probe_dir)
    assert ours[0] == theirs[0]
    assert "init start samplerate=1000 decode | 0r 60 1.5" in ours[0]  # sigrok-cli's order with binary input


def test_outputs_put_after_the_end_of_the_data_count(tmp_path, probe_dir):
    ours, theirs = _probe_both(tmp_path, BITS, "0r", probe_dir)
    assert ours[-1] == theirs[-1] and "end SystemError" in ours[-1]


_TERMS = st.sampled_from(["0h", "0l", "0r", "0f", "0e", "0n", "1h", "1r", "1f", "1e", "1n", "2l", "2e",
                          "3l", "3h", "s0", "s1", "s2", "s5"])
_COND = st.lists(_TERMS, min_size=0, max_size=3).map(lambda ts: "+".join(ts) or "_")
_WAIT = st.one_of(st.sampled_from(["N", "E", "L", "Z"]), st.lists(_COND, min_size=1, max_size=3).map("|".join))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(_WAIT, min_size=1, max_size=5).map("/".join),
       data=st.binary(min_size=1, max_size=120), block=st.integers(1, 40))
def test_random_waits_on_random_data_equal_libsigrokdecode(tmp_path, probe_dir, script, data, block):
    bits = np.unpackbits(np.frombuffer(data, np.uint8)[:, None], axis=1, bitorder="little")[:, :5]
    ours, theirs = _probe_both(tmp_path, bits, script, probe_dir, block)
    assert ours == theirs


# -- nicrig's decoders on simulated and random captures ------------------------------------------

def _decoder_annotations(tmp: Path, path: Path, source_name: str) -> int:
    """Compare every stack of a source line for line; return how many annotations were compared."""
    compared = 0
    with CaptureSet.open(path) as cs:
        source = cs.source(source_name)
        packed = source.read_packed()
        for stack in spec.auto_stacks(source):
            ids = [c.id for c in stack.calls]
            names = _class_names(ids, DECODERS_DIR)
            ours: list[str] = []
            builtin.run_stack(source, stack, on_annotation=lambda *a: ours.append(_line(names, *a)))
            cmd = _command(source, stack)
            theirs = _sigrok_lines(packed, samplerate_for(source), cmd[cmd.index("-P") + 1], ids, DECODERS_DIR, tmp)
            assert len(ours) == len(theirs), stack.text()
            for i, (a, b) in enumerate(zip(ours, theirs)):
                assert a == b, f"annotation {i} of {stack.text()[:60]}"
            compared += len(ours)
    return compared


def _short_ring_nic(folder: Path) -> str:
    """The Intel profile with a 4-descriptor receive ring: PAUSE frames within the first millisecond."""
    base = (Path(profiles.__file__).parents[2] / "data" / "profiles" / "nic" / "intel-pro1000.toml").read_text()
    nic = folder / "intel-short-ring.toml"
    nic.write_text(base.replace("rx_ring = 80", "rx_ring = 4").replace('name = "intel-pro1000"',
                                                                        'name = "intel-short-ring"'))
    return str(nic)


@pytest.mark.parametrize("name, kwargs", [
    ("pci-state", dict(nic="sk9843", bus="pci32-33", recording=Recording(with_ad=True), kind="latency",
                       size_bytes=3000, count=3)),
    ("pci-timing", dict(nic="generic", bus="pci64-66", recording=Recording(with_ad=True, samples_per_clock=4),
                        kind="latency", size_bytes=600, count=2)),
    ("pause", dict(nic="short-ring", bus="pci64-66", recording=Recording(), kind="stream", size_bytes=1400,
                   spacing_us=11, count=120)),
])
def test_every_annotation_of_every_decoder_equals_libsigrokdecode(tmp_path, name, kwargs):
    if kwargs["nic"] == "short-ring":
        kwargs = {**kwargs, "nic": _short_ring_nic(tmp_path)}
    path = simulate_set(tmp_path, name, **kwargs)
    with CaptureSet.open(path) as cs:
        names = cs.source_names
    total = sum(_decoder_annotations(tmp_path, path, n) for n in names)
    assert total > 100


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), density=st.sampled_from([0.02, 0.5]))
def test_random_bits_give_the_same_annotations_in_both_engines(tmp_path, seed, density):
    """Garbage on every line of every decoder: both engines must say the same about it."""
    rng = np.random.default_rng(seed)
    flips = rng.random((3000, 12)) < density
    bits = (np.cumsum(flips, axis=0) & 1).astype(np.uint8)
    packed = np.packbits(bits, axis=1, bitorder="little")
    stacks = [
        ("pci", {"frame": 0, "irdy": 1, "trdy": 2, "devsel": 3, "stop": 4, "clk": 5, "ad0": 6, "ad1": 7,
                 "cbe0": 8, "par": 9, "inta": 10, "gnt": 11}, {"clock": "clk"}),
        ("gmii", {"en": 0, **{f"d{i}": i + 1 for i in range(8)}, "er": 9}, {}),
        ("irq", {"irq": 3}, {}),
        ("linkactivity", {"act": 5}, {}),
    ]
    for did, chans, opts in stacks:
        calls = [runtime.Call(did, chans, opts)] + ([runtime.Call("ethernet")] if did == "gmii" else [])
        ids = [c.id for c in calls]
        names = _class_names(ids, DECODERS_DIR)
        ours: list[str] = []
        session = runtime.Session(calls, samplerate=125_000_000,
                                  on_annotation=lambda *a: ours.append(_line(names, *a)))
        session.run(iter([packed[:1000], packed[1000:]]), packed.shape[1])
        text = ",".join(c.id + "".join(f":{k}={v}" for k, v in c.channels.items())
                        + "".join(f":{k}={v}" for k, v in c.options.items()) for c in calls)
        assert ours == _sigrok_lines(packed, 125_000_000, text, ids, DECODERS_DIR, tmp_path), did


# -- a decoder's mistakes: clear errors, never a crash or a hang --------------------------------

_BAD_DECODER = """
import sigrokdecode as srd


class Decoder(srd.Decoder):
    api_version = 3
    id = 'bad'
    name = longname = desc = 'Bad'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = []
    channels = ({'id': 'c0', 'name': 'C0', 'desc': 'c0'},)
    annotations = (('x', 'X'),)

    def reset(self):
        pass

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)

    def decode(self):
        %s
"""


@pytest.mark.parametrize("body, message", [
    ("self.wait('h')", "conditions must be a dict or a list of dicts"),
    ("self.wait([{0: 'h'}, 5])", "every condition in the list must be a dict"),
    ("self.wait({0: 5})", "term must be a string"),
    ("self.wait({7: 'h'})", "no channel 7"),
    ("self.wait({'skip': -1})", "needs a sample count"),
    ("self.wait({0: 'h'}, {0: 'l'})", "at most one argument"),
    ("self.put(0, 1, 9, [0, ['x']])", "never registered"),
    ("self.put(0, 1, self.out_ann, [3, ['x']])", "malformed annotation"),
    ("self.put(-1, 1, self.out_ann, [0, ['x']])", "negative sample number"),
    ("1 / 0", "ZeroDivisionError"),
    ("\n        while True:\n            try:\n                self.wait({0: 'r'})\n            except Exception:\n"
     "                pass", "keeps calling wait() after the end"),
])
def test_a_decoders_mistakes_are_clear_errors(tmp_path, body, message):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "__init__.py").write_text("'''A decoder that misuses the API.'''\nfrom .pd import Decoder\n")
    (folder / "pd.py").write_text(_BAD_DECODER % body)
    names = _class_names(["bad"], tmp_path)
    session = runtime.Session([runtime.Call("bad", {"c0": 0})], samplerate=1000, decoders_dir=tmp_path,
                              on_annotation=lambda *a: _line(names, *a))
    with pytest.raises(runtime.DecoderFailed, match="bad-1") as err:
        session.run(iter([np.zeros((100, 1), np.uint8)]), 1)
    assert message in str(err.value)
