"""Regenerate docs/causes/ from the cause catalog (``--check`` to verify only).

python scripts/gen_docs.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from loaderdoctor.docs import main

ROOT = Path(__file__).resolve().parent.parent
DOCS_DIR = ROOT / "docs" / "causes"

if __name__ == "__main__":
    sys.exit(main(["--out", str(DOCS_DIR), "--readme", str(ROOT / "README.md"), *sys.argv[1:]]))
