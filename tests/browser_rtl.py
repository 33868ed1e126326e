"""Right-to-left checks for the browser test: how the Persian edition's cells render.

The translation build (lessonlib.course.translate) wraps each translated markdown cell in
<div dir="rtl">, with inline code and formulas in <span dir="ltr">. This reads back, from the
page JupyterLab rendered, the direction each part ended up with (tests/test_browser.py judges).
"""

from browser_support import RENDER_TIMEOUT_S, _poll

# Direction as rendered, per cell: for the Persian edition's right-to-left markdown cells (the
# translation build wraps them in <div dir="rtl">) and the code editors. Besides the computed
# `direction`, it measures where glyphs land: in RTL prose the first letter sits right of the
# second; in an inline code span or formula the first character sits left of the last.
_BIDI_JS = r"""async () => {
  const w = window.__courseNotebook, frame = () => new Promise(r => requestAnimationFrame(() => r()));
  const dir = el => getComputedStyle(el).direction;
  const box = (node, i) => {
    const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
    const b = r.getBoundingClientRect(); return {left: b.left, right: b.right, top: Math.round(b.top)};
  };
  const texts = el => { const t = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), out = [];
    let n; while ((n = t.nextNode())) if (n.data.trim()) out.push(n); return out; };
  const order = (first, last) => first.top === last.top ? first.left < last.left : null;  // null: wrapped
  const report = [];
  for (const [index, cell] of w.content.widgets.entries()) {
    const m = cell.model, source = m.sharedModel.getSource().trimStart();
    if (m.type === 'code') {
      let editor = cell.node.querySelector('.cm-content');
      if (!editor) {  // an editor created only once its cell scrolls into view
        cell.node.scrollIntoView({block: 'start'}); await frame(); await frame();
        editor = cell.node.querySelector('.cm-content');
      }
      report.push({index, type: 'code', editor: editor ? dir(editor) : null, pendingRender: !editor}); continue;
    }
    if (m.type !== 'markdown' || !source.startsWith('<div dir="rtl"')) continue;
    if (cell.rendered === false) cell.rendered = true;  // a cell left in edit mode: render it
    cell.node.scrollIntoView({block: 'start'}); await frame(); await frame();  // lay it out
    const md = cell.node.querySelector('.jp-RenderedMarkdown'), rtl = md ? [...md.querySelectorAll('[dir="rtl"]')] : [];
    if (!md || !rtl.length) {  // not rendered yet (the notebook renders cells as they scroll in): ask again
      report.push({index, type: 'markdown', rendered: false, pendingRender: true}); continue;
    }
    const blocks = rtl.flatMap(d => [...d.querySelectorAll('p, h1, h2, h3, h4, li, th, td')]);
    const letters = blocks.flatMap(texts).find(n => /^[\u0600-\u06FF]{2}/.test(n.data.trimStart()));
    const at = letters ? letters.data.length - letters.data.trimStart().length : 0;
    const inline = rtl.flatMap(d => [...d.querySelectorAll('code')]).filter(c => !c.closest('pre'));
    const maths = rtl.flatMap(d => [...d.querySelectorAll('mjx-container:not([display="true"]) > mjx-math')]);
    report.push({index, type: 'markdown', rendered: !!md, rtlBlocks: rtl.length, blocks: blocks.map(dir),
      prose: letters ? {text: letters.data.trim().slice(0, 30),
                        rtlOrder: box(letters, at).right > box(letters, at + 1).right} : null,
      code: inline.map(c => { const t = texts(c), f = t[0], l = t[t.length - 1];
        return {text: c.textContent, dir: dir(c),  // one character has no order: null
                ltrOrder: c.textContent.trim().length < 2 ? null : order(box(f, 0), box(l, l.data.length - 1))}; }),
      math: maths.map(x => { const k = [...x.children].map(e => e.getBoundingClientRect());
        return {text: x.parentElement.textContent, dir: dir(x.parentElement),
                ltrOrder: k.length < 2 ? null : k[0].left < k[k.length - 1].left}; }),
      pre: [...md.querySelectorAll('pre')].map(dir),
      pendingMath: /\$/.test(source) && !md.querySelector('mjx-container')});
  }
  return report;
}"""


def bidi_report(page, timeout_s: float = RENDER_TIMEOUT_S) -> list[dict]:
    """Per cell of the open notebook: the direction its RTL markdown and code editors render
    with (see _BIDI_JS), once every RTL markdown cell has rendered and MathJax has typeset every
    formula (bounded wait: a cell still unrendered then is reported with rendered False, and the
    test says which, instead of the script failing on it)."""
    last = []

    def typeset():
        last[:] = page.evaluate(_BIDI_JS)
        return not any(c.get("pendingMath") or c.get("pendingRender") for c in last)
    _poll(page, typeset, timeout_s, interval_ms=500)
    return last


