"""The .pyi stub of the native module lists exactly what the module has."""

import ast
import os

import strata
from strata import _native


def stub_names():
    path = os.path.join(os.path.dirname(strata.__file__), "_native.pyi")
    tree = ast.parse(open(path).read())
    top, methods = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            methods[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
    return top, methods


def test_stub_matches_native_module():
    top, methods = stub_names()
    native_top = {n for n in dir(_native) if not n.startswith("_")} | {"__version__"}
    assert top - {"_Bytes", "_Tensor"} == native_top
    for cls in ("Store", "RemoteStore"):
        native = {n for n in dir(getattr(_native, cls)) if not n.startswith("_")} | {"__init__"}
        assert methods[cls] == native, cls
