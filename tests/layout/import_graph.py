"""The import graph of the project's own packages, read from the source with `ast`: every import counts,
those inside functions included; imports under `if TYPE_CHECKING:` are left out (they never run)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_names(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of `packages` under `root`."""
    names = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join(parts)] = path
    return names


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The project modules that module `name` (at `path`) imports, at any depth of its code."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # `from package import module` imports the module; `from module import name` only the module.
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            # The deepest project module the target names (an attribute import resolves to its module).
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    known = module_names(root, packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules, each as one cycle through it (Tarjan's algorithm,
    then a path back to the start), sorted; an empty list when the graph is acyclic."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_cycle_in(graph, component) for component in components)


def _cycle_in(graph: Mapping[str, set[str]], component: set[str]) -> list[str]:
    """A cycle through the smallest member of `component` (breadth-first, so the shortest one)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")
