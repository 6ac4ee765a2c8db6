"""The package's shape: no import circles (lazy imports inside functions and imports by name, importlib.import_module
with a literal, count too), data/ never imports the grid, no module grows past ~450 lines, few modules loose at the
top, and the README's layout block names the package's folders as they are. A newcomer can then read any module
knowing only what it imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCES / "layerwise_nmt"
MAX_LINES = 450


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        found[".".join(path.relative_to(SOURCES).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports anywhere in its text (relative imports resolved)."""
    known = modules()

    def owner(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
                target = ".".join(filter(None, [base, node.module]))
                deps.update(f"{target}.{a.name}" if f"{target}.{a.name}" in known else owner(target)
                            for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(owner(a.name) for a in node.names)
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) ==
                  "import_module" and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)):
                deps.add(owner(node.args[0].value))
        graph[name] = {d for d in deps if d.startswith("layerwise_nmt") and d != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def walk(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                walk(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            walk(v)
    return out


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_data_never_imports_the_grid():
    graph = import_graph()
    offenders = {m: sorted(d for d in deps if d.startswith("layerwise_nmt.grid"))
                 for m, deps in graph.items() if m.startswith("layerwise_nmt.data")}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_no_module_is_over_the_size_a_reader_takes_in():
    sizes = {str(p.relative_to(SOURCES)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


# the package's entry points and the settings every stage shares; everything else lives in a folder of its stage
LOOSE_AT_THE_TOP = {"__init__", "__main__", "settings", "checkout"}


def test_few_modules_are_loose_at_the_top():
    loose = {p.stem for p in PACKAGE.glob("*.py")}
    assert loose <= LOOSE_AT_THE_TOP, f"put {sorted(loose - LOOSE_AT_THE_TOP)} in the folder of its stage"


def layout_block() -> str:
    readme = (SOURCES.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    return block.split("src/layerwise_nmt/", 1)[1].split("\ntests/", 1)[0]


def test_the_readme_layout_names_every_folder_and_module_of_the_package():
    """Each folder and each module of the package is named in the README's layout block, under its folder, and the
    block names no folder that does not exist."""
    block = layout_block()
    sections = {}
    for line in block.splitlines()[1:]:
        head = line[2:].split(" ", 1)[0] if line.startswith("  ") and not line.startswith("   ") else None
        if head:
            current = head
            sections[current] = line
        else:
            sections[current] += " " + line
    folders = {p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    named = {k for k in sections if k.endswith("/")}
    assert named == folders
    for folder in folders:
        modules = {p.stem for p in (PACKAGE / folder).glob("*.py")} - {"__init__", "__main__"}
        text = re.sub(r"[,;:()+\[\]]", " ", sections[folder])
        missing = {m for m in modules if m not in text.split() and f"{m}.py" not in text}
        assert not missing, f"the README's layout block does not name {folder}{sorted(missing)}"
    for module in {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}:
        assert f"{module}.py" in block, f"the README's layout block does not name {module}.py"
