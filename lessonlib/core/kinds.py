"""The one list of draft kinds (``KINDS``): what each is, how it loads, which drafter runs it and
what the benchmarks sweep for it.

Every place that used to keep its own table of kinds reads this one: the tree, sampled, kinds
and calibration benchmarks, the loader (``bench.tree.load_models``), the heads' builder and
trainer (``models.heads``, ``models.train_heads``) and the skill file's per-kind gate. Adding a
kind is a model file, a drafter and one entry here (llama.cpp keeps the same kind of map,
``common_speculative_type_from_name_map``).

It is plain data: importing it needs neither numpy nor torch, so every layer can read it. The
fields that name code (``loader``, ``drafter``) are resolved where that code lives.
"""
from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, ...]  # branching per depth: (2, 2, 1, 1) = 2 children at depths 1 and 2, then 1
Dynamic = tuple[int, int, int]  # EAGLE-2's dynamic tree: (depth, top-k per expansion, total nodes)


@dataclass(frozen=True)
class Sweep:
    """What ``bench tree`` runs for a kind at T = 0; each list may be empty."""

    chains: tuple[int, ...] = ()  # chain lengths K
    trees: tuple[Shape, ...] = ()  # static tree shapes
    dynamic: tuple[Dynamic, ...] = ()  # dynamic trees; ``quick`` keeps the first two
    quick_chains: tuple[int, ...] | None = None  # ``--quick``'s chain lengths (None: ``chains``)


@dataclass(frozen=True)
class SampledSweep:
    """What ``bench sampled`` runs for a kind at every temperature: a short and a long chain, one
    static shape under each tree rule, and a dynamic tree when the kind has one."""

    chains: tuple[int, ...]
    tree: Shape
    dynamic: Dynamic | None = None


