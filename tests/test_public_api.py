"""The public API: what `tokenport` exports, that it is documented, and that importing it is cheap.

The root resolves its names lazily (DESIGN.md's conventions): ``import tokenport`` loads no room
and no numba; each import check runs in a fresh interpreter, since this one has loaded everything.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pickle
import pkgutil
import subprocess
import sys
import types
import typing

import numpy as np
import pytest

import tokenport as tp

PACKAGES = ["tokenport"] + [f"tokenport.{m.name}" for m in pkgutil.iter_modules(tp.__path__) if m.ispkg]


def fresh(code: str) -> typing.Any:
    """Run `code` in a new interpreter; the JSON of its last printed line."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after running `statement`."""
    return set(fresh(f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"))


def rooms(modules: set[str]) -> set[str]:
    return {name.split(".")[1] for name in modules if name.startswith("tokenport.")}


def test_all_is_sorted_unique_and_exactly_what_the_root_exports():
    assert tp.__all__ == sorted(set(tp.__all__))
    for name in tp.__all__:
        getattr(tp, name)  # resolve every lazy name
    exported = {
        name for name, value in vars(tp).items() if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert exported == set(tp.__all__) - {"__version__"}
    assert set(tp.__all__) <= set(dir(tp))


def test_names_resolve_to_the_objects_of_their_rooms():
    from tokenport.corpus import prepare
    from tokenport.indexed import IndexedDataset, merge, verify

    assert tp.prepare is prepare and callable(tp.prepare)
    assert tp.IndexedDataset is IndexedDataset
    assert tp.merge is merge and tp.verify is verify
    assert issubclass(tp.StorageError, tp.TokenportError)


def test_an_unknown_name_raises_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no attribute 'prepair'"):
        tp.prepair  # noqa: B018
    assert not hasattr(tp, "prepair")


def test_dir_lists_the_public_names_before_any_is_used():
    assert set(fresh("import json, tokenport\nprint(json.dumps(dir(tokenport)))")) >= set(tp.__all__)


def test_subpackage_all_lists_name_only_what_the_package_holds():
    for package in PACKAGES:
        module = importlib.import_module(package)
        names = getattr(module, "__all__", [])
        assert len(names) == len(set(names)), package
        for name in names:
            assert hasattr(module, name), f"{package}.__all__ names {name!r}, which it does not hold"
            assert not isinstance(getattr(module, name), types.ModuleType), f"{package}.__all__ lists module {name}"


def test_no_lazy_export_is_also_a_submodule_of_its_package():
    for package in PACKAGES:
        module = importlib.import_module(package)
        if "_EXPORTS" in vars(module):  # lazy: a submodule of the same name would shadow the object once imported
            submodules = {m.name for m in pkgutil.iter_modules(module.__path__)}
            assert not set(module._EXPORTS) & submodules, package


def test_type_checkers_see_the_same_names_as_the_lazy_exports():
    for package in PACKAGES:
        module = importlib.import_module(package)
        if "_EXPORTS" not in vars(module):
            continue
        tree = ast.parse(inspect.getsource(module))
        seen = {
            alias.name: "." * node.level + (node.module or "")
            for block in tree.body
            if isinstance(block, ast.If) and ast.unparse(block.test) == "typing.TYPE_CHECKING"
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert seen == module._EXPORTS, f"{package}: the typing.TYPE_CHECKING imports and _EXPORTS disagree"


def test_lazy_subpackages_load_only_the_module_asked_for():
    modules = loaded_after(
        "from tokenport.sampling.collate import PaddingCollator\nfrom tokenport.samples import PackedDataset"
    )
    assert "tokenport.sampling.pretraining" not in modules and "tokenport.samples.gpt" not in modules
    assert "tokenport.blend" not in modules


def undocumented(obj: object) -> bool:
    """True when `obj` has no docstring of its own (a dataclass's generated signature does not count)."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return not doc or not doc.strip() or (inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("))


def test_every_public_callable_is_documented():
    missing = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if callable(obj) and typing.get_origin(obj) is None and undocumented(obj):
                missing.append(f"{package}.{name}")
    for name in tp.__all__:
        cls = getattr(tp, name)
        if not inspect.isclass(cls) or issubclass(cls, Exception):
            continue
        for member, value in vars(cls).items():
            if member.startswith("_") or not (
                callable(value) or isinstance(value, (property, classmethod, staticmethod))
            ):
                continue
            if not inspect.getdoc(getattr(cls, member) if not isinstance(value, property) else value):
                missing.append(f"tokenport.{name}.{member}")
    assert not missing, f"public callables without a docstring: {missing}"


def test_import_tokenport_loads_no_room_and_no_numba():
    modules = loaded_after("import tokenport")
    assert rooms(modules) <= {"_jit", "_lazy", "_version"}  # _jit: the numba start-up hook, no numba
    assert "numba" not in modules and "numpy" not in modules


def test_import_packing_loads_only_what_packing_needs():
    modules = loaded_after("import tokenport.packing")
    assert rooms(modules) <= {"packing", "rng", "_checks", "errors", "_jit", "_lazy", "_version"}
    assert "torch" not in modules


@pytest.mark.parametrize("package", ["tokenport.dock", "tokenport.corpus", "tokenport.storage"])
def test_importing_a_room_loads_none_of_its_modules_until_a_name_is_used(package):
    modules = loaded_after(f"import {package}")
    assert "numba" not in modules
    assert not {name for name in modules if name.startswith(package + ".")}


def test_using_a_name_loads_its_room_only():
    modules = loaded_after("import tokenport\ntokenport.IndexedDataset")
    assert "indexed" in rooms(modules)
    assert not rooms(modules) & {"corpus", "builder", "blend", "dock", "samples", "sampling", "demo"}


def test_cli_help_loads_no_numba_and_no_room_it_does_not_show():
    modules = loaded_after("from tokenport.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert "numba" not in modules and "torch" not in modules
    assert not rooms(modules) & {"corpus", "builder", "blend", "dock", "samples", "sampling", "demo", "indexed"}


def test_public_objects_pickle_into_a_fresh_interpreter(tmp_path):
    identity = tp.load_tokenizer("byte").identity()
    with tp.IndexedDatasetWriter(tmp_path / "a", tokenizer=identity) as writer:
        writer.add_document([1, 2, 3, 256])
        writer.add_document([4, 5, 256])
    payload = pickle.dumps(
        {
            "names": [getattr(tp, name) for name in tp.__all__ if name != "__version__"],
            "store": tp.IndexedDataset(tmp_path / "a"),
            "error": tp.ConfigError("seq_length must be positive"),
        }
    )
    code = (
        "import json, pickle, sys\n"
        f"d = pickle.loads({payload!r})\n"
        "print(json.dumps([[f'{o.__module__}.{o.__qualname__}' for o in d['names']],"
        " [d['store'][k].tolist() for k in range(len(d['store']))], type(d['error']).__name__, str(d['error'])]))"
    )
    names, documents, kind, message = fresh(code)
    assert names == [
        f"{o.__module__}.{o.__qualname__}" for o in (getattr(tp, n) for n in tp.__all__ if n != "__version__")
    ]
    assert documents == [[1, 2, 3, 256], [4, 5, 256]]
    assert (kind, message) == ("ConfigError", "seq_length must be positive")
    assert np.array_equal(pickle.loads(payload)["store"][1], [4, 5, 256])
