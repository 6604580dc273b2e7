"""``python -m mha_course.diagrams [DIR]``: draw every picture into DIR (default: images/ of this
checkout). ``python tools/authoring.py images`` also puts them into the notebooks."""

import sys
from pathlib import Path

from . import build

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "images"
for path in build(out):
    print("wrote", path)
