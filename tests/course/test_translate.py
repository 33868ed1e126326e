"""The Persian edition: catalogs follow the English notebooks, the Persian notebooks follow both.

Two kinds of tests. On the repository: the catalogs in locale/fa/ are in sync with the English
notebooks (else: run extract), no translation has drifted from its English (fuzzy, or stale:
not approved against this English and this Persian, lessonlib.course.drift), every translation
carries its English cell's numbers, code, links and math, the generated Persian notebooks are
up to date (else: run build), and every catalog declared complete has every cell translated. On
a tiny course in a temporary folder, and on a temporary copy of the real one: the machinery
itself, with negative controls (an English edit is reported fuzzy and stays stale when the fuzzy
line is deleted by hand, approving an unchanged Persian is refused, a changed number is caught,
a removed translation is missing, a tampered Persian notebook out of date).
"""
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from lessonlib.course import drift, exercises, persian, translate

ROOT = Path(__file__).resolve().parents[2]
RUN = "python -m lessonlib.course.translate"

# The strict test covers the catalogs a translator has declared finished
# ("X-Translation-Status: complete" in the .po header). Once all six notebooks are translated,
# switch it to every notebook by replacing the next line with
#     STRICT = [p.stem for p in translate.english_notebooks(ROOT)]
STRICT = [p.stem for p in translate.english_notebooks(ROOT)]  # all six notebooks are translated


# --- the repository ------------------------------------------------------------------------

def test_catalogs_are_in_sync_with_the_english_notebooks():
    stale = [f"{r['catalog']}: {'; '.join(r['changes'])}" for r in translate.status(ROOT) if r["changes"]]
    assert not stale, f"the English notebooks changed; run `{RUN} extract`:\n" + "\n".join(stale)


def test_no_translation_has_drifted_from_its_english():
    drifted = [f"{r['catalog']}: {', '.join(r['fuzzy'] + r['stale'])}" for r in translate.status(ROOT)
               if r["fuzzy"] or r["stale"]]
    assert not drifted, ("these cells are not approved against their English and Persian (an English edit, "
                         f"or a Persian edit not yet approved); update the msgstr, run `{RUN} approve NAME CELL`, "
                         f"then `{RUN} build`:\n" + "\n".join(drifted))


def test_every_catalog_is_migrated_and_every_translation_carries_its_english():
    for english in translate.english_notebooks(ROOT):
        po = translate.load_catalog(translate.catalog_path(ROOT, english))
        assert po.metadata.get(drift.MARK) == drift.MARK_VALUE, english
    lacking = [f"{r['catalog']}: {line}" for r in translate.status(ROOT) for line in r["lacking"]]
    assert not lacking, "translations without their English's numbers, code, links or math:\n" + "\n".join(lacking)


def test_persian_notebooks_are_up_to_date():
    problems = translate.notebooks_out_of_date(ROOT)
    assert not problems, f"run `{RUN} build`:\n" + "\n".join(problems)


@pytest.mark.parametrize("stem", STRICT)
def test_every_cell_is_translated(stem):
    row, = translate.status(ROOT, [stem])
    gaps = {state: row[state] for state in ("missing", "fuzzy", "stale", "obsolete") if row[state]}
    assert row["exists"] and not gaps, f"{row['catalog']} is not complete: {gaps}"


def _english_cells(cells):
    """The cells of a Persian notebook that come from its English one: all but the language cell
    the build inserts (lessonlib.course.persian)."""
    return [c for c in cells if not persian.is_language_cell(c)]


def _code_without_stdout(cells):
    """Code cells with their stored stdout text and displayed Markdown left out (the build translates them)."""
    def kept(o):
        o = {k: v for k, v in o.items() if not (k == "text" and o.get("name") == "stdout")}
        return {**o, "data": {m: v for m, v in o["data"].items() if m != "text/markdown"}} if "data" in o else o
    return [{**c, "outputs": [kept(o) for o in c.get("outputs", [])]} for c in cells if c["cell_type"] == "code"]


def test_the_build_keeps_every_code_cell_of_the_real_notebooks():
    built = translate.plan(ROOT)  # what build would write now, whatever is on disk
    for english in translate.english_notebooks(ROOT):
        fa = translate.persian_path(english)
        a = json.loads(english.read_text(encoding="utf-8"))["cells"]
        b = _english_cells(json.loads(built[fa])["cells"])
        assert [c["id"] for c in a] == [c["id"] for c in b], fa
        assert _code_without_stdout(a) == _code_without_stdout(b), fa


