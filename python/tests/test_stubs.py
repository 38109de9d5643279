"""The type stubs (_core.pyi) describe exactly the extension's public API: every public
function and class member of rlx._core has a stub entry, and every stub entry exists."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import rlx
from rlx import _core

STUB = Path(__file__).resolve().parents[1] / "rlx" / "_core.pyi"


def stub_names():
    tree = ast.parse(STUB.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return top, members


def test_module_level_names_match():
    top, _ = stub_names()
    runtime = {n for n in dir(_core) if not n.startswith("__")}
    assert runtime - top == set(), f"missing from _core.pyi: {sorted(runtime - top)}"
    assert top - runtime == set(), f"in _core.pyi but not in the module: {sorted(top - runtime)}"


def test_class_members_match():
    _, members = stub_names()
    for cls_name, stubbed in members.items():
        if cls_name == "Error":
            continue
        cls = getattr(_core, cls_name)
        runtime = {n for n, _ in inspect.getmembers(cls)
                   if not n.startswith("_") or n in {"__getitem__", "__dlpack__", "__dlpack_device__", "__call__"}}
        stubbed_public = {n for n in stubbed if not n.startswith("_") or n in runtime}
        assert runtime - stubbed_public == set(), f"{cls_name}: not stubbed {sorted(runtime - stubbed_public)}"
        assert stubbed_public - runtime == set(), f"{cls_name}: stale stubs {sorted(stubbed_public - runtime)}"


def test_package_reexports():
    for name in rlx.__all__:
        assert hasattr(rlx, name), name
