"""The examples in the module docstrings run (docs as tests, as in Ciw)."""

import doctest
import importlib

import pytest

MODULES = ["asrsched.policies", "asrsched.workloads", "asrsched.metrics", "asrsched.sweep", "asrsched.service",
           "asrsched.audio", "asrsched.profile", "asrsched.cluster"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0
    if name != "asrsched.service":
        assert res.attempted > 0
