"""What nicrig writes: a recording is never replaced by accident, and every file follows one rule.

Recordings (``simulate``, ``import``, ``acquire``, ``trace record``, ``udpmon ... -o``) refuse a name that
exists unless given ``--force``, before any work, and again in the same step that names the finished file
(``link(2)``), so a file that appears meanwhile is kept. Every output (recordings, exports, reports,
screenshots, saved offsets, derived tables) is written whole under a temporary name and renamed into place:
a symbolic link at the name is replaced, never written through, and the file gets ``0666`` less the umask.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path

import pytest
from conftest import simulate_set

from nicrig.cli import main
from nicrig.errors import UsageError

VCD = ("$timescale 1 ns $end\n$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n"
       "$enddefinitions $end\n#0\n0!\n#10\n1!\n#20\n0!\n")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def refused(argv: tuple[str, ...], target: Path) -> None:
    rc, _, err = run(*argv)
    assert rc == 2 and err.startswith(f"nicrig: error: {target}: exists (use another name, or give --force"), err


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    return simulate_set(tmp_path_factory.mktemp("cap"), "cap", kind="latency", size_bytes=64, count=1)


SIMULATE = ("simulate", "--scenario", "latency", "--size", "64", "--count", "1", "--rounds", "1")


def test_simulate_and_import_refuse_an_existing_file_without_force(tmp_path):
    vcd = tmp_path / "a.vcd"
    vcd.write_text(VCD)
    for name in ("sim.h5", "imp.h5"):
        (tmp_path / name).write_bytes(b"an acquisition that cannot be taken again")
    refused((*SIMULATE, "-o", str(tmp_path / "sim.h5")), tmp_path / "sim.h5")
    refused(("import", str(vcd), "-o", str(tmp_path / "imp.h5")), tmp_path / "imp.h5")
    for name in ("sim.h5", "imp.h5"):
        assert (tmp_path / name).read_bytes() == b"an acquisition that cannot be taken again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.vcd", "imp.h5", "sim.h5"]  # no leftovers
    assert run("import", str(vcd), "-o", str(tmp_path / "imp.h5"), "--force")[0] == 0
    assert (tmp_path / "imp.h5").read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    rc, _, err = run("import", str(vcd), "-o", str(tmp_path / "imp.h5"), "--append", "--force")
    assert rc == 2 and "give one of them" in err


def test_import_refuses_before_reading_the_file(tmp_path):
    """A typo in -o costs nothing: the existing name is the error, even for a file that would not import."""
    bad = tmp_path / "bad.vcd"
    bad.write_text("not a VCD\n")
    (tmp_path / "x.h5").write_bytes(b"kept")
    refused(("import", str(bad), "-o", str(tmp_path / "x.h5")), tmp_path / "x.h5")


def test_a_link_at_the_name_counts_as_existing_even_a_dangling_one(tmp_path):
    vcd = tmp_path / "a.vcd"
    vcd.write_text(VCD)
    dangling = tmp_path / "d.h5"
    dangling.symlink_to(tmp_path / "nowhere.h5")
    refused(("import", str(vcd), "-o", str(dangling)), dangling)
    assert dangling.is_symlink() and not (tmp_path / "nowhere.h5").exists()


def test_udpmon_refuses_an_existing_results_file_before_any_traffic(tmp_path):
    results = tmp_path / "lat.h5"
    results.write_bytes(b"yesterday's run")
    # no daemon listens on port 9: the existing file is the error, before any connection is tried
    refused(("udpmon", "latency", "127.0.0.1", "--port", "9", "--sizes", "64", "--count", "1", "-o", str(results)),
            results)
    assert results.read_bytes() == b"yesterday's run"


def test_a_file_that_appears_while_writing_is_kept(tmp_path):
    from nicrig.atomic import publish

    final, tmp = tmp_path / "x.h5", tmp_path / ".x.h5.1.partial"
    tmp.write_bytes(b"new")
    final.write_bytes(b"appeared meanwhile")
    with pytest.raises(UsageError, match="appeared while nicrig wrote it"):
        publish(tmp, final, overwrite=False)
    assert final.read_bytes() == b"appeared meanwhile" and tmp.read_bytes() == b"new"
    final.unlink()
    publish(tmp, final, overwrite=False)
    assert final.read_bytes() == b"new" and not tmp.exists()


def ordinary_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def linked(folder: Path, name: str) -> tuple[Path, Path]:
    """``folder/name``: a symbolic link to a file of someone else's that must stay as it is."""
    victim = folder / f"victim-{name}"
    victim.write_bytes(b"not nicrig's to write")
    link = folder / name
    link.symlink_to(victim)
    return link, victim


def replaced_not_followed(link: Path, victim: Path) -> None:
    assert victim.read_bytes() == b"not nicrig's to write"
    assert not link.is_symlink() and link.is_file() and link.stat().st_size > 0
    assert stat.S_IMODE(link.stat().st_mode) == ordinary_mode()
    assert not list(link.parent.glob("*.partial"))


def test_every_output_replaces_a_link_at_its_name(capture, tmp_path):
    outputs = {
        "shot.png": ("gui", str(capture), "--screenshot", "{}", "--size", "400x300"),
        "shot.svg": ("gui", str(capture), "--screenshot", "{}", "--size", "400x300"),
        "x.vcd": ("export", str(capture), "--source", "send_pci", "-o", "{}"),
        "x.sr": ("export", str(capture), "--source", "send_pci", "-o", "{}"),
        "r.html": ("report", str(capture), "-o", "{}"),
        "sim.h5": (*SIMULATE, "--force", "-o", "{}"),
    }
    for name, argv in outputs.items():
        link, victim = linked(tmp_path, name)
        rc, _, err = run(*(a.format(link) for a in argv))
        assert rc == 0, (name, err)
        replaced_not_followed(link, victim)


def test_the_companion_and_saved_offsets_replace_a_link(capture, tmp_path):
    cap = tmp_path / "cap.h5"
    cap.write_bytes(capture.read_bytes())
    companion, victim = linked(tmp_path, "cap.derived.h5")
    companion.unlink()
    companion.symlink_to(victim)
    assert run("decode", str(cap))[0] == 0
    replaced_not_followed(companion, victim)
    saved, victim = linked(tmp_path, "cal.toml")
    rc, _, err = run("instrument", "deskew", str(cap), "--signal", "FRAME#", "--dry-run", "--save", str(saved))
    assert rc == 0, err
    replaced_not_followed(saved, victim)
