"""The library's layout keeps its promises (issue 13): layers import one way, core needs no
torch, no module or function grows past what one sitting can read."""
import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "lessonlib"
LAYERS = ["core", "models", "decoding", "bench", "course"]  # each may import only the ones before it (course reads bench)
ALLOWED = {"core": {"core"}, "models": {"core", "models"}, "decoding": {"core", "models", "decoding"},
           "bench": {"core", "models", "decoding", "bench"}, "course": {"core", "models", "decoding", "bench", "course"}}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 80
DATA_TABLES = set()  # modules exempt as data tables (none today)


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "assets" not in p.parts)


def dotted(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: pathlib.Path) -> set[str]:
    """The lessonlib modules ``path`` imports (module level and inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
    graph = {dotted(p): {d for d in imports(p) if d != dotted(p)} for p in modules()}
    for name in graph:  # a package's __init__ re-exporting its own modules is not a cycle
        graph[name] = {d for d in graph[name] if not (d.startswith(name + ".") and PACKAGE.joinpath(*name.split(".")[1:], "__init__.py").exists())}
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


@pytest.mark.parametrize("path", modules(), ids=lambda p: dotted(p))
def test_modules_and_functions_stay_short(path):
    if dotted(path) in DATA_TABLES:
        return
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"{dotted(path)} has {len(lines)} lines (at most {MAX_MODULE_LINES})"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{dotted(path)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


@pytest.mark.parametrize("stray", [False, True])
def test_a_test_run_that_changes_the_working_tree_fails(tmp_path, stray):
    """tests/conftest.py compares `git status` at the start and the end of a session: run a small
    session with it in a throwaway repository, once with a test that leaves a file behind."""
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
    env = {k: v for k, v in __import__("os").environ.items() if k != "LESSONLIB_OUTPUTS"}
    run = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "-p", "no:nbval"],
                         cwd=tmp_path, capture_output=True, text=True, env=env)
    if stray:
        assert run.returncode == 1 and "1 passed" in run.stdout, run.stdout + run.stderr
        assert "changed the working tree" in run.stdout and "?? stray.txt" in run.stdout
    else:
        assert run.returncode == 0 and "changed the working tree" not in run.stdout, run.stdout + run.stderr