# What a notebook's code could read relative to the kernel's working directory, the one thing
# that differs for a copy one folder down (solutions/fa/ against solutions/).
CWD_DEPENDENT = re.compile(r"""f?(['"])\.\.?/|os\.chdir|os\.getcwd|Path\.cwd|\b(open|Path)\(\s*f?['"](?!/)""")


def _code_cells(path):
    cells = _english_cells(json.loads(path.read_text(encoding="utf-8"))["cells"])
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def test_persian_solutions_and_exercises_run_exactly_like_the_english():
    """nbval executes the English solutions and exercises and the Persian lesson, not the Persian
    solutions and exercises (pyproject.toml): each has the code cells of its English notebook,
    and no code cell depends on the working directory, so they run as the English ones do."""
    english = [*translate.english_notebooks(ROOT), *sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))]
    assert len(english) == 11
    for path in english:
        assert _code_cells(translate.persian_path(path)) == _code_cells(path), path
        for source in _code_cells(path):
            assert not CWD_DEPENDENT.search(source), (path, CWD_DEPENDENT.search(source)[0])
    # negative controls: the comparison sees code (an exercise's stubs are not its solution's code), and
    # each way of reading the working directory is caught, absolute paths are not
    assert _code_cells(ROOT / "exercises" / english[1].name) != _code_cells(english[1])
    for bad in ('open("results.json")', "Path('../outputs')", 'x = "./data.csv"', "os.chdir(d)", "Path.cwd()",
                'open(f"{name}.txt")'):
        assert CWD_DEPENDENT.search(bad), bad
    for fine in ('open("/tmp/x")', "paths.ROOT / 'outputs'", "np.ones(3)", "data.heldout_prompts('code', 5, 64)"):
        assert not CWD_DEPENDENT.search(fine), fine


def _copy_repo(tmp_path: Path) -> Path:
    """The real notebooks and catalogs in a temporary folder, extracted and built there, so the
    negative controls start in sync whatever state the repository is in."""
    for folder in ("notebooks", "solutions"):  # the English only: the copy builds its own Persian
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns(translate.LANG))
    shutil.copytree(ROOT / "locale", tmp_path / "locale")
    translate.extract(tmp_path)
    translate.build(tmp_path)
    assert translate.notebooks_out_of_date(tmp_path) == []
    return tmp_path


def _a_translated_cell(root: Path) -> tuple[Path, str]:
    for english in translate.english_notebooks(root):
        po = translate.load_catalog(translate.catalog_path(root, english))
        for entry in po.translated_entries():
            return english, entry.msgctxt
    pytest.fail("no translated cell in locale/fa/ to run the negative control on")


def test_negative_control_an_english_edit_in_a_copy_is_reported_fuzzy(tmp_path):
    root = _copy_repo(tmp_path)
    english, cell_id = _a_translated_cell(root)
    nb = nbformat.read(english, as_version=4)
    cell = next(c for c in nb.cells if c.id == cell_id)
    cell.source += "\n\nOne more English sentence."
    nbformat.write(nb, english)
    stem = english.stem
    row, = translate.status(root, [stem])
    assert f"{cell_id}: fuzzy" in row["changes"]  # before extract: "not in sync"
    assert any("run extract" in p for p in translate.problems(root, [stem]))
    translate.extract(root, [stem])
    row, = translate.status(root, [stem])
    assert cell_id in row["fuzzy"] and cell_id not in row["translated"] and not row["changes"]
    assert any(f"fuzzy: {cell_id}" in p or f", {cell_id}" in p for p in translate.problems(root, [stem]))
    assert any("out of date" in p for p in translate.notebooks_out_of_date(root))


def test_negative_control_a_removed_translation_in_a_copy_is_reported_missing(tmp_path):
    root = _copy_repo(tmp_path)
    english, cell_id = _a_translated_cell(root)
    path = translate.catalog_path(root, english)
    po = translate.load_catalog(path)
    po.find(cell_id, by="msgctxt").msgstr = ""
    path.write_text(str(po), encoding="utf-8")
    row, = translate.status(root, [english.stem])
    assert cell_id in row["missing"] and not row["changes"]
    assert translate.notebooks_out_of_date(root) == [
        f"{translate.persian_path(english).relative_to(root).as_posix()}: out of date"]


