"""The library's layout keeps its promises (issue 13): layers import one way, core needs no
torch, no module or function grows past what one sitting can read."""
import ast
import pathlib
import re
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "lessonlib"
# each may import only the ones before it (course reads bench)
LAYERS = ["core", "models", "engines", "decoding", "bench", "course"]
ALLOWED = {name: set(LAYERS[: i + 1]) for i, name in enumerate(LAYERS)}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 80
DATA_TABLES = set()  # modules exempt as data tables (none today)


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "assets" not in p.parts)


def dotted(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def type_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks: imports that never run."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports(path: pathlib.Path, runtime_only: bool = False, source: str | None = None) -> set[str]:
    """The lessonlib modules ``path`` imports (module level and inside functions); with
    ``runtime_only``, leaving out the type-only ones (``if TYPE_CHECKING:``), which cannot make
    a cycle at run time."""
    out = set()
    tree = ast.parse(path.read_text() if source is None else source)
    skip = type_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lessonlib"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)  # `from lessonlib.core import tree`
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("lessonlib"))
    known = {dotted(p) for p in modules()}
    return {m for m in out if m in known}


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_importing_core_imports_no_torch():
    code = "import sys, lessonlib.core, lessonlib; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_on_a_fresh_interpreter_sees_torch_when_asked():
    """Negative control for the test above: importing a models module does load torch."""
    code = "import sys, lessonlib.models; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_layers_import_one_way():
    bad = []
    for path in modules():
        here = layer(dotted(path))
        if here is None:
            continue
        for dep in imports(path):
            there = layer(dep)
            if there is not None and there not in ALLOWED[here]:
                bad.append(f"{dotted(path)} imports {dep}")
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_no_import_cycle():
    graph = {dotted(p): {d for d in imports(p, runtime_only=True) if d != dotted(p)} for p in modules()}
    for name in graph:  # a package's __init__ re-exporting its own modules is not a cycle
        graph[name] = {d for d in graph[name]
                       if not (d.startswith(name + ".")
                               and PACKAGE.joinpath(*name.split(".")[1:], "__init__.py").exists())}
    state, cycle = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycle.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycle, "import cycles: " + "; ".join(" -> ".join(c) for c in cycle)


def test_type_only_imports_are_told_apart():
    """The cycle test reads run-time imports only; a type-only import is still an import to the layer test."""
    path = PACKAGE / "decoding" / "measures.py"
    source = ("from typing import TYPE_CHECKING\nfrom lessonlib.core import tree\n"
              "if TYPE_CHECKING:\n    from lessonlib.decoding.stats import DecodeStats\n")
    assert "lessonlib.decoding.stats" in imports(path, source=source)
    assert "lessonlib.decoding.stats" not in imports(path, runtime_only=True, source=source)
    assert "lessonlib.core.tree" in imports(path, runtime_only=True, source=source)


@pytest.mark.parametrize("path", modules(), ids=lambda p: dotted(p))
def test_modules_and_functions_stay_short(path):
    if dotted(path) in DATA_TABLES:
        return
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"{dotted(path)} has {len(lines)} lines (at most {MAX_MODULE_LINES})"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{dotted(path)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


@pytest.mark.parametrize("stray, workers", [(False, 0), (True, 0), (True, 2)])
def test_a_test_run_that_changes_the_working_tree_fails(tmp_path, stray, workers):
    """tests/conftest.py compares `git status` at the start and the end of a session: run a small
    session with it in a throwaway repository, once with a test that leaves a file behind, and
    once more so under pytest-xdist's two workers (the suite's own setting), where the controller,
    not a worker, must catch it."""
    import shutil

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "tests").mkdir()
    shutil.copy(PACKAGE.parent / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    body = "(pathlib.Path(__file__).parent.parent / 'stray.txt').write_text('x')" if stray else "pass"
    (tmp_path / "tests" / "test_one.py").write_text(f"import pathlib\n\n\ndef test_one():\n    {body}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "start"]):
        subprocess.run(git + args, cwd=tmp_path, check=True, capture_output=True)
    # this test may itself run in an xdist worker: the session it starts is a fresh one
    env = {k: v for k, v in __import__("os").environ.items()
           if k != "LESSONLIB_OUTPUTS" and not k.startswith("PYTEST_XDIST")}
    run = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "-p", "no:nbval",
                          "-n", str(workers)], cwd=tmp_path, capture_output=True, text=True, env=env)
    if stray:
        assert run.returncode == 1 and "1 passed" in run.stdout, run.stdout + run.stderr
        assert "changed the working tree" in run.stdout and "?? stray.txt" in run.stdout
    else:
        assert run.returncode == 0 and "changed the working tree" not in run.stdout, run.stdout + run.stderr


