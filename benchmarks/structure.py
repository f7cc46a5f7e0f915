"""The structure facts of the code, read from its source with `ast` (nothing imported):

    python benchmarks/structure.py            # prints them; exits 1 where a limit is passed

- modules at tuner/'s top level (limit 12) and modules over 400 lines;
- private names (a leading underscore) imported from another module, lazily or not;
- import cycles between modules, lazy (function-level) imports included, and between the flow's
  folders (each folder of tuner/ and each of its top-level modules one node; pipelines and
  constraints one node each);
- public functions with more than 8 parameters (self and *args/**kwargs not counted; the click
  commands of tuner/cli/ may stay wide).

The limits are the redesign's goals; where the code does not meet one yet, this says by how much."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("tuner", "pipelines", "constraints")
TOP_LEVEL_LIMIT, LINES_LIMIT, PARAMS_LIMIT = 12, 400, 8


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, name: str, known: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import of ours in the module."""
    found = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base in known:
                taken = [a.name for a in node.names]
                submodules = [f"{base}.{t}" for t in taken if f"{base}.{t}" in known]
                found.append((base, [t for t in taken if f"{base}.{t}" not in known]))
                found += [(m, []) for m in submodules]
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name in known]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def folder_of(name: str) -> str:
    """The node a module belongs to in the folder graph: tuner.X for anything under tuner/X (a
    folder or a top-level module), the package for pipelines and constraints, tuner for tuner's
    own __init__."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "tuner" else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with each module replaced by its folder (edges inside a folder dropped)."""
    folders: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = folder_of(source), folder_of(target)
            if a != b and "tuner" not in (a, b):
                folders.setdefault(a, set()).add(b)
    return folders


def wide_functions(path: Path, name: str) -> list[str]:
    wide = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            args = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs if a.arg not in ("self", "cls")]
            if len(args) > PARAMS_LIMIT:
                wide.append(f"{name}.{node.name}: {len(args)} parameters")
    return wide


def module_graph(known: dict[str, Path]) -> tuple[list[str], dict[str, set[str]]]:
    """The private names imported across the `known` modules ("a imports b._x"), and the import
    graph between them (a package's __init__ importing its own submodules is not an edge of the
    design)."""
    private, graph = [], {}
    for name, path in known.items():
        for target, taken in imports(path, name, known):
            if target != name:
                graph.setdefault(name, set()).add(target)
            private += [f"{name} imports {target}.{t}" for t in taken if t.startswith("_") and not t.startswith("__")]
    return private, {k: {v for v in vs if not v.startswith(k + ".") and not k.startswith(v + ".")}
                     for k, vs in graph.items()}


def main() -> int:
    known = modules()
    top = [n for n in known if n.startswith("tuner.") and n.count(".") == 1 and not (known[n].name == "__init__.py")]
    long = [f"{n}: {len(p.read_text().splitlines())} lines" for n, p in known.items()
            if len(p.read_text().splitlines()) > LINES_LIMIT]
    private, graph = module_graph(known)
    wide = [w for name, path in known.items() if not name.startswith("tuner.cli") for w in wide_functions(path, name)]
    found = cycles(graph)
    folder_cycles = cycles(folder_graph(graph))
    report = [
        (f"modules at tuner/'s top level: {len(top)} (limit {TOP_LEVEL_LIMIT})", len(top) > TOP_LEVEL_LIMIT, []),
        (f"modules over {LINES_LIMIT} lines: {len(long)}", bool(long), long),
        (f"private names imported across modules: {len(private)}", bool(private), private),
        (f"import cycles: {len(found)}", bool(found), [" <-> ".join(c) for c in found]),
        (f"import cycles between folders: {len(folder_cycles)}", bool(folder_cycles),
         [" <-> ".join(c) for c in folder_cycles]),
        (f"public functions over {PARAMS_LIMIT} parameters: {len(wide)}", bool(wide), wide),
    ]
    failed = False
    for line, bad, details in report:
        print(("NOT MET  " if bad else "met      ") + line)
        for d in details:
            print(f"           {d}")
        failed |= bad
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
