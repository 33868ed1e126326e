"""The drift check has teeth: a translation is current by the content it was approved against.

Negative controls on a tiny course (tests/course/test_translate.py's fixture) and on a copy of
the real catalogs: an English edit with the fuzzy line deleted by hand stays stale, approving a
Persian left unchanged while the English changed is refused (unless the translator says so, which
is recorded), a Persian edited without approval is stale, a changed number is caught until the
Persian carries the new one, and a correct re-translation plus approve passes ``check``.
"""
import shutil

import nbformat
import pytest

from lessonlib.course import drift, translate
from tests.course.test_translate import ROOT, _edit, _entry, _translate, make_course


@pytest.fixture
def course(tmp_path):
    return make_course(tmp_path)


NB = "notebooks/00_start_here.ipynb"
PO = "locale/fa/00_start_here.po"


def _drop_fuzzy(root, stem, cell_id):
    """What a translator who wants a green check without translating does: delete "#, fuzzy"."""
    path = root / "locale" / "fa" / f"{stem}.po"
    po = translate.load_catalog(path)
    entry = po.find(cell_id, by="msgctxt")
    entry.flags.remove("fuzzy")
    entry.previous_msgid = None
    path.write_text(str(po), encoding="utf-8")


def _full(root):
    _translate(root, "00_start_here", m0="# عنوان\n\nاز `--flag` و $a + b$ استفاده کنید.",
               m2="[تمرین 1](../exercises/01_demo.ipynb) را ببینید.", m3="واژه‌های آخر.")
    _translate(root, "01_demo", s0="# نمونه")
    translate.build(root)
    assert translate.problems(root) == []


def test_an_english_edit_with_the_fuzzy_line_deleted_stays_stale(course):
    _full(course)
    _edit(course, NB, "m3", "Last words, edited.")
    translate.extract(course)
    _drop_fuzzy(course, "00_start_here", "m3")
    entry = _entry(course, "00_start_here", "m3")
    assert not entry.fuzzy and entry.msgstr == "واژه‌های آخر."  # the flag is gone, the Persian unchanged
    row, = translate.status(course, ["00_start_here"])
    assert row["stale"] == ["m3"] and "m3" not in row["translated"]
    assert f"{PO}: 1 stale: m3" in translate.problems(course)
    translate.build(course)  # the build treats it as untranslated: the English cell
    nb = nbformat.read(course / "notebooks" / "fa" / "00_start_here.ipynb", as_version=4)
    assert next(c for c in nb.cells if c.get("id") == "m3").source == "Last words, edited."
    # negative control: with the flag-based rule of before, this entry would have counted as translated
    assert entry.msgstr.strip() and not entry.fuzzy


def test_approving_an_unchanged_persian_is_refused_unless_said_and_recorded(course, capsys):
    _full(course)
    _edit(course, NB, "m3", "Last words, edited.")
    translate.extract(course)
    approved, refused = translate.approve(course, "00_start_here", ["m3"])
    assert approved == [] and refused and "the Persian did not" in refused[0]
    assert translate.main(["approve", "00_start_here", "m3", "--root", str(course)]) == 1
    assert "m3: the English changed" in capsys.readouterr().out
    assert not drift.current(_entry(course, "00_start_here", "m3"), "Last words, edited.")
    with pytest.raises(ValueError, match="--unchanged-persian-ok: name the cells"):
        translate.approve(course, "00_start_here", (), unchanged_ok=True)
    assert translate.approve(course, "00_start_here", ["m3"], unchanged_ok=True) == (["m3"], [])
    entry = _entry(course, "00_start_here", "m3")
    assert drift.record(entry)["unchanged_ok"] and drift.UNCHANGED_OK in entry.tcomment
    assert drift.current(entry, "Last words, edited.") and not entry.fuzzy
    assert translate.main(["stats", "--root", str(course)]) == 0
    assert "1 approved with unchanged Persian: m3" in capsys.readouterr().out


def test_a_persian_edit_needs_approval_and_a_real_retranslation_passes(course):
    _full(course)
    _edit(course, NB, "m3", "Last words, edited.")
    translate.extract(course)
    _translate(course, "00_start_here", approve=False, m3="واژه‌های آخر، ویرایش‌شده.")
    row, = translate.status(course, ["00_start_here"])
    assert row["fuzzy"] == ["m3"]  # a new Persian alone does not make it current
    _drop_fuzzy(course, "00_start_here", "m3")
    row, = translate.status(course, ["00_start_here"])
    assert row["stale"] == ["m3"]
    assert translate.approve(course, "00_start_here", ["m3"]) == (["m3"], [])
    translate.build(course)
    assert translate.problems(course) == []
    # a Persian edited after its approval is stale again: the record holds the Persian's hash too
    _translate(course, "00_start_here", approve=False, m3="چیز دیگری.")
    assert translate.status(course, ["00_start_here"])[0]["stale"] == ["m3"]