@dataclass(frozen=True)
class DraftKind:
    """One kind of draft. The method names the benchmarks report are built from the prefixes:
    ``f"{chain} K={k}"``, ``f"{tree} {'-'.join(shape)}"``, ``f"{dynamic} d{d} k{k} N{n}"``."""

    name: str  # the key: "draft", "eagle", ... (bench tree's ``m.drafters``)
    label: str  # the sampled benchmark's and the skill file's name: "draft-kl", "EAGLE", ...
    report: str  # the kinds benchmark's row label
    checkpoint: str  # the shipped checkpoint the drafter runs
    loader: str  # "model" (a separate GPT), "head" (``models.heads``) or "mtp" (``models.mtp``)
    drafter: str  # the ``decoding`` class that drafts with it
    description: str  # how it is built, for the kinds table
    trained: tuple[str, ...]  # the checkpoints whose training it costs, in order
    chain: str  # chain method prefix, and its family
    tree: str  # static-tree method prefix
    tree_family: str
    dynamic: str = ""  # dynamic-tree method prefix ("" when the kind has none)
    dynamic_family: str = ""
    sweep: Sweep = Sweep()
    sampled: SampledSweep | None = None
    target: str = "tiny"  # the target it drafts for: "tiny" (the course's GPT) or "smollm2" (the real LLM)

    @property
    def families(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(chain families, tree families) of its rows in ``bench tree``."""
        trees = (self.tree_family,) + ((self.dynamic_family,) if self.dynamic_family not in ("", self.tree_family)
                                       else ())
        return (self.chain,), trees


_SMALL, _MID = ((2, 1, 1, 1), (2, 2, 1, 1)), ((3, 2, 2),)
_DYN = ((6, 3, 10), (6, 4, 16), (7, 4, 24))

KINDS: tuple[DraftKind, ...] = (
    DraftKind("draft", "draft-kl", "draft model (draft-kl)", "draft-kl", "model", "ModelDrafter",
              "separate 1-layer GPT: pretrained on text (draft-base), then distilled from the frozen target "
              "(forward KL), after the target", ("draft-base", "draft-kl"),
              chain="chain draft-kl", tree="tree draft-kl", tree_family="tree draft-kl",
              dynamic="tree draft-kl dynamic", dynamic_family="tree draft-kl",
              sweep=Sweep((3, 4, 5, 6), _SMALL + _MID, _DYN, quick_chains=(3, 4)),
              sampled=SampledSweep((2, 3), (2, 2, 1, 1))),
    DraftKind("eagle", "EAGLE", "EAGLE", "eagle", "head", "EagleDrafter",
              "1 decoder block on the frozen target's top feature and the next token, after the target", ("eagle",),
              chain="EAGLE chain", tree="EAGLE tree", tree_family="EAGLE tree",
              dynamic="EAGLE-2 dynamic", dynamic_family="EAGLE-2 dynamic",
              sweep=Sweep((3, 4, 5), _SMALL + _MID, _DYN),
              sampled=SampledSweep((2, 4), (2, 2, 1, 1), (6, 3, 10))),
    DraftKind("eagle3", "EAGLE-3", "EAGLE-3", "eagle3", "head", "EagleDrafter",
              "1 decoder block on fused low, middle and top features, training-time test, after the target",
              ("eagle3",), chain="EAGLE-3 chain", tree="EAGLE-3 tree", tree_family="EAGLE-3 tree",
              dynamic="EAGLE-3 dynamic", dynamic_family="EAGLE-3 tree",
              sweep=Sweep((4, 5), ((2, 2, 1, 1),), _DYN),
              sampled=SampledSweep((2, 4), (2, 2, 1, 1), (6, 3, 10))),
    DraftKind("medusa", "Medusa", "Medusa", "medusa", "head", "MedusaDrafter",
              "4 residual heads on the frozen target's top feature, after the target", ("medusa",),
              chain="Medusa chain", tree="Medusa", tree_family="Medusa",
              sweep=Sweep((3,), ((2, 1, 1), (3, 2, 2))),
              sampled=SampledSweep((2, 3), (2, 1, 1))),
    DraftKind("mtp", "MTP", "MTP (self-speculation)", "target-mtp", "mtp", "MTPDrafter",
              "2 DeepSeek-V3-style modules trained with the target (same run)", ("target-mtp",),
              chain="MTP chain", tree="MTP tree", tree_family="MTP tree",
              sweep=Sweep((1, 2), ((2, 1), (3, 1), (2, 2))),  # depth <= 2: the modules the target trained
              sampled=SampledSweep((2,), (2, 1))),
)
# the kinds table's rows, in the order it has always printed them
REPORT_ORDER = ("draft", "medusa", "eagle", "eagle3", "mtp")

# The real LLM's kinds (SmolLM2-135M, ``bench llm``): kept apart from ``KINDS``, whose readers
# (bench tree, sampled, kinds, calibration, the skill gate) all run the tiny target.
LLM_KINDS: tuple[DraftKind, ...] = (
    DraftKind("smollm2-eagle3", "EAGLE-3", "EAGLE-3 (SmolLM2)", "smollm2-eagle3", "llm-head", "LlamaHeadDrafter",
              "1 decoder layer on SmolLM2's fused low, middle and top features, an 8,192-token draft "
              "vocabulary, training-time test unrolled 3 steps (the reference: 7), "
              "after the target", ("smollm2-eagle3",),
              chain="EAGLE-3 chain", tree="EAGLE-3 tree", tree_family="EAGLE-3 tree",
              sweep=Sweep((1, 2, 3), ((2, 1),)), target="smollm2"),
    DraftKind("smollm2-medusa", "Medusa", "Medusa (SmolLM2)", "smollm2-medusa", "llm-head", "MedusaDrafter",
              "3 residual heads on SmolLM2's top feature, the same 8,192-token draft vocabulary (tied), "
              "after the target", ("smollm2-medusa",),
              chain="Medusa chain", tree="Medusa", tree_family="Medusa",
              sweep=Sweep((1, 2), ((2, 1),)), target="smollm2"),
    DraftKind("smollm2-draft", "draft model", "draft model (SmolLM2)", "smollm2-draft", "llm-head",
              "LlamaDraftDrafter",
              "separate 2-layer Llama of width 256 on SmolLM2's embedding, an 8,192-token draft vocabulary "
              "(tied), distilled from the frozen target (forward KL), after the target", ("smollm2-draft",),
              chain="draft model chain", tree="draft model tree", tree_family="draft model tree",
              sweep=Sweep((1, 2, 3), ((2, 1),)), target="smollm2"),
)


def kind(name: str) -> DraftKind:
    """The kind called ``name`` (``DraftKind.name``, either target's); a ValueError naming the
    kinds otherwise."""
    for k in KINDS + LLM_KINDS:
        if k.name == name:
            return k
    raise ValueError(f"kind must be one of {', '.join(k.name for k in KINDS + LLM_KINDS)}, got {name!r}")


def names(loader: str | None = None) -> tuple[str, ...]:
    """The kinds' names, all of them or those loaded by ``loader``."""
    return tuple(k.name for k in KINDS if loader is None or k.loader == loader)


def of_method(method: str) -> DraftKind | None:
    """The kind whose label starts ``method`` ("EAGLE-3 chain K=4 · sampled" -> EAGLE-3), longest
    label first ("EAGLE-3 ..." is not EAGLE's); None for a method of no kind (plain, lookup)."""
    for k in sorted(KINDS, key=lambda k: len(k.label), reverse=True):
        if method.startswith(k.label + " "):
            return k
    return None
