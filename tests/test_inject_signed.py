"""``inject`` on files signed the way Linux signs modules (``scripts/sign-file``: the
signature, a 12-byte ``module_signature`` and ``~Module signature appended~`` end the
file): the SFrame goes in as for the unsigned file, the signature still ends the new file
(the kernel and ``modinfo`` look for it there), and one line says it must be signed
again, since it no longer matches."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

MARKER = b"~Module signature appended~\n"
SFRAME = [sys.executable, "-m", "pysframe"]


def _signed(data: bytes) -> bytes:
    signature = bytes(range(256)) * 2
    info = struct.pack(">BBBBB3xI", 0, 0, 2, 0, 0, len(signature))  # PKCS#7, as sign-file
    return data + signature + info + MARKER


def _inject(source: Path, output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SFRAME, "inject", str(source), "-o", str(output)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["program", "object"])
def test_the_signature_still_ends_the_file(tmp_path: Path, kind: str) -> None:
    source = tmp_path / "m.c"
    source.write_text("int twice(int x) { return 2 * x; }\n"
                      "int main(int argc, char **argv) { (void)argv; return twice(argc) - 2; }\n")
    built = tmp_path / ("m" if kind == "program" else "m.o")
    subprocess.run(["gcc", "-O2", *([] if kind == "program" else ["-c"]), "-o", str(built),
                    str(source)], check=True)
    signed = tmp_path / f"{built.name}.signed"
    signed.write_bytes(_signed(built.read_bytes()))
    signed.chmod(0o755)

    plain = _inject(built, tmp_path / "plain.out")
    run = _inject(signed, tmp_path / "signed.out")
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("\n") == 1 and "sign" in run.stderr and "again" in run.stderr
    out = (tmp_path / "signed.out").read_bytes()
    trailer = len(signed.read_bytes()) - len(built.read_bytes())
    assert out[-trailer:] == signed.read_bytes()[-trailer:]  # still the end of the file
    assert out[:-trailer] == (tmp_path / "plain.out").read_bytes()  # as if unsigned

    # binutils reads it as the unsigned file's injection (trailing bytes ignored)
    if kind == "program":
        headers = subprocess.run(["readelf", "-lW", str(tmp_path / "signed.out")],
                                 capture_output=True, text=True, check=True).stdout
        assert "GNU_SFRAME" in headers
        assert subprocess.run([str(tmp_path / "signed.out")]).returncode == 0
    else:
        linked = tmp_path / "linked"
        subprocess.run(["gcc", "-o", str(linked), str(tmp_path / "signed.out")], check=True)
        assert subprocess.run([str(linked)]).returncode == 0
    dumped = subprocess.run(["objdump", "-h", str(tmp_path / "signed.out")],
                            capture_output=True, text=True, check=True).stdout
    assert ".sframe" in dumped
