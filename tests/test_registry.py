"""The one registry style of every extension point, and plugins found through entry points."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests._support.plugins import write_plugin
from tokenport._registry import Registry
from tokenport.errors import ConfigError


class Thing:
    pass


def fresh() -> Registry[type]:
    return Registry("thing", lambda x: isinstance(x, type) and issubclass(x, Thing), "a Thing subclass")


def test_register_get_and_refusals_change_nothing():
    reg = fresh()

    class A(Thing):
        pass

    class B(Thing):
        pass

    reg.register("a", A)
    reg.register("a", A)  # the same object again: a no-op
    for name, item in [("a", B), ("", B), ("no spaces", B), ("b", object), ("b", 3)]:
        with pytest.raises(ConfigError):
            reg.register(name, item)
    assert reg.items() == (("a", A),)
    assert reg.get("a") is A
    with pytest.raises(ConfigError, match=r"unknown thing 'zzz' \(known: a\)"):
        reg.get("zzz", where="spec.json")


def test_added_leaves_out_built_ins():
    reg = fresh()

    class A(Thing):
        pass

    class B(Thing):
        pass

    reg.register("a", A)
    reg.seal_built_ins()
    reg.register("b", B)
    assert reg.added() == (("b", B),)
    assert list(reg) == ["a", "b"] and "b" in reg


def _plugin_dir(tmp_path, body: str) -> str:
    return write_plugin(tmp_path, "toy_plugin", body, name="toy")


def _run(path: str, code: str) -> subprocess.CompletedProcess:
    env_path = path
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin"}
    )


def test_a_missing_name_loads_the_plugins(tmp_path):
    path = _plugin_dir(
        tmp_path,
        """
        from tokenport._registry import Registry
        import tokenport._registry as r
        r.TOY = Registry("toy", lambda x: True, "anything")
        r.TOY.register("hello", "world")
        """,
    )
    code = (
        "import tokenport._registry as r\n"
        "reg = r.Registry('toy', lambda x: True, 'anything')\n"
        "try:\n    reg.get('hello')\nexcept Exception as e:\n    print(type(e).__name__)\n"
        "print(r.TOY.get('hello'))\n"
    )
    out = _run(path + ":" + ":".join(sys.path[1:]), code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ConfigError", "world"]


def test_a_broken_plugin_is_a_config_error_naming_it(tmp_path):
    path = _plugin_dir(tmp_path, "raise RuntimeError('boom')\n")
    code = (
        "from tokenport._registry import Registry\n"
        "try:\n    Registry('toy', lambda x: True, 'anything').get('x')\n"
        "except Exception as e:\n    print(type(e).__name__, str(e))\n"
    )
    out = _run(path + ":" + ":".join(sys.path[1:]), code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ConfigError tokenport plugin 'toy' (toy_plugin) failed to load: RuntimeError: boom")


def test_a_broken_plugin_stops_no_other_and_is_named_at_every_later_lookup(tmp_path):
    write_plugin(tmp_path, "broken_plugin", "raise RuntimeError('boom')\n", name="broken")
    good = """
        import tokenport._registry as r
        r.GOOD = r.Registry("toy", lambda x: True, "anything")
        r.GOOD.register("hello", "world")
        """
    write_plugin(tmp_path, "good_plugin", good, name="good")
    code = (
        "import tokenport._registry as r\n"
        "reg = r.Registry('toy', lambda x: True, 'anything')\n"
        "for _ in range(2):\n"
        "    try:\n        reg.get('missing')\n"
        "    except Exception as e:\n        print(type(e).__name__, 'broken_plugin' in str(e))\n"
        "print(r.GOOD.get('hello'))\n"
    )
    out = _run(str(tmp_path) + ":" + ":".join(sys.path[1:]), code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["ConfigError True", "ConfigError True", "world"]