# Printed Persian lines (lessonlib.course.rtl.isolate_line): each line in an RLI … PDI, each
# left-to-right run (an exercise id, a number, an array) in an LRI … PDI. Read back from every
# output area of the open notebook: a run is drawn in reading order when each of its characters
# sits right after the one before it (same line, no gap, left to right); a Persian line when its
# first two letters are drawn right to left. The sample lines are drawn in a <pre> of the page the
# same way, with and without the isolates (the negative control: without them "1a" splits around
# the Persian word and "1.92252e-12" breaks at its exponent).
_OUTPUT_JS = r"""async (samples) => {
  const w = window.__courseNotebook, frame = () => new Promise(r => requestAnimationFrame(() => r()));
  const box = (node, i) => {
    const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
    const b = r.getBoundingClientRect(); return {left: b.left, right: b.right, top: Math.round(b.top), w: b.width};
  };
  // Characters [from, to) drawn one after another, left to right: each visible character (spaces and
  // combining marks have no place of their own to judge) starts where the one before it ended, plus
  // the width of the spaces between them. A wrapped run is judged on each line; null when
  // no two of its characters share a line.
  const contiguous = (node, from, to) => {
    const seen = [];
    for (let i = from; i < to; i++) if (/[^\s\p{M}\u200c\u200d]/u.test(node.data[i])) seen.push(i);
    let judged = false;
    for (let k = 0; k + 1 < seen.length; k++) {
      const i = seen[k], j = seen[k + 1], a = box(node, i), b = box(node, j);
      if (a.top !== b.top || !a.w || !b.w) continue;  // wrapped between them
      judged = true;
      let between = 0; for (let m = i + 1; m < j; m++) if (/\s/.test(node.data[m])) between += box(node, m).w;
      if (Math.abs(b.left - a.right - between) > 1.5) return false;
    }
    return judged ? true : null;
  };
  // a table row, as lessonlib.course.rtl._is_table_row reads one: padded columns once bracketed values are
  // set aside, a label padded after its colon not counting
  const isTable = line => { let t = line.trim(), prev;
    do { prev = t; t = t.replace(/\[[^\[\]]*\]|\([^()]*\)/g, '[]'); } while (t !== prev);
    return /[^\s:] {2,}\S/.test(t); };
  const judge = node => {
    const out = [], text = node.data;
    for (const m of text.matchAll(/\u2066([^\u2066-\u2069]*)\u2069/g)) {
      const start = m.index + 1, body = m[1];
      if (body.trim().length < 2) continue;
      out.push({kind: 'run', text: body, ordered: contiguous(node, start, start + body.length)});
    }
    for (const m of text.matchAll(/\u2067[^\u0600-\u06FF]*([\u0600-\u06FF]{2})/g)) {
      const at = m.index + m[0].length - 2, a = box(node, at), b = box(node, at + 1);
      out.push({kind: 'line', text: text.slice(m.index + 1, m.index + 30),
                ordered: a.top === b.top ? a.right > b.right : null});
    }
    return out;
  };
  // a Persian line not laid out right to left (no RLI; its values may be isolated), unless a table row:
  // judged on the whole <pre>'s text, as a renderer may cut one line into several text nodes (links)
  const bare = pre => pre.textContent.split('\n').filter(line =>
    /[\u0600-\u06FF]/.test(line) && !/\u2067/.test(line) && !isTable(line))
    .map(line => ({kind: 'bare', text: line.slice(0, 60), ordered: false}));
  const texts = el => { const t = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), out = [];
    let n; while ((n = t.nextNode())) if (/[\u0600-\u06FF]/.test(n.data)) out.push(n); return out; };
  const found = [];
  for (const [index, cell] of w.content.widgets.entries()) {
    if (cell.model.type !== 'code' || !cell.model.outputs.length) continue;
    cell.node.scrollIntoView({block: 'start'}); await frame(); await frame();  // outputs are drawn on sight
    for (const pre of cell.node.querySelectorAll('.jp-OutputArea-output pre')) {
      for (const node of texts(pre)) for (const r of judge(node)) found.push({index, ...r});
      for (const r of bare(pre)) found.push({index, ...r});
    }
  }
  const host = document.querySelector('.jp-OutputArea-output') || document.body;
  const probe = document.createElement('pre'); host.appendChild(probe);
  const measured = {};
  for (const [name, line, runs] of samples) {
    probe.textContent = line; const node = probe.firstChild;
    measured[name] = runs.map(run => { const at = line.indexOf(run);
      return {text: run, ordered: at < 0 ? null : contiguous(node, at, at + run.length)}; });
  }
  probe.remove();
  return {found, samples: measured};
}"""


def output_order_report(page, samples: list[tuple[str, str, list[str]]]) -> dict:
    """``found``: every isolated run and Persian line in the open notebook's outputs, with whether it
    is drawn in reading order (see _OUTPUT_JS); ``samples``: {name: [{text, ordered}]} for each
    (name, line, runs) drawn in a <pre> of the page, each run's characters measured."""
    return page.evaluate(_OUTPUT_JS, samples)
