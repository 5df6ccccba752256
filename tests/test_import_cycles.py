"""No module of the package imports one that imports it back (DESIGN.md, "Layout of the code"),
and no subpackage imports one that imports it back (docs/code-map.md).

The graph is built from the source with ``ast``: every import counts, at module level or inside
a function (an import moved into a function to dodge a cycle is still a cycle), and so does one
under ``if TYPE_CHECKING:`` (a type named across a circle ties the two modules as much: a
protocol in ``sandbox_memory/typing.py`` or beside its user is the way out). Importing ``a.b.c``
also runs the ``__init__`` of each package on the way that the importing module is not inside
already (those are imported before it). The package's own ``__init__`` re-exports every public
name under ``TYPE_CHECKING`` and is imported by no module of it, so it closes no circle.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import sandbox_memory

PACKAGE_DIR = Path(sandbox_memory.__file__).parent


def _modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's ``__init__``)."""

    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST, *, typing: bool = True) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement; with ``typing=False``, only those that can run (anywhere but
    the body of ``if TYPE_CHECKING:``)."""

    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if not typing and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(package_dir: Path, *, typing: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules that importing it runs (see the module docstring)."""

    modules = _modules(package_dir)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets: list[str] = []
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), typing=typing):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
                continue
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""])
                base = base.rstrip(".")
            else:
                base = node.module or ""
            targets.append(base)
            targets += [f"{base}.{alias.name}" for alias in node.names]  # submodules
        deps: set[str] = set()
        for target in targets:
            if target not in modules or name.startswith(target + "."):
                continue  # not ours, or a package the module is in (imported before it)
            deps.add(target)
            parts = target.split(".")
            for n in range(1, len(parts)):
                parent = ".".join(parts[:n])
                if parent in modules and not name.startswith(parent + "."):
                    deps.add(parent)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or ``None``."""

    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for dep in sorted(graph.get(node, ())):
            if dep in on_path:
                return [*path[path.index(dep) :], dep]
            if dep not in done:
                cycle = visit(dep)
                if cycle is not None:
                    return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def test_no_module_of_the_package_imports_one_that_imports_it_back() -> None:
    graph = import_graph(PACKAGE_DIR)
    assert "sandbox_memory.runtime.facade" in graph  # the graph covers subpackages
    assert "sandbox_memory.runtime" in graph["sandbox_memory._sdk"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root / "pkg"


def test_an_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from .b import thing\n",
            "b.py": """
                thing = 1

                def later():
                    from . import a
                    return a
            """,
        },
    )
    assert find_cycle(import_graph(pkg)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_imports_for_type_checkers_close_a_cycle_too(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from .b import thing\n",
            "b.py": """
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from .a import other
                else:
                    import json
                thing = 1
            """,
        },
    )
    assert find_cycle(import_graph(pkg)) == ["pkg.a", "pkg.b", "pkg.a"]
    runtime_only = import_graph(pkg, typing=False)
    assert runtime_only["pkg.b"] == set() and find_cycle(runtime_only) is None


def test_a_subpackage_init_on_the_way_counts(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "from .sub.part import x\n",  # runs sub/__init__.py first
            "sub/__init__.py": "from .top import y\n",
            "sub/part.py": "x = 1\n",
            "sub/top.py": "from ..low import z\n",
        },
    )
    graph = import_graph(pkg)
    assert "pkg.sub" in graph["pkg.low"]
    assert "pkg.sub" not in graph["pkg.sub.top"]  # its own package is already importing
    assert find_cycle(graph) == ["pkg.low", "pkg.sub", "pkg.sub.top", "pkg.low"]


def package_graph(graph: dict[str, set[str]], top: str) -> dict[str, set[str]]:
    """The subpackages of ``top`` (``top.record``, ``top.stores``, ...) and which of them each
    one's modules import; the modules at ``top``'s root are left out (shared ground and doors
    alike: see docs/code-map.md)."""

    def package_of(module: str) -> str | None:
        parts = module.split(".")
        if len(parts) < 2 or parts[0] != top:
            return None
        name = ".".join(parts[:2])
        return name if name in graph and any(m.startswith(name + ".") for m in graph) else None

    packages: dict[str, set[str]] = {}
    for module, deps in graph.items():
        here = package_of(module)
        if here is None:
            continue
        reached = packages.setdefault(here, set())
        for dep in deps:
            there = package_of(dep)
            if there is not None and there != here:
                reached.add(there)
    return packages


def test_no_package_imports_one_that_imports_it_back() -> None:
    # Each step, store and door in a package of its own reaches the others one way: a package
    # that holds two layers (a step's state and the facade over every step) shows up here.
    packages = package_graph(import_graph(PACKAGE_DIR), "sandbox_memory")
    assert {"sandbox_memory.record", "sandbox_memory.stores"} <= set(packages)
    assert "sandbox_memory.stores" in packages["sandbox_memory.record"]
    both = sorted(
        f"{a} <-> {b}"
        for a, reached in packages.items()
        for b in reached
        if a < b and a in packages[b]
    )
    assert both == []


def test_two_packages_importing_each_other_are_found(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from ..high.b import g\n",
            "high/__init__.py": "",
            "high/b.py": "from ..low.c import h\n",
            "low/c.py": "h = 1\n",
        },
    )
    graph = import_graph(pkg)
    assert find_cycle(graph) is None  # no module circle: a.py -> b.py -> c.py
    assert package_graph(graph, "pkg") == {"pkg.low": {"pkg.high"}, "pkg.high": {"pkg.low"}}