# --- a tiny course in a temporary folder ----------------------------------------------------

def _notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = cells
    return nb


def _md(cell_id, text):
    cell = nbformat.v4.new_markdown_cell(text)
    cell.id = cell_id
    return cell


def _code(cell_id, text):
    cell = nbformat.v4.new_code_cell(text)
    cell.id, cell.execution_count = cell_id, 7
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    cell.metadata["tags"] = ["nbval-ignore-output"]
    return cell


@pytest.fixture
def course(tmp_path):
    """notebooks/00_start_here.ipynb and solutions/01_demo.ipynb, catalogs extracted."""
    return make_course(tmp_path)


def make_course(tmp_path):
    """The tiny course of the ``course`` fixture, in ``tmp_path`` (tests/course/test_drift.py uses it too)."""
    for folder in ("notebooks", "solutions"):
        (tmp_path / folder).mkdir()
    nbformat.write(_notebook([
        _md("m0", "# Title\n\nUse `--flag` and $a + b$."), _code("c1", "print(42)"),
        _md("m2", "See [exercise 1](../exercises/01_demo.ipynb)."), _md("m3", "Last words.")]),
        tmp_path / "notebooks" / "00_start_here.ipynb")
    nbformat.write(_notebook([
        _md("s0", "# Demo"),
        _code("s1", "def f():\n    ### BEGIN SOLUTION exercise 1a: return 42\n    return 42\n    ### END SOLUTION")]),
        tmp_path / "solutions" / "01_demo.ipynb")
    translate.extract(tmp_path)
    return tmp_path


def _translate(root, stem, approve=True, **persian):
    """Write Persian into the catalog, then approve it as the translator would (approve=False: not)."""
    path = root / "locale" / "fa" / f"{stem}.po"
    po = translate.load_catalog(path)
    for cell_id, text in persian.items():
        po.find(cell_id, by="msgctxt", include_obsolete_entries=True).msgstr = text
    path.write_text(str(po), encoding="utf-8")
    live = [c for c in persian if not _entry(root, stem, c).obsolete]
    if approve and live:
        approved, refused = translate.approve(root, stem, live)
        assert approved == live and not refused, refused


def _edit(root, rel, cell_id, text):
    nb = nbformat.read(root / rel, as_version=4)
    if text is None:
        nb.cells = [c for c in nb.cells if c.id != cell_id]
    else:
        next(c for c in nb.cells if c.id == cell_id).source = text
    nbformat.write(nb, root / rel)


def _entry(root, stem, cell_id):
    po = translate.load_catalog(root / "locale" / "fa" / f"{stem}.po")
    return po.find(cell_id, by="msgctxt", include_obsolete_entries=True)


def test_extract_makes_one_empty_entry_per_markdown_cell(course):
    po = translate.load_catalog(course / "locale" / "fa" / "00_start_here.po")
    assert [(e.msgctxt, e.msgstr) for e in po] == [("m0", ""), ("m2", ""), ("m3", "")]
    assert po.find("m0", by="msgctxt").msgid == "# Title\n\nUse `--flag` and $a + b$."
    assert po.metadata["Language"] == "fa" and po.metadata[translate.STATUS] == "in progress"
    assert all(not changes for changes in translate.extract(course).values())  # a second run: no change


def test_an_english_edit_marks_its_translation_fuzzy_keeping_the_old_english(course):
    _translate(course, "00_start_here", m3="واژه‌های آخر.")
    _edit(course, "notebooks/00_start_here.ipynb", "m3", "Last words, edited.")
    report = translate.extract(course)
    assert report[course / "locale" / "fa" / "00_start_here.po"] == ["m3: fuzzy"]
    entry = _entry(course, "00_start_here", "m3")
    assert entry.fuzzy and entry.previous_msgid == "Last words." and entry.msgid == "Last words, edited."
    assert entry.msgstr == "واژه‌های آخر."
    translate.build(course)  # a fuzzy translation is not used: the cell stays English
    nb = nbformat.read(course / "notebooks" / "fa" / "00_start_here.ipynb", as_version=4)
    assert _cell(nb, "m3").source == "Last words, edited."
    _edit(course, "notebooks/00_start_here.ipynb", "m3", "Last words.")  # the edit is undone
    translate.extract(course)
    assert not _entry(course, "00_start_here", "m3").fuzzy


