"""Structure facts that hold and must keep holding (benchmarks/structure.py reads them from the
source): no private name is imported from another module, and no two modules import each other,
lazily or not."""

import importlib.util

from tests.conftest import SAMPLES


def _structure():
    spec = importlib.util.spec_from_file_location("structure", SAMPLES.parent / "benchmarks" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_private_name_is_imported_across_modules_and_no_import_cycle():
    s = _structure()
    known = s.modules()
    private, graph = [], {}
    for name, path in known.items():
        for target, taken in s.imports(path, name, known):
            graph.setdefault(name, set()).add(target)
            private += [f"{name}: {target}.{t}" for t in taken if t.startswith("_") and not t.startswith("__")]
    graph = {k: {v for v in vs if v != k and not v.startswith(k + ".") and not k.startswith(v + ".")}
             for k, vs in graph.items()}
    assert private == [] and s.cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle():
    # A cycle made through a function-level import is found too (what the redesign removed).
    assert _structure().cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
