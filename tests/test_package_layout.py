"""The package's shape: its folders form a one-way stack in the order CONTRIBUTING.md's layout block lists them
(a folder imports only those listed before it), counting every import: top-level ones, lazy ones inside functions,
importlib.import_module with a literal, and a module named in a string that a loader resolves ("module:function",
`python -m module`); no import circles between modules either; data/ never imports the grid; no module grows past
~450 lines, few modules loose at the top, and the layout block names the package's folders as they are. A
newcomer can then read any module knowing only what it imports, and change a folder knowing what can break above it."""

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


# A package module named in a string: "layerwise_nmt.x.y", "layerwise_nmt.x.y:function" (an entry point a loader
# resolves) or an element of a `python -m layerwise_nmt.x.y` command line.
NAMED_MODULE = re.compile(r"(layerwise_nmt(?:\.\w+)+)(?::\w+)?")


def import_module_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
        ):
            yield node


def import_graph(named: bool = True) -> dict[str, set[str]]:
    """Module → the package modules it imports anywhere in its text (relative imports resolved) and, with `named`,
    those it names in a string a loader resolves."""
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
                deps.update(
                    f"{target}.{a.name}" if f"{target}.{a.name}" in known else owner(target) for a in node.names
                )
            elif isinstance(node, ast.Import):
                deps.update(owner(a.name) for a in node.names)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                deps.add(owner(node.args[0].value))
            elif named and isinstance(node, ast.Constant) and isinstance(node.value, str):
                module = NAMED_MODULE.fullmatch(node.value)
                if module:
                    deps.add(owner(module.group(1)))
        graph[name] = {d for d in deps if d.startswith("layerwise_nmt") and d != name}
    return graph


def test_no_module_is_imported_by_a_name_the_guard_cannot_read():
    """import_module's argument is a literal or a plain variable (a user's module, or an entry point spelt as a literal
    where the caller names it); a name assembled in an f-string or by concatenation would hide an import."""
    hidden = [
        f"{path.relative_to(SOURCES)}:{call.lineno}"
        for path in PACKAGE.rglob("*.py")
        for call in import_module_calls(ast.parse(path.read_text()))
        if not isinstance(call.args[0], (ast.Constant, ast.Name, ast.Attribute))
    ]
    assert hidden == []


def folder_of(module: str) -> str:
    """The package's folder a module is in; "" for the modules loose at the top, but for __main__, the entry point,
    which is above every folder (it starts the CLI)."""
    parts = module.split(".")
    if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir():
        return parts[1]
    return "__main__" if parts[-1] == "__main__" else ""


def folder_graph(graph: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, deps in (import_graph() if graph is None else graph).items():
        out.setdefault(folder_of(module), set()).update(folder_of(d) for d in deps if folder_of(d) != folder_of(module))
    return out


def stack() -> list[str]:
    """The folders in the layout block's order, the bottom of the stack first; the shared modules loose at
    the top ("") below them all, the entry point (__main__) above them all."""
    return ["", *re.findall(r"^  (\w+)/", layout_block(), flags=re.M), "__main__"]


def test_folders_form_a_stack_in_the_layout_blocks_order():
    order = {folder: level for level, folder in enumerate(stack())}
    graph = import_graph()
    assert set(folder_graph(graph)) <= set(order), "a folder the layout block does not list"
    upward = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        if order[folder_of(dep)] > order[folder_of(module)]
    )
    assert upward == [], "imports going up the stack (the layout block lists the folders bottom up)"


def test_no_import_circles_between_folders():
    assert circles(folder_graph()) == []


