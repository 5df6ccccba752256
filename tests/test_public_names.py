"""The public names are one list: ``_WHERE`` in ``sandbox_memory/__init__.py``.

``__all__`` is derived from it; the imports under ``if TYPE_CHECKING:`` (what a type checker
sees for ``from sandbox_memory import X``) must name the same modules and the same names, and
every name must resolve to the object its module defines.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import sandbox_memory
from sandbox_memory import errors

INIT = Path(sandbox_memory.__file__)


def _typed_imports() -> dict[str, str]:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.level == 1, ast.dump(stmt)
                for alias in stmt.names:
                    found[alias.asname or alias.name] = str(stmt.module)
    return found


def test_all_is_the_table_of_public_names() -> None:
    assert sandbox_memory.__all__ == sorted(sandbox_memory._WHERE)


def test_the_typed_imports_name_the_same_modules_as_the_table() -> None:
    assert _typed_imports() == sandbox_memory._WHERE


@pytest.mark.parametrize("name", sorted(sandbox_memory._WHERE))
def test_every_public_name_resolves_to_its_modules_object(name: str) -> None:
    module = importlib.import_module(f"sandbox_memory.{sandbox_memory._WHERE[name]}")
    assert getattr(sandbox_memory, name) is getattr(module, name)


def test_every_error_a_caller_can_meet_is_public() -> None:
    raised = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.SandboxMemoryError)
    }
    assert raised <= set(sandbox_memory.__all__), raised - set(sandbox_memory.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        getattr(sandbox_memory, "no_such_name")  # noqa: B009
