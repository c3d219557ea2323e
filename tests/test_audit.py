"""``sframe audit``: facts per ELF file (fixtures of binutils 2.40, 2.44 and 2.46), archives
whose members mix SFrame versions, what is left out, the same JSON from one process, a
pool and a Dask local cluster, results cached by content, and the HTML report."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe import cachedir
from pysframe.audit.facts import FACTS_VERSION
from pysframe.audit.run import CACHE_KIND
from pysframe.cachedir import Source

pytestmark = pytest.mark.skipif(not (FIXTURES / "2.46").exists(),
                                reason="no fixture binaries (../shared/fixtures) here")


def audit(*arguments: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", "audit", *arguments],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, XDG_CACHE_HOME=str(cache)))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Programs of three binutils (V1, V2, V3), an archive of V2 and V3 objects, a file
    that is not ELF, and a symbolic link."""
    root = tmp_path_factory.mktemp("audit")
    (root / "bin").mkdir()
    for version in ("2.40", "2.44", "2.46"):
        shutil.copy(FIXTURES / version / "x86_64" / "O2" / "prog", root / "bin" / f"prog-{version}")
    (root / "lib").mkdir()
    objects = [root / "lib" / "old.o", root / "lib" / "new.o"]
    shutil.copy(FIXTURES / "2.44" / "x86_64" / "O2" / "cfi.o", objects[0])
    shutil.copy(FIXTURES / "2.46" / "x86_64" / "O2" / "cfi.o", objects[1])
    if shutil.which("ar") is None:
        pytest.skip("needs ar")
    subprocess.run(["ar", "rcs", str(root / "lib" / "libmixed.a"), *map(str, objects)],
                   check=True)
    for item in objects:
        item.unlink()
    (root / "lib" / "README").write_text("not ELF\n")
    (root / "bin" / "link").symlink_to(root / "bin" / "prog-2.46")
    return root


