"""Write the .sframe section of every fixture ELF file into a fuzz corpus directory.

    python3 -m fuzz.seed_corpus fuzz/corpus
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from pysframe.elf import ElfImage

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def main() -> int:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus")
    target.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    written = set()
    for entry in manifest["files"]:
        for section in ElfImage(str(FIXTURES / entry["path"])).sframe_sections():
            data = section.relocated
            digest = hashlib.sha1(data).hexdigest()
            if digest not in written:
                (target / digest).write_bytes(data)
                written.add(digest)
    print(f"{len(written)} distinct sections written to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
