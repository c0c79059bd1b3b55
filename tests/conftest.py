"""Shared fixtures: one build cache for the whole session, the repository root on sys.path."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory):
    """Builds share one cache per session unless KSBUILD_CACHE is set by the caller."""
    if "KSBUILD_CACHE" not in os.environ:
        os.environ["KSBUILD_CACHE"] = str(tmp_path_factory.mktemp("ksbuild-cache"))
    yield


@pytest.fixture(scope="session")
def relu3_pkg():
    import ksbuild

    return ksbuild.build(ROOT / "examples/relu3/manifest.toml")
