"""The examples in the module docstrings run (docs as tests, as in Ciw)."""

import doctest
import importlib

import pytest

MODULES = ["asrsched.core.policies", "asrsched.core.workloads", "asrsched.core.metrics", "asrsched.core.service",
           "asrsched.sim.sweep", "asrsched.sim.fleet", "asrsched.abtest.fleet_experiment", "asrsched.whisper.audio",
           "asrsched.profiling.measure", "asrsched.profiling.fit", "asrsched.profiling.run"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0
    if name != "asrsched.core.service":
        assert res.attempted > 0
