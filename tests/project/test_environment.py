"""The conda environment and pyproject.toml list the same requirements; CI calls the README's test command."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env_requirements() -> set[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    out = set()
    in_pip = False
    for ln in lines:
        if re.match(r"\s+- pip:\s*$", ln):
            in_pip = True
            continue
        m = re.match(r"\s+- (.+)$", ln)
        if in_pip and m and not m.group(1).startswith("-e"):
            out.add(m.group(1).strip())
    return out


def _expand(extras: dict[str, list[str]], name: str) -> set[str]:
    """The requirements of one extra, with ``asrsched[a,b]`` self-references expanded."""
    out = set()
    for req in extras[name]:
        m = re.fullmatch(r"asrsched\[(.+)\]", req)
        out |= set().union(*(_expand(extras, e.strip()) for e in m.group(1).split(","))) if m else {req}
    return out


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = set(py["dependencies"]) | _expand(py["optional-dependencies"], "dev")
    got = _env_requirements()
    assert got == want, f"only in environment.yml: {sorted(got - want)}; only in pyproject: {sorted(want - got)}"


def test_ipykernel_pinned_below_7():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["notebooks"]
    assert any(d.replace(" ", "").startswith("ipykernel") and "<7" in d for d in deps)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in readme and "bash scripts/main.sh" in readme
    assert re.search(r"^bash scripts/test\.sh\s*$", ci, re.M)
    # and the quick subset as a new contributor runs it: a fresh venv with only the base install and the test tools
    assert re.search(r"^bash scripts/quick\.sh\s*$", ci, re.M) and "bash scripts/quick.sh" in readme
    quick = (ROOT / "scripts" / "quick.sh").read_text()
    assert 'pip install -q -e ".[test]"' in quick and '-m "not slow"' in quick
