"""The Python frontend's registry of torch functions (ksbuild/frontends/python/registry.py): every registered
name is in a namespace the compiler reads, and a name registered twice is an error."""
import pytest

from ksbuild.frontends.python import namespaces
from ksbuild.frontends.python.registry import REGISTRY, torch_function


def test_every_registered_name_is_reachable():
    """A name outside the namespaces python/compiler.py looks up (a typo such as torch.nn.functionl.relu)
    would be registered and never found."""
    prefixes = set(namespaces.NAMESPACE_NAMES.values())
    unreachable = sorted(n for n in REGISTRY if n.rpartition(".")[0] not in prefixes)
    assert not unreachable, unreachable
    assert all(callable(h) for h in REGISTRY.values())


def test_a_name_registered_twice_is_an_error():
    name = "torch.ksbuild_test_only_function"
    torch_function(name)(lambda fc, b, args, kw, node: None)
    try:
        with pytest.raises(ValueError, match="torch.ksbuild_test_only_function is registered twice"):
            torch_function(name)(lambda fc, b, args, kw, node: None)
    finally:
        del REGISTRY[name]
