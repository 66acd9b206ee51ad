"""The layout's promises: no import cycles among the project's modules (imports inside functions included), and
the method and the games import neither Ray nor vLLM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .import_graph import find_cycles, import_graph

ROOT = Path(__file__).resolve().parents[2]


def test_the_project_has_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(ROOT, ["strat", "games"]))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import thing\n",
        "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
        "pkg/c.py": "import pkg.a\n",
    })
    assert find_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_type_checking_imports_and_acyclic_packages_pass(tmp_path: Path) -> None:
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "from pkg import a\nfrom .a import TYPE_CHECKING\n",
    })
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.b"] == {"pkg", "pkg.a"}
    assert graph["pkg.a"] == set()
    assert find_cycles(graph) == []


def test_the_method_and_the_games_import_neither_ray_nor_vllm() -> None:
    modules = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "strat" / "algorithm").glob("*.py")
    )
    assert "strat.algorithm.advantage" in modules and "strat.algorithm.reasoning" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {[*modules, 'games', 'games.opponents', 'games.registry']!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'vllm')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_default_comparator_actor_starts_without_torch() -> None:
    """The comparator actor's module (token-F1 agreement, the default) imports neither torch nor transformers: each
    costs seconds of every run's start on a small CPU box; the embedding and judge models import them when built."""
    code = ("import sys\nimport strat.train.comparator_actor\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'vllm'}))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
