"""The production packages (those pyproject.toml ships) never import the tests' harnesses
(`tests`, `tests.support`) or the benchmark scripts (`scripts`): not by an import
statement, not through importlib, and not as a `python -m` child process."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("tests", "scripts")


def production_packages() -> list[str]:
    """The top-level packages the wheel ships (`tool.setuptools.packages.find.include`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.rstrip("*").rstrip(".") for pattern in include})


def outside(name: str) -> bool:
    return name.split(".")[0] in OUTSIDE


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in `tree`: statements, importlib.import_module or
    __import__ of a literal name, and `-m MODULE` in a literal command list."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and literal(node.args[0]):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
        elif isinstance(node, ast.List | ast.Tuple):
            words = node.elts
            found += [
                (node.lineno, after.value)
                for flag, after in zip(words, words[1:], strict=False)
                if literal(flag) and flag.value == "-m" and literal(after)
            ]
    return found


def literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("import tests.support.ft_drill", ["tests.support.ft_drill"]),
        ("from scripts.bench import ft_bench", ["scripts.bench"]),
        ("from . import tests", []),  # relative: a module of the package itself
        ("importlib.import_module('tests.support')", ["tests.support"]),
        ("cmd = [sys.executable, '-m', 'tests.support.x']", ["tests.support.x"]),
        ("import testsuite, scriptsy", []),
    ],
)  # fmt: skip
def test_imports_are_found(code, names):
    assert [name for _, name in imported(ast.parse(code)) if outside(name)] == names


def test_no_production_package_imports_tests_or_scripts():
    packages = production_packages()
    assert {"driver", "runner", "warden", "observability", "catalog"} <= set(packages)
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, name in imported(ast.parse(path.read_text(), str(path)))
        if outside(name)
    ]
    assert not found, "\n".join(found)
