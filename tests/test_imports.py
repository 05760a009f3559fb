"""No import circle in the project (issue 16), counting the imports inside functions too: a deferred import that
closes a circle (``from .schema import files_in  # the schema imports this module``) hides a layering fault
that the next module-level import turns into an ImportError."""

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ehrxqa_pipeline", "assets", "resources")


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Each module of ``packages`` (below ``root``) -> the modules of those packages it imports anywhere in its
    file. An import of a name resolves to the longest module prefix that exists (``from a.b import c`` is a.b.c
    when c is a module, else a.b). Imports of a module's own enclosing packages are left out: Python runs a
    package's ``__init__`` before any of its modules in any case."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package if node.level else ""
                base = ".".join(x for x in (base, node.module or "") if x)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            targets |= {m for m in map(resolve, names) if m and m != module and not module.startswith(m + ".")}
        graph[module] = targets
    return graph


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (its modules, the first repeated at the end), or [] when there is none."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        return list(reversed(err.args[1]))
    return []


def test_the_project_has_no_import_circle_even_through_imports_inside_functions():
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 150 and graph["ehrxqa_pipeline.sources.layout"] >= {"ehrxqa_pipeline.sources.schema"}
    assert circle(graph) == []


@pytest.mark.parametrize("deferred", [True, False])
def test_a_planted_circle_is_found_at_module_level_or_inside_a_function(tmp_path, deferred):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")  # a package importing its module: no circle
    (pkg / "a.py").write_text("from pkg.sub.b import f\n")
    body = "    from ..a import f\n" if deferred else ""
    (pkg / "sub" / "b.py").write_text(("" if deferred else "from pkg import a\n") + f"def f():\n{body}    pass\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.a": {"pkg.sub.b"}, "pkg.sub": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.a"}}
    assert circle(graph) in (["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.sub.b", "pkg.a", "pkg.sub.b"])
    (pkg / "sub" / "b.py").write_text("def f():\n    pass\n")
    assert circle(import_graph(tmp_path, ("pkg",))) == []