def test_the_guard_sees_lazy_loader_and_string_imports(tmp_path, monkeypatch):
    """The forms an import hides in: inside a function, import_module with a literal, a "module:function" entry
    point and a `python -m` argument each count; a name built in an f-string is refused."""
    package = tmp_path / "layerwise_nmt"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    from ..high import b\n")
    (package / "low" / "c.py").write_text("import importlib\nimportlib.import_module('layerwise_nmt.high.b')\n")
    (package / "low" / "d.py").write_text("ENTRY = 'layerwise_nmt.high.b:run'\n")
    (package / "low" / "e.py").write_text("RUN = ['python', '-m', 'layerwise_nmt.high']\n")
    (package / "low" / "f.py").write_text("import importlib\nimportlib.import_module(f'{__package__}.x')\n")
    (package / "high" / "b.py").write_text("")
    monkeypatch.setitem(globals(), "SOURCES", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", package)
    graph = import_graph()
    assert {m: graph[f"layerwise_nmt.low.{m}"] for m in "acde"} == {
        "a": {"layerwise_nmt.high.b"},
        "c": {"layerwise_nmt.high.b"},
        "d": {"layerwise_nmt.high.b"},
        "e": {"layerwise_nmt.high"},
    }
    assert folder_graph(graph) == {"": set(), "low": {"high"}, "high": set()}
    assert circles({**folder_graph(graph), "high": {"low"}}) == [["high", "low"]]
    assert [
        call.lineno
        for call in import_module_calls(ast.parse((package / "low" / "f.py").read_text()))
        if isinstance(call.args[0], ast.JoinedStr)
    ] == [2]


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
    """Between modules, imports only: a module named in a string is loaded by another process or when it is called,
    never while the naming module is being imported (the CLI names its own entry point for the rehearsal's jobs);
    the folders' stack counts those too."""
    assert circles(import_graph(named=False)) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_data_never_imports_the_grid():
    graph = import_graph()
    offenders = {
        m: sorted(d for d in deps if d.startswith("layerwise_nmt.grid"))
        for m, deps in graph.items()
        if m.startswith("layerwise_nmt.data")
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_no_module_is_over_the_size_a_reader_takes_in():
    sizes = {str(p.relative_to(SOURCES)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


# the package's entry points and the settings every stage shares; everything else lives in a folder of its stage
LOOSE_AT_THE_TOP = {"__init__", "__main__", "settings", "job_specs", "checkout"}


def test_few_modules_are_loose_at_the_top():
    loose = {p.stem for p in PACKAGE.glob("*.py")}
    assert loose <= LOOSE_AT_THE_TOP, f"put {sorted(loose - LOOSE_AT_THE_TOP)} in the folder of its stage"


def layout_block() -> str:
    guide = (SOURCES.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = guide.split("## Layout", 1)[1].split("```", 2)[1]
    return block.split("src/layerwise_nmt/", 1)[1].split("\ntests/", 1)[0]


def test_the_layout_block_names_every_folder_and_module_of_the_package():
    """Each folder and each module of the package is named in the layout block, under its folder, and the
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
        assert not missing, f"the layout block does not name {folder}{sorted(missing)}"
    for module in {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}:
        assert f"{module}.py" in block, f"the layout block does not name {module}.py"


def test_each_layout_rule_is_spelt_once_in_grid_layout():
    """A run's model files and the results root have one spelling (grid/layout.py); the package builds their paths
    through it, so that moving one moves every use (the rules' output patterns spell them for Snakemake)."""
    spelt = re.compile(r"""/model\.pt["']|["']averaged\.pt|averaged\.pt["']|f["']results/\{(?!wildcards)""")
    found = [
        f"{path.relative_to(SOURCES)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "layout.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if spelt.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, found


def test_nothing_outside_training_imports_its_private_names():
    """The trainer's steps that benchmarks and tests drive (start_run, update_step) are public; its underscored
    helpers stay free to change."""
    imported = re.compile(r"from (?:layerwise_nmt|\.\.)\.?training(?:\.\w+)* import ([^\n]+)")
    root = SOURCES.parent
    found = []
    for path in [*root.glob("tests/*.py"), *root.glob("benchmarks/**/*.py"), *PACKAGE.rglob("*.py")]:
        if PACKAGE / "training" in path.parents:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            match = imported.search(line)
            names = [w.strip().split(" as ")[0] for w in match.group(1).strip("()").split(",")] if match else []
            poked = re.search(r"\b(?:training|loop)\._[a-z]|setattr\(\w*(?:training|loop)\w*, \"_", line)
            if any(name.startswith("_") for name in names) or poked:
                found.append(f"{path.relative_to(root)}:{n}")
    assert not found, found
