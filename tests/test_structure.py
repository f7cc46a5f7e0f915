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
    private, graph = s.module_graph(s.modules())
    assert private == [] and s.cycles(graph) == []
    assert "tuner.driver" in graph and "constraints" in {t.split(".")[0] for vs in graph.values() for t in vs}


def test_the_module_graph_finds_a_private_import_made_inside_a_function(tmp_path):
    s = _structure()
    (tmp_path / "a.py").write_text("from b import public\n\ndef f():\n    from b import _hidden\n")
    (tmp_path / "b.py").write_text("import a\n\ndef public():\n    pass\n\ndef _hidden():\n    pass\n")
    private, graph = s.module_graph({"a": tmp_path / "a.py", "b": tmp_path / "b.py"})
    assert private == ["a imports b._hidden"] and graph == {"a": {"b"}, "b": {"a"}}
    assert s.cycles(graph) == [["a", "b"]]


def test_the_cycle_finder_finds_a_lazy_cycle():
    # A cycle made through a function-level import is found too (what the redesign removed).
    assert _structure().cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_folder_graph_joins_modules_by_folder_and_finds_a_cycle_between_folders():
    s = _structure()
    graph = {"tuner.build.compile": {"tuner.evaluation.measure", "tuner.build.manifest"},
             "tuner.evaluation.passes": {"tuner.ranking"}, "tuner.ranking": {"tuner.build.compile"},
             "tuner.api": {"pipelines.base"}, "pipelines.base": {"constraints.knobs"}, "tuner": {"tuner.api"}}
    folders = s.folder_graph(graph)
    # Edges inside a folder are dropped; tuner's own __init__ is no node.
    assert folders == {"tuner.build": {"tuner.evaluation"}, "tuner.evaluation": {"tuner.ranking"},
                       "tuner.ranking": {"tuner.build"}, "tuner.api": {"pipelines"}, "pipelines": {"constraints"}}
    assert s.cycles(folders) == [["tuner.build", "tuner.evaluation", "tuner.ranking"]]


def _graph(s):
    known = s.modules()
    return {name: {t for t, _ in s.imports(path, name, known)} for name, path in known.items()}


def test_the_folders_of_the_flow_import_each_other_without_a_cycle():
    s = _structure()
    folders = s.folder_graph(_graph(s))
    assert s.cycles(folders) == [], s.cycles(folders)


def test_the_core_imports_nothing_of_the_flows_folders():
    # tuner.core holds the shared types (results, comparison, settings, the built record); every
    # step imports it, and it imports only itself and tuner.errors (issue 37).
    s = _structure()
    outside = {f"{name} -> {target}" for name, targets in _graph(s).items() if name.startswith("tuner.core")
               for target in targets if not target.startswith("tuner.core") and target != "tuner.errors"}
    assert outside == set()
