"""The layer order at folder level: a folder imports only folders on layers below its own, so that folders on one
layer never import each other (imports inside functions counted, those under `TYPE_CHECKING` left out). The order is
the numbered list under "The layer order" in docs/design.md, read from there: one list, in one place."""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from .import_graph import import_graph

ROOT = Path(__file__).resolve().parents[2]
SPLIT = {"strat"}
"""Packages whose subpackages and modules are folders of their own; any other package (`games`) is one folder."""


def folder_of(module: str, split: Collection[str] = SPLIT) -> str:
    """The folder of a module: `strat.<child>` for each subpackage or module of `strat` (`strat` alone for the package
    itself), the top-level package otherwise."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in split and len(parts) > 1 else parts[0]


def design_layers(text: str) -> list[list[str]]:
    """The folders of each layer, bottom up, from the numbered list under "The layer order"."""
    section = text.split("### The layer order", 1)[1].split("\n#", 1)[0]
    layers: list[list[str]] = []
    for line in section.splitlines():
        match = re.match(r"(\d+)\. ((?:`[\w.]+`, )*`[\w.]+`):", line)
        if match:
            assert int(match[1]) == len(layers) + 1, f"layer {match[1]} is out of sequence"
            layers.append(re.findall(r"`([\w.]+)`", match[2]))
    return layers


def layer_violations(graph: Mapping[str, set[str]], layers: Sequence[Sequence[str]],
                     split: Collection[str] = SPLIT) -> list[str]:
    """Every import from a folder to one on its own layer or above, every folder on no layer, every layer entry that is
    no folder of the source; an empty list when the source follows the order."""
    rank = {folder: index for index, folders in enumerate(layers) for folder in folders}
    present = {folder_of(module, split) for module in graph}
    problems = [f"{folder} is on no layer" for folder in sorted(present - set(rank))]
    problems += [f"{folder} is on layer {rank[folder] + 1} but not in the source"
                 for folder in sorted(set(rank) - present)]
    for module, imported in sorted(graph.items()):
        source = folder_of(module, split)
        for target in sorted(imported):
            folder = folder_of(target, split)
            if folder != source and source in rank and folder in rank and rank[folder] >= rank[source]:
                problems.append(f"{module} -> {target}: {source} (layer {rank[source] + 1}) imports {folder}"
                                f" (layer {rank[folder] + 1})")
    return problems


def test_design_md_lists_every_folder_once() -> None:
    layers = design_layers((ROOT / "docs" / "design.md").read_text())
    listed = [folder for folders in layers for folder in folders]
    assert len(layers) >= 10 and "strat.algorithm" in listed and "games" in listed
    assert len(listed) == len(set(listed)), "a folder listed twice"


def test_folders_import_only_folders_below() -> None:
    layers = design_layers((ROOT / "docs" / "design.md").read_text())
    problems = layer_violations(import_graph(ROOT, ["strat", "games"]), layers)
    assert problems == [], "\n".join(problems)


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _three_folders(root: Path, ring: bool) -> dict[str, set[str]]:
    """`pkg/a`, `pkg/b`, `pkg/c`: a imports b, b imports c, each inside a function; with `ring`, c imports a too."""
    _package(root, {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/x.py": "def f():\n    from pkg.b import y\n    return y\n",
        "pkg/b/__init__.py": "",
        "pkg/b/y.py": "def g():\n    from pkg.c import z\n    return z\n",
        "pkg/c/__init__.py": "",
        "pkg/c/z.py": ("def h():\n    from pkg.a import x\n    return x\n" if ring else
                       "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n"),
    })
    return import_graph(root, ["pkg"])


def test_folders_in_a_ring_fail_in_every_order(tmp_path: Path) -> None:
    graph = _three_folders(tmp_path, ring=True)
    for order in itertools.permutations(["pkg.a", "pkg.b", "pkg.c"]):
        assert layer_violations(graph, [["pkg"], *([name] for name in order)], {"pkg"}) != [], order
    assert layer_violations(graph, [["pkg"], ["pkg.c"], ["pkg.b"], ["pkg.a"]], {"pkg"}) == [
        "pkg.c.z -> pkg.a: pkg.c (layer 2) imports pkg.a (layer 4)",  # `from pkg.a import x`: the package, and x
        "pkg.c.z -> pkg.a.x: pkg.c (layer 2) imports pkg.a (layer 4)"]


def test_folders_that_point_down_pass(tmp_path: Path) -> None:
    graph = _three_folders(tmp_path, ring=False)  # c's import of a is for type checking only
    assert layer_violations(graph, [["pkg"], ["pkg.c"], ["pkg.b"], ["pkg.a"]], {"pkg"}) == []
    assert layer_violations(graph, [["pkg"], ["pkg.c"], ["pkg.a", "pkg.b"]], {"pkg"}) == [
        "pkg.a.x -> pkg.b: pkg.a (layer 3) imports pkg.b (layer 3)",
        "pkg.a.x -> pkg.b.y: pkg.a (layer 3) imports pkg.b (layer 3)"]
    assert layer_violations(graph, [["pkg"], ["pkg.c"], ["pkg.b"]], {"pkg"}) == ["pkg.a is on no layer"]
