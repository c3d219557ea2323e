"""`sframe script` with the scalar tracer and with the numpy batch engine: the same text,
and the same frame methods and stop reason for every sample (``--show-stops``), on every
recording here that has stack copies (the fixture recordings and tests/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, REPO
from pysframe.cli.script import ENGINE_VARIABLE, run_script

pytest.importorskip("numpy")

RECORDINGS = [*sorted(FIXTURES.glob("real/lua-*/perf*.data")),
              *sorted((REPO / "tests" / "data").glob("*.perf.data"))]


def _script(path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
            capsys: pytest.CaptureFixture[str]) -> tuple[bytes, str, int]:
    monkeypatch.setenv(ENGINE_VARIABLE, engine)
    output = tmp_path / f"{engine}.txt"
    status = run_script(str(path), binaries=[str(path.parent)], output=str(output),
                        show_stops=True, report=lambda message: None)
    return output.read_bytes(), capsys.readouterr().err, status


@pytest.mark.skipif(not RECORDINGS, reason="no recordings with stack copies here")
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_both_engines_print_the_same_chains_and_stops(
        path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    scalar = _script(path, "scalar", monkeypatch, tmp_path, capsys)
    batch = _script(path, "vector", monkeypatch, tmp_path, capsys)
    assert scalar[0] and scalar[1]  # text and a stop line per sample
    assert batch[2] == scalar[2]
    assert batch[1] == scalar[1]  # every sample's frame methods and stop reason
    assert batch[0] == scalar[0]  # byte-identical text
