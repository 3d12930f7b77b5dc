"""Cache keys that change when the code that computed a cached value changes.

A result cache (the sweep's parquet files, the A/B studies' JSON files) must not hand back
a value computed by older code. A hand-maintained version string goes stale (nobody bumps
it), so the key is computed from the code itself: :func:`code_key` hashes the source bytes
of the given modules *and of every ``asrsched`` module they import* (found by reading their
``import`` statements, also those inside functions, transitively; package ``__init__``
files on the way count too). :func:`cache_key` combines that hash with the parameters and
seeds of one task.

    >>> from asrsched.sim.cache import cache_key, code_key, module_closure
    >>> "asrsched.core.policies" in module_closure("asrsched.sim.engine")
    True
    >>> len(code_key("asrsched.sim.engine"))
    20
    >>> cache_key({"rate": 4.0, "seed": 1}, code="abc") == cache_key({"seed": 1, "rate": 4.0}, code="abc")
    True

The hash covers file *contents* and module names, not paths or modification times, so two
checkouts of the same commit share keys, and an edit that is undone restores the old key.
What it cannot see: code outside ``asrsched`` (numpy, numba), and policies registered at
run time from elsewhere; pass such modules to :func:`code_key` explicitly.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "code_key",
    "cache_key",
    "module_closure",
    "module_file",
    "source_bytes",
    "clear_memo",
    "guard_numba_cache",
    "ROOT_PACKAGE",
]

ROOT_PACKAGE = "asrsched"

# (module name) -> file path, and (path, mtime_ns, size) -> (imports, digest); cleared by clear_memo()
_FILES: dict[str, Path | None] = {}
_PARSED: dict[tuple[str, int, int], tuple[frozenset[str], str]] = {}


def clear_memo() -> None:
    """Forget memoised file lookups, import lists and digests (after changing files in place)."""
    _FILES.clear()
    _PARSED.clear()


def source_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of a source file as hashed by :func:`code_key` (one place to read them)."""
    return Path(path).read_bytes()


def module_file(name: str) -> Path | None:
    """Source file of module ``name`` (a package's ``__init__.py``), or ``None`` if it has none.

    ``asrsched`` modules are found on disk next to the package, without importing them.
    """
    if name not in _FILES:
        path = None
        parts = name.split(".")
        if parts[0] == ROOT_PACKAGE:
            base = Path(__file__).resolve().parents[1].joinpath(*parts[1:])
            path = next((c for c in (base / "__init__.py", base.with_suffix(".py")) if c.is_file()), None)
        else:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            origin = getattr(spec, "origin", None) if spec is not None else None
            path = Path(origin) if origin and origin.endswith(".py") else None
        _FILES[name] = path
    return _FILES[name]


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    if not node.level:
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _parse(name: str, path: Path) -> tuple[frozenset[str], str]:
    """(``asrsched`` modules imported by the file, sha256 of its bytes), memoised by path, mtime and size."""
    st = path.stat()
    memo_key = (str(path), st.st_mtime_ns, st.st_size)
    hit = _PARSED.get(memo_key)
    if hit is not None:
        return hit
    data = source_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(data, filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve_from(node, name, is_package)
            if mod:
                found.add(mod)
                found.update(f"{mod}.{a.name}" for a in node.names if a.name != "*")  # submodules
    mine = frozenset(m for m in found if m == ROOT_PACKAGE or m.startswith(ROOT_PACKAGE + "."))
    _PARSED[memo_key] = (mine, digest)
    return _PARSED[memo_key]


def _name_of(module: str | ModuleType) -> str:
    if isinstance(module, ModuleType):
        return module.__name__
    if not isinstance(module, str) or not module:
        raise TypeError(f"code_key takes module objects or dotted module names, got {module!r}")
    return module


def module_closure(*modules: str | ModuleType) -> list[str]:
    """The given modules and every ``asrsched`` module they import, transitively (sorted names).

    Parent packages count (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__``).
    A name that is not a module (``from asrsched.x import some_function``) is dropped.
    ``ValueError`` names a given module that has no source file.
    """
    names = [_name_of(m) for m in modules]
    for n in names:
        if module_file(n) is None:
            raise ValueError(f"no Python source file for module {n!r}")
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        path = module_file(name)
        if path is None:
            continue
        seen.add(name)
        parts = name.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        stack.extend(_parse(name, path)[0])
    return sorted(seen)


def code_key(*modules: str | ModuleType) -> str:
    """20-hex-digit hash of the source of ``modules`` and of every ``asrsched`` module they import.

    Module objects or dotted names; see :func:`module_closure` for what is included. The hash
    covers each module's name and file bytes (read through :func:`source_bytes`).
    """
    if not modules:
        raise ValueError("code_key needs at least one module")
    h = hashlib.sha256()
    for name in module_closure(*modules):
        path = module_file(name)
        assert path is not None  # module_closure keeps only modules with a source file
        h.update(name.encode() + b"\0" + _parse(name, path)[1].encode() + b"\n")
    return h.hexdigest()[:20]


def cache_key(params: Any, *, code: str | None = None, modules: Iterable[str | ModuleType] = ()) -> str:
    """Key of one cached value: a code hash plus the task's parameters and seeds (JSON, sorted keys).

    Give ``code`` (a :func:`code_key` computed once for many tasks) or ``modules`` to hash.
    """
    if code is None:
        mods = list(modules)
        if not mods:
            raise ValueError("cache_key needs code= (from code_key) or modules= to hash")
        code = code_key(*mods)
    blob = json.dumps({"code": code, "params": params}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:20]


def guard_numba_cache(*dispatchers: Any, key: str | None = None) -> list[str]:
    """Drop the on-disk machine code of numba ``dispatchers`` (``@njit(cache=True)``) compiled from other code.

    numba keys a cached function by its own bytecode: when a function it inlines from another module
    changes (the compiled engine inlines the rulebook's queue functions, the supermarket kernel the
    rulebook's heap and :mod:`asrsched.sim.rng`), numba would load the stale machine code. Here the cache
    is keyed by ``key`` as well, by default :func:`code_key` of the dispatcher's module (its source and
    every ``asrsched`` module it imports): a stamp file beside numba's index holds it, and when it
    differs, the index is flushed, so the next call compiles afresh. Call it where the dispatcher is
    defined, before anything calls it. Returns the names of the dispatchers flushed.
    """
    flushed = []
    for d in dispatchers:
        cache = getattr(d, "_cache", None)  # numba's FunctionCache (absent without cache=True or with the JIT off)
        path = getattr(cache, "cache_path", None)
        if cache is None or not path:
            continue
        func = d.py_func
        want = key if key is not None else code_key(func.__module__)
        stamp = Path(path) / f"{func.__module__.rsplit('.', 1)[-1]}.{func.__qualname__}.code-key"
        try:
            have = stamp.read_text().strip()
        except OSError:
            have = None
        if have != want:
            cache.flush()
            try:
                stamp.write_text(want + "\n")
            except OSError:  # a read-only install: the flush stands for this process
                pass
            flushed.append(f"{func.__module__}.{func.__qualname__}")
    return flushed