def test_an_edit_to_an_untranslated_cell_is_not_fuzzy(course):
    _edit(course, "notebooks/00_start_here.ipynb", "m2", "New English.")
    translate.extract(course)
    entry = _entry(course, "00_start_here", "m2")
    assert not entry.fuzzy and entry.msgid == "New English." and entry.previous_msgid is None


def test_removed_cells_become_obsolete_and_come_back_with_their_translation(course):
    _translate(course, "00_start_here", m3="واژه‌های آخر.")
    _edit(course, "notebooks/00_start_here.ipynb", "m3", None)
    _edit(course, "notebooks/00_start_here.ipynb", "m2", None)
    translate.extract(course)
    assert _entry(course, "00_start_here", "m3").obsolete and _entry(course, "00_start_here", "m2") is None
    row, = translate.status(course, ["00_start_here"])
    assert row["obsolete"] == ["m3"] and any("1 obsolete: m3" in p for p in translate.problems(course))
    nb = nbformat.read(course / "notebooks" / "00_start_here.ipynb", as_version=4)
    nb.cells.append(_md("m3", "Last words."))
    nb.cells.insert(0, _md("m9", "A new first cell."))
    nbformat.write(nb, course / "notebooks" / "00_start_here.ipynb")
    changes = translate.extract(course)[course / "locale" / "fa" / "00_start_here.po"]
    assert changes == ["m9: new cell", "m3: revived"]
    po = translate.load_catalog(course / "locale" / "fa" / "00_start_here.po")
    assert [(e.msgctxt, e.msgstr, e.obsolete) for e in po] == [
        ("m9", "", 0), ("m0", "", 0), ("m3", "واژه‌های آخر.", 0)]


def test_check_lists_what_is_missing_and_passes_when_complete(course, capsys):
    assert translate.main(["check", "--root", str(course)]) == 1
    out = capsys.readouterr().out
    assert "locale/fa/00_start_here.po: 3 missing: m0, m2, m3" in out
    assert "notebooks/fa/00_start_here.ipynb: missing" in out and "exercises/fa/01_demo.ipynb: missing" in out
    _translate(course, "00_start_here", m0="# عنوان\n\nاز `--flag` و $a + b$ استفاده کنید.",
               m2="[تمرین ۱](../exercises/01_demo.ipynb) را ببینید.", m3="واژه‌های آخر.")
    _translate(course, "01_demo", s0="# نمونه")
    translate.build(course)
    assert translate.main(["check", "--root", str(course)]) == 0
    assert translate.main(["stats", "--root", str(course)]) == 0
    stats = capsys.readouterr().out.splitlines()[-2:]
    assert stats[0].split() == ["notebooks/00_start_here.ipynb", "3", "3", "0", "0", "0", "0", "in", "progress"]
    assert stats[1].split()[:7] == ["solutions/01_demo.ipynb", "1", "1", "0", "0", "0", "0"]


def test_build_copies_code_cells_and_wraps_translated_markdown(course):
    _translate(course, "00_start_here", m0="# عنوان\n\nاز `--flag` و $a + b$ استفاده کنید.")
    translate.build(course)
    english = nbformat.read(course / "notebooks" / "00_start_here.ipynb", as_version=4)
    persian_nb = nbformat.read(course / "notebooks" / "fa" / "00_start_here.ipynb", as_version=4)
    fa = persian_nb
    assert [c.id for c in _english_cells(fa.cells)] == [c.id for c in english.cells]
    assert _cell(fa, "c1") == _cell(english, "c1")  # source, outputs, count, tags: all the same
    assert _cell(fa, "m0").source == ('<div dir="rtl" lang="fa">\n\n# عنوان\n\nاز <span dir="ltr">`--flag`</span>'
                                       ' و <span dir="ltr">$a + b$</span> استفاده کنید.\n\n</div>')
    assert _cell(fa, "m3").source == "Last words."  # untranslated: English, left to right
    # one folder deeper, and to the Persian edition of the exercise
    assert _cell(fa, "m2").source == "See [exercise 1](../../exercises/fa/01_demo.ipynb)."
    assert fa.metadata["lessonlib"]["translated_from"] == "notebooks/00_start_here.ipynb"


