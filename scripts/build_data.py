"""setuptools build hook: a wheel of ksbuild carries its templates, prelude and dist templates.

They live at the top of the repository (the product card fixes that layout); `ksbuild.resources`
looks for them there first, then in `ksbuild/_data/`. A non-editable build copies them into
`ksbuild/_data/` of the wheel. An editable install (`pip install -e .`) copies nothing: it runs
from the checkout, which has them. MANIFEST.in puts the same folders into the sdist.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py

DATA_FOLDERS = ("templates", "prelude", "dist_templates")
ROOT = Path(__file__).resolve().parent.parent


class BuildPy(build_py):
    """build_py that also copies DATA_FOLDERS into ksbuild/_data of the build tree."""

    def run(self) -> None:
        """Build the Python modules, then the data folders (not for an editable install)."""
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in DATA_FOLDERS:
            source = ROOT / name
            if not source.is_dir():
                raise FileNotFoundError(f"ksbuild's build needs the folder {source}, which is missing")
            target = Path(self.build_lib) / "ksbuild" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
