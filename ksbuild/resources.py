"""Where ksbuild's own templates, prelude and dist templates live."""
from __future__ import annotations

from pathlib import Path

VERSION = "0.1.0"
_ROOT = Path(__file__).resolve().parent.parent
_DATA = Path(__file__).resolve().parent / "_data"


def resource_dir(name: str) -> Path:
    """The folder `name` (templates, prelude, dist_templates): the checkout's (a source tree or an editable
    install, recognised by its pyproject.toml), else the copy an installed wheel carries in ksbuild/_data."""
    bases = (_ROOT, _DATA) if (_ROOT / "pyproject.toml").is_file() else (_DATA,)
    for base in bases:
        if (base / name).is_dir():
            return base / name
    raise FileNotFoundError(f"ksbuild's folder '{name}' is missing from its installation (looked in "
                            f"{', '.join(str(b) for b in bases)}); reinstall ksbuild")