def test_persian_exercises_come_from_the_persian_solutions(course):
    _translate(course, "01_demo", s0="# نمونه")
    translate.build(course)
    nb = nbformat.read(course / "exercises" / "fa" / "01_demo.ipynb", as_version=4)
    assert _cell(nb, "s0").source.startswith('<div dir="rtl" lang="fa">\n\n# نمونه')
    stub = 'def f():\n    raise NotImplementedError("exercise 1a: return 42")'
    assert _cell(nb, "s1").source == exercises.STUDENT_OUTPUTS + stub
    assert _cell(nb, "s1").outputs == [] and _cell(nb, "s1").execution_count is None
    assert nb.metadata["lessonlib"] == {"generated_from": "solutions/fa/01_demo.ipynb",
                                        "regenerate_with": translate.BUILD}


def test_out_of_date_persian_notebooks_are_reported(course):
    translate.build(course)
    assert translate.notebooks_out_of_date(course) == []
    target = course / "solutions" / "fa" / "01_demo.ipynb"
    target.write_text(target.read_text(encoding="utf-8").replace("# Demo", "# Edited by hand"), encoding="utf-8")
    (course / "exercises" / "fa" / "01_demo.ipynb").unlink()
    (course / "notebooks" / "fa" / "07_orphan.ipynb").write_text("{}")
    assert translate.notebooks_out_of_date(course) == [
        "solutions/fa/01_demo.ipynb: out of date", "exercises/fa/01_demo.ipynb: missing",
        "notebooks/fa/07_orphan.ipynb: no English source"]
    _translate(course, "00_start_here", m3="واژه‌های آخر.")  # a new translation needs a build too
    assert "notebooks/fa/00_start_here.ipynb: out of date" in translate.notebooks_out_of_date(course)


def test_a_translation_made_for_other_english_is_not_used_before_extract(course):
    _translate(course, "00_start_here", m3="واژه‌های آخر.")
    _edit(course, "notebooks/00_start_here.ipynb", "m3", "Different English.")
    translate.build(course)
    nb = nbformat.read(course / "notebooks" / "fa" / "00_start_here.ipynb", as_version=4)
    assert _cell(nb, "m3").source == "Different English."


def test_bad_notebooks_and_names_raise_value_error(course):
    with pytest.raises(ValueError, match="names: no English notebook called \\['99_nothing'\\]"):
        translate.english_notebooks(course, ["99_nothing"])
    nb = _notebook([_md("same", "a"), _md("same", "b")])
    with pytest.raises(ValueError, match="duplicate cell id 'same'"):
        translate.markdown_cells(nb, "demo")
    nb.cells[1].pop("id")
    with pytest.raises(ValueError, match="cell 1: no cell id"):
        translate.markdown_cells(nb, "demo")


# --- right-to-left Markdown ------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("متن `x`", 'متن <span dir="ltr">`x`</span>'),
    ("متن ``a ` b``", 'متن <span dir="ltr">``a ` b``</span>'),
    ("متن $K + 1$ و $p$", 'متن <span dir="ltr">$K + 1$</span> و <span dir="ltr">$p$</span>'),
    ("کد `$x$` است", 'کد <span dir="ltr">`$x$`</span> است'),  # a $ inside code is not math
    (r"قیمت \$5 و \$6", r"قیمت \$5 و \$6"),  # escaped dollars are not math
    ("$$E = 1$$", "$$E = 1$$"),  # display math is laid out by MathJax, centred
    ("نه `باز", "نه `باز"),  # an unclosed backtick is left as it is
])
def test_inline_code_and_math_are_isolated_left_to_right(text, expected):
    assert translate.rtl_markdown(text) == f'<div dir="rtl" lang="fa">\n\n{expected}\n\n</div>'


def test_fenced_code_stays_outside_the_right_to_left_blocks():
    text = "پیش از کد:\n\n```bash\nvllm serve \\\n  --x `y` $z$\n```\n\nپس از کد."
    assert translate.rtl_markdown(text) == (
        '<div dir="rtl" lang="fa">\n\nپیش از کد:\n\n</div>\n\n```bash\nvllm serve \\\n  --x `y` $z$\n```'
        '\n\n<div dir="rtl" lang="fa">\n\nپس از کد.\n\n</div>')


def test_markdown_inside_the_rtl_block_still_renders():
    html = markdown2html_mistune(
        translate.rtl_markdown("## عنوان\n\n- **یک** `x`\n- دو\n\n| a | b |\n|---|---|\n| 1 | 2 |"))
    assert html.startswith('<div dir="rtl" lang="fa">') and html.rstrip().endswith("</div>")
    for piece in ("<h2", "<li><strong>یک</strong> <span dir=\"ltr\"><code>x</code></span></li>", "<table"):
        assert piece in html, html


