"""The one list of draft kinds (``core.kinds``): every drafter has a kind, no module keeps a
second list, and each kind's entry builds the method names the reports have always carried."""
import ast
import inspect
import pathlib

import pytest

from lessonlib.core import kinds

PACKAGE = pathlib.Path(kinds.__file__).resolve().parents[1]
WORDS = {k.name for k in kinds.KINDS} | {k.label for k in kinds.KINDS} | {k.checkpoint for k in kinds.KINDS}
# literals that name three or more kinds without being a list of kinds: a figure's captions per feature-reading kind
ALLOWED = {("course/diagrams.py", ("eagle", "eagle3", "mtp"))}
# drafters that are not a kind of draft: the bases, and the draft-free proposers (they need no trained model)
NOT_KINDS = {"Drafter", "RuleDrafter", "TreeDrafter", "NoDraft", "PromptLookupDrafter", "CombinedDrafter",
             "LookaheadDrafter", "ChainDrafter", "BatchChainDrafter"}


def second_lists(source: str, path: str) -> list[str]:
    """Literal tuples, lists, sets and dicts (keys) in ``source`` holding three or more kind names (a
    two-way dispatch inside one kind's own code, EAGLE against EAGLE-3, is not a list of kinds)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, (ast.Tuple, ast.List,
                                                                                            ast.Set)) else []
        words = tuple(i.value for i in items if isinstance(i, ast.Constant) and i.value in WORDS)
        if len(set(words)) >= 3 and (path, words) not in ALLOWED:
            found.append(f"{path}:{node.lineno} {words}")
    return found


def test_no_module_keeps_a_second_list_of_kinds():
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) if p.name != "kinds.py" or p.parent.name != "core"
             for hit in second_lists(p.read_text(), p.relative_to(PACKAGE).as_posix())]
    assert not found, "lists of kinds outside core.kinds:\n" + "\n".join(found)


def test_the_scan_finds_a_second_list():
    """Negative control: the table bench sampled kept before the registry is found."""
    old = 'KINDS = {"draft": ("draft-kl", (2, 3)), "eagle": ("EAGLE", (2, 4)), "medusa": ("Medusa", (2, 3))}'
    assert second_lists(old, "bench/sampled.py")
    assert not second_lists('both = ("eagle", "medusa")', "models/train_heads.py")
    assert second_lists('heads = ("eagle", "eagle3", "medusa")', "models/heads.py")


def test_every_drafter_has_a_kind():
    from lessonlib.decoding import batch, decode, drafters, llm_drafter, lookahead, mtp_draft, prompt_lookup

    classes = {name for module in (batch, decode, drafters, llm_drafter, lookahead, mtp_draft, prompt_lookup)
               for name, obj in inspect.getmembers(module, inspect.isclass)
               if name.endswith("Drafter") and obj.__module__ == module.__name__}
    named = {k.drafter for k in kinds.KINDS + kinds.LLM_KINDS}
    assert named <= classes, "a kind names a drafter that does not exist"
    assert not classes - named - NOT_KINDS, f"drafters with no kind: {sorted(classes - named - NOT_KINDS)}"


def test_lookups_and_their_refusals():
    assert kinds.kind("eagle3").label == "EAGLE-3"
    assert kinds.of_method("EAGLE-3 chain K=4 · sampled").name == "eagle3"  # the longer label wins
    assert kinds.of_method("EAGLE chain K=2").name == "eagle"
    assert kinds.of_method("prompt lookup k=8") is None and kinds.of_method("plain") is None
    assert kinds.names("head") == ("eagle", "eagle3", "medusa")
    assert set(kinds.REPORT_ORDER) == set(kinds.names())
    with pytest.raises(ValueError, match="kind must be one of draft, eagle, eagle3, medusa, mtp, smollm2-eagle3, "
                                         "smollm2-medusa, smollm2-draft, got 'eagle4'"):
        kinds.kind("eagle4")
    assert {k.target for k in kinds.KINDS} == {"tiny"} and {k.target for k in kinds.LLM_KINDS} == {"smollm2"}


def test_the_real_llms_sweep_builds_its_method_names():
    from lessonlib.bench import llm

    assert llm.head_shapes() == {"EAGLE-3 chain K=1": (1,), "EAGLE-3 chain K=2": (1, 1),
                                 "EAGLE-3 chain K=3": (1, 1, 1), "EAGLE-3 tree 2-1": (2, 1)}


def test_the_tree_sweep_builds_the_reports_method_names():
    """Method names are the keys of every committed report and of the table of record: the
    registry must build the names the sweep has always had."""
    from lessonlib.bench import tree

    table = tree.methods(quick=False)
    for name in ("chain draft-kl K=6", "tree draft-kl 3-2-2", "tree draft-kl dynamic d7 k4 N24", "Medusa chain K=3",
                 "Medusa 2-1-1", "EAGLE chain K=5", "EAGLE tree 2-1-1-1", "EAGLE-2 dynamic d6 k3 N10",
                 "EAGLE-3 chain K=4", "EAGLE-3 tree 2-2-1-1", "EAGLE-3 dynamic d6 k4 N16", "MTP chain K=1",
                 "MTP tree 2-2"):
        assert name in table, name
    assert table["EAGLE-3 dynamic d6 k3 N10"][0] == "EAGLE-3 tree" and table["EAGLE-2 dynamic d6 k3 N10"][0] == \
        "EAGLE-2 dynamic"
    quick = tree.methods(quick=True)
    assert "chain draft-kl K=5" not in quick and "EAGLE-2 dynamic d7 k4 N24" not in quick
    assert not any(n.startswith("MTP") for n in tree.methods(kinds=("draft", "eagle")))


def test_a_real_llm_kinds_description_says_what_its_shipped_head_was_trained_with():
    """The numbers a kind of the real LLM states (draft vocabulary, unroll steps, heads, the draft model's
    layers and width) are its
    shipped metadata's: a description written from the recipe ("7 steps") while the head was
    trained with 3 is caught here."""
    import json
    import re

    from lessonlib.models import llm_store

    for k in kinds.LLM_KINDS:
        meta = json.loads(llm_store.paths(k.checkpoint)[1].read_text())
        said = {int(n.replace(",", "")) for n in re.findall(r"(?<![\w-])\d[\d,]*\b", k.description)}
        shape = meta.get("draft_config", {})  # the draft model's own layers and width
        stated = {meta["draft_vocab_size"]} | ({meta["ttt_steps"]} if "ttt_steps" in meta else set()) | \
            ({meta["n_heads"]} if "n_heads" in meta else set()) | \
            {shape[k] for k in ("n_layer", "n_embd") if k in shape}
        assert stated <= said, (k.name, stated - said)
        assert said <= stated | {1, 7}, (k.name, said - stated)  # 1 decoder layer; 7: the reference's unroll
        if "ttt_steps" in meta:
            assert f"unrolled {meta['ttt_steps']} steps" in k.description