def test_facts_totals_and_what_is_left_out(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    run = audit(str(tree), "-j", "1", "--json", str(out), cache=tmp_path / "cache")
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    files = {Path(item["path"]).name: item for item in report["files"]}
    assert set(files) == {"prog-2.40", "prog-2.44", "prog-2.46", "libmixed.a(old.o)",
                          "libmixed.a(new.o)"}
    versions = {name: [s["version"] for s in item["sframe"]] for name, item in files.items()}
    assert versions["prog-2.40"] == [1] and versions["prog-2.44"] == [2]
    assert versions["prog-2.46"] == [3]
    # The kernel takes V3 only.
    assert [s["kernel_ok"] for s in files["prog-2.46"]["sframe"]] == [True]
    assert "version 3" in files["prog-2.44"]["sframe"][0]["kernel_refuses"]
    # Coverage: the C run-time's functions were not assembled with --gsframe; ld's
    # .plt.got rule is named where it disagrees with the CFI.
    program = files["prog-2.46"]
    assert 0 < program["without_sframe"] < program["functions"]
    # Why, function by function: gas skips the one function whose CFI has a .cfi_escape,
    # ld's PLT stubs (2.40 made two of its .plt.got), the rest were not assembled with
    # --gsframe (the C run-time); every function left out has exactly one reason.
    unassembled = "no SFrame FDE (assembled without --gsframe?)"
    assert program["reasons"] == {".cfi_escape with op": 1, "PLT stub": 1, unassembled: 1}
    assert files["prog-2.44"]["reasons"] == {".cfi_escape with op": 1, "PLT stub": 1,
                                             unassembled: 6}
    assert files["prog-2.40"]["reasons"] == {".cfi_escape with op": 1, "PLT stub": 2,
                                             unassembled: 6}
    assert files["libmixed.a(new.o)"]["reasons"] == {".cfi_escape with op": 1}
    for item in files.values():
        assert sum(item["reasons"].values()) == item["without_sframe"], item["path"]
    assert any("plt.got" in example for example in program["cfi_examples"])
    # Every disagreement with the CFI has a known cause: the three rows gas 2.44 wrote
    # wrong, ld's .plt.got rule in both.
    older = files["prog-2.44"]["cfi_causes"]
    assert "other" not in older and "other" not in program["cfi_causes"]
    assert any(cause.startswith("gas 2.44: rows from a .cfi_restore_state") for cause in older)
    assert any("RA kept in a register" in cause for cause in older)
    assert any("RA undefined" in cause for cause in older)
    assert list(program["cfi_causes"]) == [next(c for c in older if "plt.got" in c)]
    summary = report["summary"]
    assert summary["files"] == 5 and summary["not_elf"] == 1  # the README
    assert summary["versions"] == {"V1": 1, "V2": 2, "V3": 2}
    assert [s["version"] for s in files["libmixed.a(old.o)"]["sframe"]] == [2]
    assert list(summary["mixed_versions"]) == [str(tree / "lib" / "libmixed.a")]
    assert "1 symbolic link" in run.stdout and "a 2.46 link fails" in run.stdout


def test_pool_and_dask_give_the_same_json(tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    outputs = {}
    for name, options in (("one", ["-j", "1"]), ("pool", ["-j", "2"]),
                          ("dask", ["-j", "2", "--dask", "local"])):
        out = tmp_path / f"{name}.json"
        run = audit(str(tree), *options, "--no-cache", "--json", str(out),
                    cache=tmp_path / "cache")
        assert run.returncode == 0, run.stderr
        outputs[name] = out.read_bytes()
    assert outputs["one"] == outputs["pool"] == outputs["dask"]


def cache_entry(cache: Path, program: Path, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[Path, bytes, Source]:
    """(the path of the audit's cache entry for ``program``, its key, its source): the
    file's SHA-256 (the first 20 bytes name the entry) and the facts' version."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    data = program.read_bytes()
    digest = hashlib.sha256(data).digest()
    path = cachedir.entry_path(CACHE_KIND, digest[:20])
    assert path is not None
    return Path(path), digest[:20], cachedir.describe(
        len(data), [digest, FACTS_VERSION.to_bytes(4, "little")])


def test_results_are_cached_by_content(tree: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert audit(str(tree), "--json", str(first), cache=cache).returncode == 0
    entries = list((cache / "pysframe" / "audit").rglob(f"*.facts.v{FACTS_VERSION}"))
    assert len(entries) == 5  # three programs, the archive, the README (nothing to say)
    assert audit(str(tree), "--json", str(second), cache=cache).returncode == 0
    assert first.read_bytes() == second.read_bytes()
    copy = tmp_path / "elsewhere"
    shutil.copytree(tree / "bin", copy, symlinks=True)
    third = tmp_path / "third.json"
    assert audit(str(copy), "--json", str(third), cache=cache).returncode == 0
    paths = [item["path"] for item in json.loads(third.read_text())["files"]]
    assert all(path.startswith(str(copy)) for path in paths)  # cached facts, new paths

    def reasons(output: Path) -> dict[str, int]:
        found = json.loads(output.read_text())["files"]
        facts: dict[str, int] = next(item for item in found
                                     if item["path"].endswith("prog-2.46"))["reasons"]
        return facts

    # The cache is read: a planted entry (valid, for the very bytes of prog-2.46) comes
    # back in the output instead of what judging the file says.
    entry, key, source = cache_entry(cache, tree / "bin" / "prog-2.46", monkeypatch)
    made = entry.read_bytes()
    payload = cachedir.load(CACHE_KIND, key, source)
    assert payload is not None and entry.read_bytes() == made
    planted = json.loads(payload)
    assert [item["member"] for item in planted] == [""]
    truth = reasons(first)
    planted[0]["reasons"] = {"planted by the test": 3}
    cachedir.store(CACHE_KIND, key, json.dumps(planted).encode(), source)
    doctored = entry.read_bytes()
    assert doctored != made
    fourth = tmp_path / "fourth.json"
    assert audit(str(tree), "--json", str(fourth), cache=cache).returncode == 0
    assert reasons(fourth) == {"planted by the test": 3}
    assert audit(str(tree), "--json", str(fourth), "--no-cache", cache=cache).returncode == 0
    assert reasons(fourth) == truth  # --no-cache does not read it

    # A damaged entry is not trusted: one byte of the payload changed (its SHA-256 in the
    # entry's header no longer matches) and the file is judged again, the entry rewritten.
    damaged = bytearray(doctored)
    at = damaged.index(b"planted")
    damaged[at] ^= 0x20  # "Planted": still valid JSON, only the digest tells
    entry.write_bytes(bytes(damaged))
    fifth = tmp_path / "fifth.json"
    assert audit(str(tree), "--json", str(fifth), cache=cache).returncode == 0
    assert fifth.read_bytes() == first.read_bytes()
    assert entry.read_bytes() == made

    # An entry of another file (prog-2.44's, valid in itself) under prog-2.46's name is not
    # trusted either: the key and the source's digest in its header are another file's.
    other, _, _ = cache_entry(cache, tree / "bin" / "prog-2.44", monkeypatch)
    shutil.copyfile(other, entry)
    sixth = tmp_path / "sixth.json"
    assert audit(str(tree), "--json", str(sixth), cache=cache).returncode == 0
    assert sixth.read_bytes() == first.read_bytes()
    assert entry.read_bytes() == made


def test_html_report_is_self_contained_and_sortable(tree: Path, tmp_path: Path) -> None:
    page = tmp_path / "audit.html"
    assert audit(str(tree), "--html", str(page), cache=tmp_path / "cache").returncode == 0
    text = page.read_text()
    assert "<svg id='chart'" in text and "<table id='directories'>" in text
    assert "addEventListener('click'" in text  # the table sorts by a clicked column
    assert "http" not in text.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert str(tree / "bin") in text and str(tree / "lib") in text


def test_an_archive_is_never_written_and_outputs_are_checked(tree: Path, tmp_path: Path) -> None:
    archive = tree / "lib" / "libmixed.a"
    before = archive.read_bytes()
    run = audit(str(tree), "--json", str(archive), cache=tmp_path / "cache")
    assert run.returncode != 0 and len(run.stderr.strip().splitlines()) == 1
    assert archive.read_bytes() == before


def test_a_debian_package_is_opened(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("needs dpkg-deb to build a package")
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: sframe-audit-test\nVersion: 1.0\nArchitecture: amd64\n"
        "Maintainer: test <test@example.invalid>\nDescription: test\n")
    (root / "usr" / "bin").mkdir(parents=True)
    shutil.copy(FIXTURES / "2.46" / "x86_64" / "O2" / "prog", root / "usr" / "bin" / "prog")
    (root / "usr" / "share").mkdir()
    (root / "usr" / "share" / "notes.txt").write_text("not ELF\n")
    package = tmp_path / "test.deb"
    subprocess.run(["dpkg-deb", "-Zxz", "--build", str(root), str(package)], check=True,
                   capture_output=True)
    out = tmp_path / "deb.json"
    run = audit(str(package), "--json", str(out), cache=tmp_path / "cache")
    assert run.returncode == 0, run.stderr
    files = json.loads(out.read_text())["files"]
    assert [item["path"] for item in files] == [f"{package}(usr/bin/prog)"]
    assert [s["version"] for s in files[0]["sframe"]] == [3]


def test_a_missing_path_is_one_line(tmp_path: Path) -> None:
    run = audit(str(tmp_path / "missing"), cache=tmp_path / "cache")
    assert run.returncode == 2 and run.stderr.strip().endswith("no such file or directory")
