"""The architecture's rules, read from the imports of every module (ARCHITECTURE.md):
no import cycles between packages; replication/ and drivers/ never import broker/;
replication/ touches no socket, clock, thread or file; client/ and spark/ never import
store/; chaos/ (test hosts and faults, run by the CLI) drives processes, never the broker's
internals; only packages at the top of ledgermq/, no folder over 16 modules, no file name
twice in one package; each replication mode implements broker/modes/protocol.py. Imports
under `if TYPE_CHECKING:` are annotations only and do not count."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import ledgermq

ROOT = Path(ledgermq.__file__).parent

FORBIDDEN = {  # package -> packages it must not import
    "replication": {"broker", "drivers", "store", "remoting", "sim", "cli"},
    "drivers": {"broker", "cli", "sim"},
    "client": {"store", "broker", "drivers"},
    "spark": {"store", "broker", "drivers"},
    "wire": {"store", "client", "broker", "remoting"},
    "store": {"broker", "client", "drivers", "remoting"},
    "sim": {"broker", "drivers", "store", "remoting"},
    "chaos": {"broker", "store", "drivers", "replication"},
    # the web console reads and changes the cluster through the admin API only
    "console": {"broker", "store", "drivers", "replication", "cli"},
    # the SQL92 filter: a pure function of an expression and properties
    "filter": {"broker", "store", "client", "drivers", "remoting", "replication", "cli"},
}
# the sans-IO cores: no sockets, clocks, threads, files, event loops
IO_MODULES = {"socket", "asyncio", "threading", "time", "os", "mmap", "selectors", "subprocess"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def parse(path: Path) -> ast.Module:
    """ast.parse, once more on CPython 3.11's SystemError "AST constructor recursion depth
    mismatch" (gh-106905: the AST builder's depth count is shared between threads, so a
    traceback formatted meanwhile in another thread, which parses with `ast`, upsets it)."""
    try:
        return ast.parse(path.read_text(), str(path))
    except SystemError:
        return ast.parse(path.read_text(), str(path))


def imports_of(path: Path, name: str | None = None) -> set[str]:
    """Absolute names of every module `path` (module `name`) imports, at any depth."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            out.add(target)
            for a in node.names:  # `from pkg import module` imports the module
                if (ROOT.parent / (target.replace(".", "/") + f"/{a.name}.py")).exists():
                    out.add(f"{target}.{a.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(parse(path))
    return out


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "ledgermq" or len(parts) < 2:
        return None
    return parts[1]


@functools.cache  # parsed once for every test here (and fewer parses: see CPython gh-106905)
def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in ROOT.rglob("*.py")}


def test_every_internal_import_resolves():
    missing = []
    for mod, targets in graph().items():
        for t in targets:
            if package_of(t) is None:
                continue
            path = ROOT.parent / t.replace(".", "/")
            if not (path.with_suffix(".py").exists() or (path / "__init__.py").exists()):
                missing.append(f"{mod} -> {t}")
    assert not missing, missing


def test_no_forbidden_edges():
    bad = []
    for mod, targets in graph().items():
        pkg = package_of(mod)
        for t in targets:
            if package_of(t) in FORBIDDEN.get(pkg, ()):
                bad.append(f"{mod} -> {t}")
    assert not bad, bad


def test_replication_cores_do_no_io():
    bad = [f"{mod} -> {t}" for mod, targets in graph().items()
           if package_of(mod) == "replication" for t in targets
           if t.split(".")[0] in IO_MODULES]
    assert not bad, bad


def test_no_import_cycles_between_packages():
    edges: dict[str, set[str]] = {}
    for mod, targets in graph().items():
        pkg = package_of(mod)
        for t in targets:
            other = package_of(t)
            if pkg and other and other != pkg:
                edges.setdefault(pkg, set()).add(other)
    cycles = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif len(path) < 20:
                walk(nxt, path + [nxt])
    for start in sorted(edges):
        walk(start, [start])
    assert not cycles, cycles[:5]


def test_import_ledgermq_loads_no_store():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, ledgermq; print(sorted("
                          "m for m in sys.modules if m.startswith('ledgermq.')))"],
                         capture_output=True, text=True, check=True).stdout
    assert "ledgermq.store" not in out and "ledgermq.broker" not in out, out