@pytest.mark.parametrize("link, expected", [
    ("[t](../exercises/01_demo.ipynb#part)", "[t](../../exercises/fa/01_demo.ipynb#part)"),
    ("[t](01_other.ipynb)", "[t](01_other.ipynb)"),  # a sibling lesson: its Persian sibling
    ("[d](data/x.csv)", "[d](../data/x.csv)"),  # any other file: the same file, one folder up
    ("![f](../outputs/x.png)", "![f](../../outputs/x.png)"),
    ('<img src="../outputs/x.png">', '<img src="../../outputs/x.png">'),
    ("[u](https://example.org/a.ipynb)", "[u](https://example.org/a.ipynb)"),
    ("[a](#section)", "[a](#section)"),
    ("![a](attachment:fig.png)", "![a](attachment:fig.png)"),
])
def test_relative_links_follow_the_notebook_one_folder_down(tmp_path, link, expected):
    english = tmp_path / "notebooks" / "00_start_here.ipynb"
    assert translate.relink(link, english, translate.persian_path(english), tmp_path) == expected


def test_stats_does_not_call_a_truncated_catalog_complete(course, capsys):
    """A catalog whose header says complete but whose entries were cut off (a truncated file)
    is not complete; the same catalog, whole, is (control)."""
    _translate(course, "00_start_here", m0="# عنوان\n\nاز `--flag` و $a + b$ استفاده کنید.",
               m2="[تمرین ۱](../exercises/01_demo.ipynb) را ببینید.",
               m3="واژه‌های آخر.")
    path = course / "locale" / "fa" / "00_start_here.po"
    po = translate.load_catalog(path)
    po.metadata[translate.STATUS] = translate.COMPLETE
    path.write_text(str(po), encoding="utf-8")
    row, = translate.status(course, ["00_start_here"])
    assert row["complete"] and row["marked_complete"]
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.index('msgctxt "m2"')], encoding="utf-8")  # cut before the last two entries
    row, = translate.status(course, ["00_start_here"])
    assert row["marked_complete"] and not row["complete"] and row["missing"] == ["m2", "m3"]
    assert translate.main(["stats", "--root", str(course)]) == 0
    line, = [x for x in capsys.readouterr().out.splitlines() if x.startswith("notebooks/00_start_here.ipynb")]
    assert "marked complete, but not" in line
    assert not line.endswith("  complete")


def test_check_lists_pending_sentences_and_passes(monkeypatch, capsys):
    """A printed sentence with no Persian yet is pending: listed, the check passes; a problem fails."""
    monkeypatch.setattr(translate, "problems", lambda root, names=(): [])
    monkeypatch.setattr(translate, "pending", lambda root, names=(): ["claims.po: untranslated: 'a new claim'"])
    assert translate.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "the Persian edition is up to date" in out and "pending (1: shown in English" in out
    assert "claims.po: untranslated: 'a new claim'" in out and "complete" not in out
    monkeypatch.setattr(translate, "problems", lambda root, names=(): ["claims.po: fuzzy: 'x'"])
    assert translate.main(["check"]) == 1


RTL_BLOCK = re.compile(re.escape(persian.RTL_OPEN) + r".*?" + re.escape(persian.RTL_CLOSE), re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _outside_rtl(source: str) -> str:
    """What a Persian markdown cell holds outside its right-to-left blocks and fenced code: nothing."""
    return FENCE.sub("", RTL_BLOCK.sub("", source)).strip()


def test_every_persian_markdown_cell_reads_right_to_left_placeholders_included():
    notebooks = sorted(ROOT.glob("*/fa/*.ipynb"))
    assert len(notebooks) == 11  # the lesson, five solutions, five exercises
    loose = [f"{path.relative_to(ROOT)} cell {i}" for path in notebooks
             for i, cell in enumerate(nbformat.read(path, as_version=4).cells)
             if cell.cell_type == "markdown" and _outside_rtl(cell.source)]
    assert not loose, "Persian markdown outside a right-to-left block:\n" + "\n".join(loose)
    # negative control: the placeholder as it was, bare Persian with no wrapper, is caught
    assert _outside_rtl(exercises.answer_pointer("fa/01_exact_rule.ipynb")) == ""
    assert _outside_rtl("*پیش‌بینی خودتان را بنویسید* پاسخ در `x`") != ""
