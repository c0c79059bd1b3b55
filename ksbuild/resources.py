"""Where ksbuild's own templates, prelude and dist templates live."""
from __future__ import annotations

from pathlib import Path

VERSION = "0.1.0"
_ROOT = Path(__file__).resolve().parent.parent


def resource_dir(name: str) -> Path:
    """The repository folder `name` (templates, prelude, dist_templates)."""
    for base in (_ROOT, Path(__file__).resolve().parent / "_data"):
        if (base / name).is_dir():
            return base / name
    raise FileNotFoundError(f"ksbuild resource folder '{name}' is missing from the installation")
