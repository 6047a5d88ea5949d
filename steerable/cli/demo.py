"""``steerable demo``: the three-replica example on a temporary SQLite file, no API key."""

from __future__ import annotations

import argparse
import runpy
import sys
import tempfile
from pathlib import Path

__all__ = ["demo"]


def _example(name: str) -> Path:
    """The example's folder: inside the installed package, or in the source checkout."""
    package = Path(__file__).resolve().parents[1]
    for root in (package / "_examples", package.parent / "examples"):
        if (root / name / "main.py").is_file():
            return root / name
    raise SystemExit(f"steerable: the {name!r} example is not installed with this package")


def demo(args: argparse.Namespace) -> int:
    """Run the three-replica example on a temporary SQLite file with the scripted model."""
    main = _example("sessions") / "main.py"
    with tempfile.TemporaryDirectory(prefix="steerable-demo-") as directory:
        database = args.database or str(Path(directory) / "sessions.db")
        sys.argv = [str(main), database]
        try:
            runpy.run_path(str(main), run_name="__main__")
        except SystemExit as exit:
            return int(exit.code or 0)
    return 0