def test_a_changed_number_is_caught_until_the_persian_carries_it(course):
    _full(course)
    _edit(course, NB, "m3", "About 45 minutes.")
    translate.extract(course)
    _translate(course, "00_start_here", approve=False, m3="حدود 45 دقیقه.")
    assert translate.approve(course, "00_start_here", ["m3"]) == (["m3"], [])
    _edit(course, NB, "m3", "About 50 minutes.")
    translate.extract(course)
    _drop_fuzzy(course, "00_start_here", "m3")
    assert translate.approve(course, "00_start_here", ["m3"], unchanged_ok=True) == (
        [], ["m3: the Persian lacks number 50"])  # not even the explicit flag gets it past
    _translate(course, "00_start_here", approve=False, m3="حدود ۵۰ دقیقه.")  # Persian digits count
    assert translate.approve(course, "00_start_here", ["m3"]) == (["m3"], [])
    translate.build(course)
    assert translate.problems(course) == []


def test_check_names_a_current_cell_that_lacks_what_its_english_carries(course):
    _full(course)
    path = course / PO
    po = translate.load_catalog(path)
    entry = po.find("m0", by="msgctxt")
    entry.msgstr = "# عنوان\n\nاز پرچم و $a + b$ استفاده کنید."  # the code span dropped ...
    drift._write_record(entry, False)  # ... and recorded by hand, as if approve had not checked
    path.write_text(str(po), encoding="utf-8")
    assert f"{PO}: m0 lacks code `--flag`" in translate.problems(course)


@pytest.mark.parametrize("english, persian, missing", [
    ("About 45 minutes, 10,000 runs, .05 and 2.5.", "حدود ۴۵ دقیقه، $10{,}000$ اجرا، 0.05 و ۲٫۵.", []),
    ("Run `x --k 4` and see [a](https://a.org/b) with $K + 1$.",
     "`x --k 4` را اجرا کنید و [الف](https://a.org/b) را با $K + 1$ ببینید.", []),
    ("Use $p$ here.", "از p این‌جا استفاده کنید.", ["math $p$"]),
    ("See [a](https://a.org/b).", "[الف](https://a.org/c) را ببینید.", ["link https://a.org/b"]),
    ("Call `f(1)` twice: `f(1)`.", "`f(1)` را صدا بزنید.", ["number 1", "code `f(1)`"]),
    ("K = 3 and 5.", "K برابر 3 است.", ["number 5"]),
    ("```bash\nrun --n 2\n```", "```bash\nrun --n 3\n```", ["number 2", "code ```bash\nrun --n 2\n```"]),
])
def test_carried_compares_numbers_code_links_and_math_as_multisets(english, persian, missing):
    assert drift.carried(english, persian) == missing


def test_migrate_records_current_entries_once_and_leaves_fuzzy_ones_stale(course):
    path = course / PO
    po = translate.load_catalog(path)
    po.metadata.pop(drift.MARK)  # a catalog from before the drift check
    po.find("m0", by="msgctxt").msgstr = "# عنوان\n\nاز `--flag` و $a + b$ استفاده کنید."
    m3 = po.find("m3", by="msgctxt")
    m3.msgstr, m3.flags = "واژه‌های آخر.", ["fuzzy"]
    path.write_text(str(po), encoding="utf-8")
    assert translate.status(course, ["00_start_here"])[0]["stale"] == ["m0"]  # no record: not current
    assert translate.migrate(course, ["00_start_here"]) == {path: "recorded the hashes of 1 translated entries"}
    row, = translate.status(course, ["00_start_here"])
    assert row["translated"] == ["m0"] and row["fuzzy"] == ["m3"]
    assert "already migrated" in translate.migrate(course, ["00_start_here"])[path]
    with pytest.raises(ValueError, match="already migrated"):
        drift.migrate(translate.load_catalog(path))


def test_the_real_catalogs_refuse_a_deleted_fuzzy_flag(tmp_path):
    """On a copy of the real English notebooks and catalogs (no Persian build: status and approve
    read only those; the tiny course above covers check's wording)."""
    for folder in ("notebooks", "solutions"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns(translate.LANG))
    shutil.copytree(ROOT / "locale", tmp_path / "locale")
    root = tmp_path
    translate.extract(root, ["02_speedup"])
    assert translate.status(root, ["02_speedup"])[0]["stale"] == []
    english, = translate.english_notebooks(root, ["02_speedup"])
    nb = nbformat.read(english, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown")
    cell.source += "\n\nOne more English sentence."
    nbformat.write(nb, english)
    translate.extract(root, ["02_speedup"])
    _drop_fuzzy(root, "02_speedup", cell.id)
    row, = translate.status(root, ["02_speedup"])
    assert row["stale"] == [cell.id] and cell.id not in row["translated"] and not row["changes"]
    assert translate.approve(root, "02_speedup", [cell.id])[1]  # refused: the Persian is unchanged


@pytest.mark.parametrize("argv, message", [
    (["approve"], "approve needs a notebook name"),
    (["check", "--unchanged-persian-ok"], "--unchanged-persian-ok goes with approve only"),
])
def test_the_command_line_refuses_a_bad_approve_in_one_line(course, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        translate.main([*argv, "--root", str(course)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_approve_refuses_unknown_cells_and_notebooks(course):
    with pytest.raises(ValueError, match=r"cells: \['nope'\] are not cells of notebooks/00_start_here.ipynb"):
        translate.approve(course, "00_start_here", ["nope"])
    with pytest.raises(ValueError, match="names: no English notebook"):
        translate.approve(course, "99_none", [])
