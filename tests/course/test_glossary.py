"""One glossary (locale/fa/glossary.tsv), enforced over every Persian catalog.

The real catalogs pass the lint; negative controls inject each inconsistency the review found
into a copy of a real catalog (English "speculative decoding" in the prose, «decoding ساده»,
«distill کردن», «draft نمونه‌گیری‌شده», «تک‌threadی», English "round") and the lint must name
it, while a keep-English term (draft, held-out), a gloss in parentheses and code must pass.
"""
import re
import shutil
from pathlib import Path

import polib
import pytest

from lessonlib.course import glossary

ROOT = Path(__file__).resolve().parents[2]
Z = "\u200c"
REQUIRED = {"speculative decoding": "دیکودینگ حدسی", "plain decoding": "دیکودینگ ساده", "round": "دور",
            "distillation": "تقطیر", "speculation": "حدس" + Z + "زنی", "sampled draft": "draft نمونه" + Z + "گیر"}
ADDED = ("held-out", "teacher-forced", "prompt", "fallback", "probe", "one-hot")


def test_the_glossary_has_one_rendering_per_term_and_the_terms_the_review_asked_for():
    rows = glossary.load(ROOT)
    terms = [r["term"] for r in rows]
    assert len(terms) == len(set(terms)), "a term with two rows"
    by_term = {r["term"]: r for r in rows}
    for term, persian in REQUIRED.items():
        assert by_term[term]["persian"] == persian and by_term[term]["keep_english"] == "gloss", term
    for term in ADDED:
        assert term in by_term, term


def test_every_catalog_follows_the_glossary():
    paths = glossary.catalogs(ROOT)
    assert len([p for p in paths if re.match(r"\d\d_", p.name)]) == 6
    problems = glossary.lint(ROOT)
    assert not problems, "terms rendered against locale/fa/glossary.tsv:\n" + "\n".join(problems)


# The second review's terms: one rendering each, in prose and printed output alike (the lint reads
# messages.po and claims.po too); and the informal words it found, in any catalogue.
SECOND = {"table of record": "جدول مرجع", "position": "موقعیت", "break-even": "سربه" + Z + "سر",
          "while decoding": "در حین دیکودینگ", "policy": "سیاست", "acceptance rate": "نرخ پذیرش"}
INFORMAL = ("صرفد", "جور ", "جورند", "تلرانس", "بنچمارک", "نوت" + Z + "بوک", "دلبخواه", "ه" + Z + "ی ",
            " مال ")


def test_the_second_reviews_terms_have_one_rendering_and_no_catalogue_is_informal():
    by_term = {r["term"]: r for r in glossary.load(ROOT)}
    for term, persian in SECOND.items():
        assert by_term[term]["persian"] == persian and by_term[term]["keep_english"] == "gloss", term
    assert by_term["context"]["keep_english"] == "always" and "زمینه" in by_term["context"]["avoid"]
    found = [(path.name, word) for path in glossary.catalogs(ROOT) for entry in polib.pofile(str(path), wrapwidth=0)
             if not entry.obsolete for word in INFORMAL if word in entry.msgstr]
    assert not found, found


def test_the_lesson_glossary_table_lists_the_added_terms():
    po = polib.pofile(str(ROOT / "locale" / "fa" / "00_start_here.po"), wrapwidth=0)
    table = po.find("cell-00", by="msgctxt").msgstr
    for term in (*ADDED, "round", "distillation", "speculation", "plain decoding"):
        assert f"\n| {term} | " in table, term


def test_exercise_3_has_one_persian_title():
    titles = set()
    for path in glossary.catalogs(ROOT):
        for entry in polib.pofile(str(path), wrapwidth=0):
            titles.update(re.findall(r"تمرین 3 — ([^\]\n*]+)", entry.msgstr))
    assert titles and all(t.startswith("تقطیر یک draft") for t in titles), titles


@pytest.fixture
def copy(tmp_path):
    """A copy of the glossary and of the real 02 catalog, in a root of its own."""
    (tmp_path / "locale" / "fa").mkdir(parents=True)
    shutil.copy(ROOT / glossary.GLOSSARY, tmp_path / glossary.GLOSSARY)
    shutil.copy(ROOT / "locale" / "fa" / "02_speedup.po", tmp_path / "locale" / "fa" / "02_speedup.po")
    return tmp_path


def _inject(root, sentence):
    path = root / "locale" / "fa" / "02_speedup.po"
    po = polib.pofile(str(path), wrapwidth=0)
    entry = next(e for e in po if e.msgstr.strip())
    entry.msgstr += "\n\n" + sentence
    po.save(str(path))
    return entry.msgctxt


@pytest.mark.parametrize("sentence, finding", [
    ("این همان speculative decoding است.", "'speculative decoding' in English"),
    ("با decoding ساده مقایسه کنید.", "«decoding ساده»"),
    ("یک draft را distill کردن ساده است.", "«distill کردن»"),
    ("draft نمونه" + Z + "گیری" + Z + "شده را ببینید.", "«draft نمونه" + Z + "گیری" + Z + "شده»"),
    ("forward تک" + Z + "threadی سریع است.", "«تک" + Z + "threadی»"),
    ("هر round یک گذر است.", "'round' in English"),
    ("وقتی speculation ضرر می" + Z + "کند.", "'speculation' in English"),
])
def test_an_inconsistent_term_in_a_copy_of_a_catalog_fails(copy, sentence, finding):
    assert glossary.lint(copy) == []
    cell = _inject(copy, sentence)
    problems = glossary.lint(copy)
    assert len(problems) == 1 and problems[0].startswith(f"locale/fa/02_speedup.po {cell}: ") \
        and finding in problems[0], problems


@pytest.mark.parametrize("sentence", [
    "draft و target و held-out و teacher-forced و prompt و probe همان انگلیسی می" + Z + "مانند.",
    "دیکودینگ حدسی (speculative decoding) و تقطیر (distillation) با نام انگلیسی در پرانتز.",
    "تابع `simulate_rounds` و $\\text{rounds}$ و [speculative decoding](https://a.org/x) کد و فرمول و پیوندند.",
    "speculative sampling نام یک روش است.",
])
def test_keep_english_terms_glosses_and_code_pass(copy, sentence):
    _inject(copy, sentence)
    assert glossary.lint(copy) == []


def test_a_malformed_glossary_row_names_its_line(copy):
    path = copy / glossary.GLOSSARY
    path.write_text(path.read_text(encoding="utf-8") + "round\tدور\tsometimes\n", encoding="utf-8")
    lines = len(path.read_text(encoding="utf-8").splitlines())
    with pytest.raises(ValueError, match=f"glossary.tsv, line {lines}: expected tab-separated"):
        glossary.load(copy)


def test_the_persian_pages_follow_the_glossary_and_the_register():
    """The Persian pages written outside the catalogues (README.fa.md, the instructor notes) follow
    the same glossary and avoid the same informal words."""
    rows = glossary.load(ROOT)
    for page in ("README.fa.md", "solutions/fa/README.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert not glossary.findings(text, rows), (page, glossary.findings(text, rows))
        assert not [w for w in INFORMAL if w in text], page