def test_no_module_over_500_lines():
    long = {module_name(p): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


MAX_MODULES_PER_FOLDER = 16  # beside __init__: past that a folder holds more than one concern


def test_only_packages_at_the_top():
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert not loose, f"modules beside the packages (each belongs in its concern's): {loose}"


def test_no_folder_over_the_module_limit():
    crowded = {str(d.relative_to(ROOT.parent)): n for d in [ROOT, *ROOT.rglob("*/")]
               if d.is_dir() and (n := sum(1 for p in d.glob("*.py") if p.stem != "__init__"))
               > MAX_MODULES_PER_FOLDER}
    assert not crowded, crowded


def test_no_module_name_twice_in_one_package():
    """Inside one top-level package, a file name says which module it is."""
    seen: dict[tuple[str, str], list[str]] = {}
    for p in ROOT.rglob("*.py"):
        package = package_of(module_name(p))
        if package and p.stem not in ("__init__", "__main__") and p.parent != ROOT:
            seen.setdefault((package, p.name), []).append(str(p.relative_to(ROOT.parent)))
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    assert not twice, twice


def test_the_checker_sees_a_forbidden_edge(tmp_path):
    """The walker itself: a relative import two levels up is resolved to its package."""
    mod = tmp_path / "probe.py"
    mod.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from ..store import store\nfrom ..broker import broker\n")
    got = imports_of(mod, "ledgermq.drivers.probe")
    assert "ledgermq.broker.broker" in got and "ledgermq.store.store" not in got
    assert package_of("ledgermq.broker.broker") in FORBIDDEN["drivers"]


def protocol_members(protocol: type) -> dict[str, object]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    names |= set(getattr(protocol, "__annotations__", {}))
    return {n: vars(protocol).get(n) for n in sorted(names)}


def missing_members(cls: type, protocol: type) -> list[str]:
    """What `cls` lacks of `protocol`: a member, a property, or the same parameters."""
    import inspect
    out = []
    for name, want in protocol_members(protocol).items():
        if not hasattr(cls, name):
            out.append(f"{name}: missing")
            continue
        have = inspect.getattr_static(cls, name)
        if isinstance(want, property) and not isinstance(have, property):
            out.append(f"{name}: not a property")
        elif inspect.isfunction(want):
            if not inspect.isfunction(have):
                out.append(f"{name}: not a method")
            elif (list(inspect.signature(want).parameters)
                  != list(inspect.signature(have).parameters)):
                out.append(f"{name}: parameters {inspect.signature(have)}, "
                           f"not {inspect.signature(want)}")
            elif inspect.iscoroutinefunction(want) != inspect.iscoroutinefunction(have):
                out.append(f"{name}: async differs")
    return out


def test_every_mode_implements_the_protocol():
    import importlib

    from ledgermq.broker.modes import MODES, ReplicationMode
    not_modes = {"ReplicationMode", "HAPortMode"}  # the protocol; a base of two modes
    defined = {c for p in (ROOT / "broker" / "modes").glob("*.py")
               for c in vars(importlib.import_module(module_name(p))).values()
               if isinstance(c, type) and c.__name__.endswith("Mode")
               and c.__module__ == module_name(p) and c.__name__ not in not_modes}
    assert defined == set(MODES), f"modes outside MODES: {defined - set(MODES)}"
    gaps = {m.__name__: g for m in MODES if (g := missing_members(m, ReplicationMode))}
    assert not gaps, gaps


def test_the_protocol_check_sees_a_gap():
    from ledgermq.broker.modes import ReplicationMode, StandaloneMode

    class Broken(StandaloneMode):
        is_writable = True  # an attribute, not the property

        def refuse_write(self, why):  # another signature
            return why

        async def write_internal(self, encoded):  # a coroutine where a value is due
            return None
    gaps = missing_members(Broken, ReplicationMode)
    assert {g.split(":")[0] for g in gaps} == {"is_writable", "refuse_write", "write_internal"}


def test_readme_layout_names_every_package():
    import re
    readme = (ROOT.parent / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("\n## ", 1)]
    listed = set(re.findall(r"^    ledgermq/(\w+)/", layout, re.M))
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert listed == packages, {"not in README": packages - listed, "gone": listed - packages}
