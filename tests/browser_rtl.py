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