# ----------------------------------------------------------------------------- the layout table (docs/architecture.md)

README = PACKAGE.parent / "docs" / "architecture.md"
LAYOUT_HEADING = "\n## `lessonlib`, layer by layer\n"


def layout_rows(readme: str) -> dict[str, str]:
    """{package: its "what is in it" cell}: the rows of the architecture page's layer-by-layer
    section whose first cell is a package, `lessonlib` or `lessonlib.x.y`."""
    import re

    section = readme.split(LAYOUT_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 2 and re.fullmatch(r"`lessonlib(\.\w+)*`", cells[0]):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def top_level_names(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def layout_problems(readme: str) -> list[str]:
    """What the layout table gets wrong about the tree under ``PACKAGE``: a package
    without a row, a module (other than ``__init__`` / ``__main__``) its package's row does not
    name, a named module that does not exist, a ``module.name`` whose module does not define it.
    In a row a bare `name` is a module of that package; `module.name` a name it defines."""
    import re

    rows = layout_rows(readme)
    packages = {dotted(p) for p in modules() if p.name == "__init__.py"}
    real = {dotted(p) for p in modules() if p.name not in ("__init__.py", "__main__.py")}
    named, refs = set(), []
    for package, cell in rows.items():
        for token in re.findall(r"`([^`]+)`", cell):
            if re.fullmatch(r"[a-z_][a-z0-9_]*", token):
                named.add(f"{package}.{token}")
            elif m := re.fullmatch(r"([a-z_][a-z0-9_]*)\.([A-Za-z_]\w*)", token):
                refs.append((f"{package}.{m[1]}", m[2]))
    problems = [f"package {p} has no row in the layout table" for p in sorted(packages - set(rows))]
    problems += [f"the layout table has a row for {p}, which is not a package" for p in sorted(set(rows) - packages)]
    problems += [f"module {m} is not named in the layout table" for m in sorted(real - named)]
    problems += [f"the layout table names {m}, which does not exist" for m in sorted(named - real - packages)]
    for module, name in refs:
        path = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
        if module in real and name not in top_level_names(path):
            problems.append(f"the layout table says {module} defines {name}, which it does not")
    return problems


def test_the_readme_layout_table_names_every_module():
    problems = layout_problems(README.read_text())
    assert not problems, "docs/architecture.md, `lessonlib`, layer by layer:\n" + "\n".join(problems)


@pytest.mark.parametrize("edit, expected", [
    (("`toy` (table", "(table"), "module lessonlib.core.toy is not named"),
    (("`stats`, `toy`", "`stats`, `toys`, `toy`"), "names lessonlib.core.toys, which does not exist"),
    (("rule `chain.verify_chain`", "rule `chain.verify_chains`"),
     "core.chain defines verify_chains, which it does not"),
    (("| `lessonlib.course.checks.wrong` |", "| `lessonlib.course.checks.rong` |"),
     "package lessonlib.course.checks.wrong has no row"),
])
def test_the_layout_check_reports_a_wrong_table(edit, expected):
    """Negative controls: a layout table that misses a module, names one that does not exist,
    misplaces a function or drops a package fails the check with that reason."""
    text = README.read_text()
    old, new = edit
    assert old in text, f"the control's edit no longer applies: {old!r}"
    problems = layout_problems(text.replace(old, new, 1))
    assert any(expected in p for p in problems), problems


TEST_PATH = re.compile(r"tests/(?:[a-z_]+/)*test_[a-z0-9_]+\.py")


def missing_test_paths(texts: dict[str, str], exists) -> list[str]:
    """'file: path' for every test file a text names that ``exists(path)`` denies."""
    return sorted({f"{name}: {m}" for name, text in texts.items() for m in TEST_PATH.findall(text) if not exists(m)})


def test_every_test_file_the_docs_and_code_name_exists():
    """Tests moved into folders mirroring the package: no doc, docstring or generated file may
    send a reader to a test file that is not there."""
    root = PACKAGE.parent
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    texts = {name: (root / name).read_text(errors="ignore") for name in tracked
             if name.endswith((".py", ".md", ".txt", ".toml", ".ipynb")) and (root / name).is_file()
             and name != "tests/test_layout.py"}  # this file's negative control names an old path
    assert missing_test_paths(texts, lambda p: (root / p).exists()) == []
    # negative control: an old flat path is reported
    assert missing_test_paths({"x.md": "see tests/test_decode_tree.py"}, lambda p: False) == [
        "x.md: tests/test_decode_tree.py"]


# ----------------------------------------------------------------------------- the size rule

RULE_MODULE_LINES, RULE_FUNCTION_LINES = 350, 60  # the project rule (stricter than the limits above)


def size_problems(source: str, name: str = "<source>") -> list[str]:
    """What in one module's source breaks the size rule: more than RULE_MODULE_LINES lines, or a
    function or method (nested ones too) longer than RULE_FUNCTION_LINES, from its ``def`` line
    to its last line."""
    problems = []
    n_lines = len(source.splitlines())
    if n_lines > RULE_MODULE_LINES:
        problems.append(f"{name}: {n_lines} lines (at most {RULE_MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > RULE_FUNCTION_LINES:
                problems.append(f"{name}:{node.lineno}: {node.name} has {length} lines (at most {RULE_FUNCTION_LINES})")
    return problems


def test_every_module_and_function_keeps_the_size_rule():
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 50  # the walk found the library
    problems = [p for path in paths for p in size_problems(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert not problems, "over the size rule:\n" + "\n".join(problems)


def _function(name: str, body_lines: int, indent: str = "", prefix: str = "def") -> str:
    return f"{indent}{prefix} {name}():\n" + "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines - 1))


@pytest.mark.parametrize("source, expected", [
    ("x = 1\n" * (RULE_MODULE_LINES + 1), f"{RULE_MODULE_LINES + 1} lines (at most {RULE_MODULE_LINES})"),
    (_function("long", RULE_FUNCTION_LINES + 1), f"long has {RULE_FUNCTION_LINES + 1} lines"),
    (_function("slow", RULE_FUNCTION_LINES + 1, prefix="async def"), "slow has"),
    ("class A:\n" + _function("method", RULE_FUNCTION_LINES + 1, indent="    "), "method has"),
    (_function("outer", 3) + _function("inner", RULE_FUNCTION_LINES + 1, indent="    "), "inner has"),
])
def test_the_size_check_reports_what_breaks_the_rule(source, expected):
    """Negative controls: a synthetic module one line too long, and a function, an async function,
    a method and a nested function one line too long, are each reported."""
    problems = size_problems(source)
    assert any(expected in p for p in problems), problems


def test_the_size_check_passes_sources_at_the_limits():
    """The limits are inclusive: RULE_MODULE_LINES lines and a RULE_FUNCTION_LINES-line function pass."""
    at_limit = _function("fits", RULE_FUNCTION_LINES)
    at_limit += "x = 1\n" * (RULE_MODULE_LINES - len(at_limit.splitlines()))
    assert len(at_limit.splitlines()) == RULE_MODULE_LINES
    assert size_problems(at_limit) == []
