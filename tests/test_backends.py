"""The Backend records (ksbuild/compile/backends.py): complete, and the only place that knows a backend by name.

Each record's own build-and-run tests are named in its `tests` field (test_blas_backend.py, test_aten_backend.py,
test_ort_backend.py, ...); these tests check the records themselves and that no template or pass tests a name.
"""
from __future__ import annotations

import re

import pytest
from conftest import ROOT

from ksbuild.compile.backends import BACKENDS, get_backend
from ksbuild.errors import KsbuildError

NAMES = sorted(BACKENDS)


@pytest.mark.parametrize("name", NAMES)
def test_every_backend_names_tests_that_build_with_it(name):
    b = BACKENDS[name]
    assert b.tests, f"backend {name} names no test file"
    for rel in b.tests:
        text = (ROOT / rel).read_text()
        assert name == "plain" or f'"{name}"' in text, f"{rel} never builds with backend {name}"


@pytest.mark.parametrize("name", NAMES)
def test_every_header_a_backend_names_is_in_the_prelude(name):
    b = BACKENDS[name]
    assert (ROOT / "prelude" / b.header).is_file()
    for h in b.own_headers:
        assert (ROOT / "prelude" / "ks" / h).is_file()
    if b.adapter:
        assert (ROOT / "templates" / b.adapter).is_file() and b.adapter_view is not None


@pytest.mark.parametrize("name", NAMES)
def test_a_runtime_free_backend_links_nothing(name):
    b = BACKENDS[name]
    if b.runtime_free:
        assert not (b.link or b.find or b.bridge[0] or b.gemm), f"{name}: libP.a would not be runtime-free"
    assert bool(b.find) == bool(b.link), f"{name}: a library to find is one to link"


def test_no_template_or_pass_tests_a_backend_name():
    """Templates print the record's fields; a `backend == "..."` (or a tuple of names) would be a second registry."""
    name_test = re.compile(r"backend(\.name)?\s*(==|!=|not in|in)\s*[\"'(]")
    files = [*ROOT.glob("templates/*.j2"), *ROOT.glob("dist_templates/**/*.j2"), *ROOT.glob("ksbuild/**/*.py")]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if name_test.search(line) and "compile/backends.py" not in str(p)]
    assert not found, f"backend names tested outside compile/backends.py: {found}"


def test_an_unknown_backend_lists_the_known_ones():
    with pytest.raises(KsbuildError, match=f"unknown backend 'blass'; known backends: {', '.join(BACKENDS)}") as e:
        get_backend("blass")
    assert e.value.hint == "did you mean 'blas'?"
