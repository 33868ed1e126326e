"""JupyterLab + headless Chromium harness for the browser test (tests/test_browser.py).

The server runs on a staged copy of the course (notebook folders copied, everything else
symlinked), so nothing the browser does can touch the notebooks stored in the repository.
The page is driven through JupyterLab's own command registry (`window.jupyterapp`, exposed
with --LabApp.expose_app_in_browser): the same commands the menus call, without depending
on menu labels or layout. Sliders are moved with the real keyboard, like a student would.
"""

import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"  # Debian's `chromium` package; Playwright never downloads one
# Flags that worked on this machine's closed network (background traffic gets refused).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")
SERVER_START_TIMEOUT_S = 180  # generous: a busy 2-core machine took 80 s once
OPEN_TIMEOUT_S = 90
RUN_ALL_TIMEOUT_S = 180  # a notebook's budget is 30-90 s under nbval; the browser adds rendering
RENDER_TIMEOUT_S = 30
SLIDER_TIMEOUT_S = 30
VIEWPORT = {"width": 1280, "height": 900}

# Lab settings for the test profile: no news/update requests (no network here), no autosave.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def missing_requirement() -> str | None:
    """Why the browser test cannot run here, or None when Chromium and Playwright are present."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} not found: install Debian's package with `apt-get install -y chromium`"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package `playwright` is not installed (pip install -r requirements.txt)"
    return None


def stage_course(repo: Path, dest: Path) -> None:
    """Copy the notebook folders into dest and symlink every other top-level entry.

    Kernels start in the copied folder, so relative paths such as ../lessonlib/assets still
    resolve, while executed outputs land only in the copies.
    """
    for entry in repo.iterdir():
        if entry.name.startswith("."):
            continue
        if entry.name in NOTEBOOK_FOLDERS and entry.is_dir():
            shutil.copytree(entry, dest / entry.name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        else:
            (dest / entry.name).symlink_to(entry)


@dataclass
class Lab:
    url: str    # base url, e.g. http://127.0.0.1:41234/
    token: str
    root: Path  # the staged copy JupyterLab serves
    log: Path   # server stdout+stderr

    def api(self, path: str, method: str = "GET") -> dict:
        """Call the Jupyter REST API with the token; returns the decoded JSON (or {})."""
        req = urllib.request.Request(self.url + path.lstrip("/"), method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else {}

    def log_tail(self, n: int = 40) -> str:
        """The server log's last n lines (kernel deaths and restarts show up here)."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])


def _wait_ready(proc: subprocess.Popen, runtime: Path, token: str, log: Path, root: Path) -> Lab:
    """Poll until the server wrote its info file and answers /api/status, or fail in time."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    lab = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n"
                               + log.read_text(errors="replace")[-3000:])
        info = runtime / f"jpserver-{proc.pid}.json"
        if lab is None and info.exists():
            try:
                url = json.loads(info.read_text())["url"]
            except (ValueError, KeyError):  # file still being written
                url = None
            if url:
                lab = Lab(url if url.endswith("/") else url + "/", token, root, log)
        if lab is not None:
            try:
                lab.api("api/status")
                return lab
            except (urllib.error.URLError, OSError):
                pass
        time.sleep(0.25)
    raise TimeoutError(f"jupyter lab not ready after {SERVER_START_TIMEOUT_S} s:\n"
                       + log.read_text(errors="replace")[-3000:])


def _stop(proc: subprocess.Popen, lab: Lab | None) -> None:
    """Ask the server to shut down (it stops its kernels), then terminate, then kill."""
    if proc.poll() is None and lab is not None:
        try:
            lab.api("api/shutdown", method="POST")
            proc.wait(timeout=20)
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
            pass
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)  # the server runs in its own session: its group is ours to end
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def _die_with_parent() -> None:
    """In the child: get SIGTERM when pytest dies, even by SIGKILL, when no `finally` runs."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@contextmanager
def jupyter_lab(repo: Path):
    """Start JupyterLab on 127.0.0.1 (OS-chosen free port, random token) over a staged copy
    of `repo`; yield a `Lab`; always shut the server down and delete the copy."""
    with tempfile.TemporaryDirectory(prefix="course-browser-") as tmp:
        tmp = Path(tmp)
        root, runtime, settings = tmp / "root", tmp / "runtime", tmp / "settings"
        for d in (root, runtime, settings):
            d.mkdir()
        stage_course(repo, root)
        for rel, value in LAB_SETTINGS.items():
            (settings / rel).parent.mkdir(parents=True, exist_ok=True)
            (settings / rel).write_text(json.dumps(value))
        token = secrets.token_hex(16)
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime),
                   JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTERLAB_SETTINGS_DIR=str(settings),
                   JUPYTERLAB_WORKSPACES_DIR=str(tmp / "ws"))
        env.pop("MPLBACKEND", None)  # notebooks use the inline backend, as students get it
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",  # 0: the OS picks a free port
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--ServerApp.allow_root=True", "--LabApp.expose_app_in_browser=True"]
        log = tmp / "server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_die_with_parent)
        lab = None
        try:
            lab = _wait_ready(proc, runtime, token, log, root)
            yield lab
        finally:
            _stop(proc, lab)


@contextmanager
def chromium_browser():
    """Yield a headless Playwright Browser running Debian's Chromium; always close it."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# --- page-side scripts (run in JupyterLab through window.jupyterapp) -----------------------

def _retained(fn_js: str) -> str:
    """Wrap an async page script so that window holds its promise until it settles.

    Chromium's inspector tracks the promise page.evaluate awaits through a weak handle; when
    nothing in the page retains it, V8 may collect it mid-wait and Playwright fails with
    "Resulting promise was garbage collected" (CI, exercises/fa/01, 2026-12-03). A strong
    reference from window closes that whole class, not one script.
    """
    return f"""(arg) => {{
  const keep = window.__courseKeep || (window.__courseKeep = new Set());
  const p = ({fn_js})(arg);
  keep.add(p);
  p.then(() => keep.delete(p), () => keep.delete(p));
  return p;
}}"""


# Installed once per page: every wait inside the page is bounded, so page.evaluate always returns.
_WITHIN_JS = """() => {
  window.__courseWithin = (promise, ms) =>
    Promise.race([promise, new Promise(r => setTimeout(() => r('timeout'), ms))]);
}"""

_OPEN_JS = """async ([path, timeoutMs]) => {
  const app = window.jupyterapp, within = window.__courseWithin;
  const opening = app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  const w = await within(opening, timeoutMs);
  if (w === 'timeout') return {ready: false, wanted: null, kernel: null};
  window.__courseNotebook = w;
  app.shell.activateById(w.id);
  // the launcher JupyterLab opens when the last tab closes would only clutter screenshots
  [...app.shell.widgets('main')].filter(x => x.id.startsWith('launcher')).forEach(x => x.close());
  // a kernel-selection dialog (unknown kernelspec) keeps sessionContext.ready pending
  let poll;
  const dialog = new Promise(r => {
    poll = setInterval(() => document.querySelector('.jp-Dialog') && r('dialog'), 200);
  });
  const ready = await within(
    Promise.race([Promise.all([w.context.ready, w.sessionContext.ready]), dialog]), timeoutMs);
  clearInterval(poll);
  const t0 = Date.now();
  while (Array.isArray(ready) && !w.sessionContext.session?.kernel && Date.now() - t0 < timeoutMs)
    await new Promise(r => setTimeout(r, 100));
  return {
    ready: Array.isArray(ready),
    wanted: (w.context.model.getMetadata('kernelspec') || {}).name || null,
    kernel: w.sessionContext.session?.kernel?.name || null,
  };
}"""
_OPEN_JS = _retained(_OPEN_JS)

_RUN_ALL_JS = """async (timeoutMs) => {
  const app = window.jupyterapp, w = window.__courseNotebook;
  app.shell.activateById(w.id);
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const run = app.commands.execute('notebook:run-all-cells');  // resolves false when a cell fails
  const result = await window.__courseWithin(run.then(ok => ok ? 'done' : 'stopped'), timeoutMs);
  const t0 = Date.now();  // outputs of the last cell may still be arriving
  while (w.sessionContext.session?.kernel?.status !== 'idle' && Date.now() - t0 < 10000)
    await sleep(100);
  return {result, status: w.sessionContext.session?.kernel?.status || null};
}"""
_RUN_ALL_JS = _retained(_RUN_ALL_JS)

# One entry per cell: what the model holds (authoritative for errors) and what the DOM shows.
_REPORT_JS = """() => {
  const w = window.__courseNotebook;
  if (!w) return [];
  return w.content.widgets.map((cell, index) => {
    const m = cell.model, node = cell.node;
    node.dataset.courseCell = index;  // lets Playwright locate the cell by index
    const outputs = m.type === 'code' ? m.outputs.toJSON() : [];
    const imgs = [...node.querySelectorAll('.jp-Cell-outputWrapper img')];
    return {
      index, type: m.type, source: m.sharedModel.getSource(),
      executionCount: m.type === 'code' ? m.executionCount : null,
      errors: outputs.filter(o => o.output_type === 'error').map(o => `${o.ename}: ${o.evalue}`),
      modelImages: outputs.filter(o => o.data && o.data['image/png']).length,
      widgetOutputs: outputs.filter(o => o.data?.['application/vnd.jupyter.widget-view+json']).length,
      text: node.querySelector('.jp-Cell-outputWrapper')?.textContent || '',
      widgetViews: node.querySelectorAll('.jp-OutputArea-output .jupyter-widgets').length,
      sliders: node.querySelectorAll('.widget-slider .noUi-handle').length,
      progress: node.querySelectorAll('.widget-progress, .progress').length,
      controls: node.querySelectorAll(['.widget-slider', '.widget-dropdown', '.widget-toggle-buttons',
        '.widget-radio', '.widget-checkbox', '.widget-button', '.widget-text'].join(',')).length,
      images: imgs.length,
      brokenImages: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length,
    };
  });
}"""

_PENDING_JS = """() => {
  const text = window.__courseNotebook.content.node.textContent;
  return text.includes('Loading widget...') ||
    [...window.__courseNotebook.content.node.querySelectorAll('.jp-Cell-outputWrapper img')]
      .some(i => !i.complete);
}"""

# What a slider drives: Output/HTML/Image widgets in the cell (never the controls themselves).
_DRIVEN_JS = """async (index) => {
  const node = window.__courseNotebook.content.widgets[index].node;
  const driven = '.widget-output, .widget-html, .widget-htmlmath, .widget-image';
  const parts = [...node.querySelectorAll(driven)].filter(el => !el.parentElement.closest(driven));
  const images = el => el.tagName === 'IMG' ? [el] : [...el.querySelectorAll('img')];
  const describe = async img => {  // by content: Image widgets get a fresh blob: URL per update
    try {
      const bytes = await (await fetch(img.src)).arrayBuffer();
      const hash = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
      const hex = [...hash.slice(0, 8)].map(b => b.toString(16).padStart(2, '0')).join('');
      return `[image ${bytes.byteLength} bytes, sha256 ${hex}]`;
    } catch (err) {
      return `[image not readable: ${img.src.slice(0, 40)}]`;
    }
  };
  const lines = [];
  for (const el of parts) {
    lines.push(el.textContent.trim());
    for (const img of images(el)) lines.push(await describe(img));
  }
  return lines.join('\\n');
}"""
_DRIVEN_JS = _retained(_DRIVEN_JS)

_READOUT_JS = """(index) => {
  const n = window.__courseNotebook.content.widgets[index].node.querySelector('.widget-slider');
  return n.querySelector('.widget-readout')?.textContent
    ?? n.querySelector('.noUi-handle')?.getAttribute('aria-valuenow');
}"""

_CLOSE_JS = """async (timeoutMs) => {
  const w = window.__courseNotebook;
  if (!w) return;
  await window.__courseWithin(w.sessionContext.shutdown(), timeoutMs);
  w.context.model.dirty = false;  // close without the save prompt: the staged copy is throwaway
  w.dispose();
  window.__courseNotebook = null;
}"""
_CLOSE_JS = _retained(_CLOSE_JS)

# True when the kernel is idle and every image in the cell finished loading.
_QUIET_JS = """(index) => {
  const w = window.__courseNotebook;
  return w.sessionContext.session?.kernel?.status === 'idle' &&
    [...w.content.widgets[index].node.querySelectorAll('img')].every(i => i.complete);
}"""

# Wait (bounded) until every image in the notebook is decoded, so screenshots show whole figures.
_DECODED_JS = """async () => {
  const imgs = [...window.__courseNotebook.content.node.querySelectorAll('img')];
  await window.__courseWithin(Promise.all(imgs.map(i => i.decode().catch(() => null))), 10000);
}"""
_DECODED_JS = _retained(_DECODED_JS)

# Once the layout is restored, hide the file browser: screenshots show the notebook.
_TIDY_JS = """async () => {
  await window.jupyterapp.restored;
  window.jupyterapp.shell.collapseLeft();
}"""
_TIDY_JS = _retained(_TIDY_JS)

_SCROLL_JS = """(index) => {
  window.__courseNotebook.content.widgets[index].node.scrollIntoView({block: 'start'});
}"""


def open_lab(browser, lab: Lab):
    """A new page with JupyterLab loaded and its app object available."""
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(60_000)
    page.goto(f"{lab.url}lab?reset&token={lab.token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=180_000)
    page.evaluate(_WITHIN_JS)
    page.evaluate(_TIDY_JS)
    return page


def run_notebook(page, path: str, run: bool = True) -> dict:
    """Open `path` (relative to the served root), run all cells (with ``run``; otherwise keep the
    stored outputs), wait for the kernel to go idle and for widgets/images to render; return the
    open/run results and a per-cell report."""
    opened = page.evaluate(_OPEN_JS, [path, OPEN_TIMEOUT_S * 1000])
    if not (opened["ready"] and opened["kernel"]):  # nothing to run; the report says why
        return {"opened": opened, "ran": {"result": "not started", "status": None},
                "dialogs": page.locator(".jp-Dialog").all_inner_texts(),
                "cells": page.evaluate(_REPORT_JS)}
    ran = page.evaluate(_RUN_ALL_JS, RUN_ALL_TIMEOUT_S * 1000) if run else {"result": "stored", "status": None}
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    while page.evaluate(_PENDING_JS) and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    page.wait_for_timeout(300)  # let late widget views attach before reading the DOM
    # and until every figure in the model is an <img> in the page (stored outputs render lazily)
    _poll(page, lambda: all(c["images"] >= c["modelImages"] for c in page.evaluate(_REPORT_JS)), RENDER_TIMEOUT_S, 250)
    dialogs = page.locator(".jp-Dialog").all_inner_texts()
    return {"opened": opened, "ran": ran, "dialogs": dialogs, "cells": page.evaluate(_REPORT_JS)}


def _poll(page, fn, timeout_s: float, interval_ms: int = 200):
    """Call fn() until it returns something truthy or timeout_s passes; return the last value."""
    deadline = time.monotonic() + timeout_s
    while not (value := fn()) and time.monotonic() < deadline:
        page.wait_for_timeout(interval_ms)
    return value


def _settled(page, cell_index: int, timeout_s: float) -> str:
    """Wait until the kernel is idle and the cell's driven output stopped changing; return it."""
    last = [None]

    def still():
        now = page.evaluate(_DRIVEN_JS, cell_index)
        same, last[0] = now == last[0], now
        return same and page.evaluate(_QUIET_JS, cell_index)
    _poll(page, still, timeout_s, interval_ms=300)
    return last[0]


def _press_until_moved(page, handle, cell_index: int, key: str, readout: str) -> str:
    """Press key on the focused slider handle; return the readout once it differs from readout."""
    handle.focus()
    page.keyboard.press(key)
    _poll(page, lambda: page.evaluate(_READOUT_JS, cell_index) != readout, 3)
    return page.evaluate(_READOUT_JS, cell_index)


def wiggle_slider(page, cell_index: int) -> list[tuple[str, str]]:
    """Move the cell's first slider one step, back, and forward again with the keyboard, as a
    student would, waiting after each move until the output it drives has settled.

    Returns [(readout, driven output)] for the start and after each of the three moves. A
    deterministic callback that renders completely shows the same output at the same value.
    """
    handle = page.locator(f'[data-course-cell="{cell_index}"] .widget-slider .noUi-handle').first
    handle.scroll_into_view_if_needed()
    start = page.evaluate(_READOUT_JS, cell_index)
    states = [(start, _settled(page, cell_index, SLIDER_TIMEOUT_S))]
    keys = ["ArrowRight", "ArrowLeft", "ArrowRight"]
    for step in range(3):
        readout, driven = states[-1]
        moved = _press_until_moved(page, handle, cell_index, keys[step], readout)
        if moved == readout and step == 0:  # already at the maximum: wiggle leftwards
            keys = ["ArrowLeft", "ArrowRight", "ArrowLeft"]
            moved = _press_until_moved(page, handle, cell_index, keys[0], readout)
        _poll(page, lambda: page.evaluate(_DRIVEN_JS, cell_index) != driven, SLIDER_TIMEOUT_S)
        states.append((moved, _settled(page, cell_index, SLIDER_TIMEOUT_S)))
    return states


def screenshot(page, cell_index: int | None, path: Path) -> None:
    """Save what the student sees, scrolled to `cell_index` (the top when None)."""
    if cell_index is not None:
        page.evaluate(_SCROLL_JS, cell_index)
    page.evaluate(_DECODED_JS)
    # Software raster on a busy CPU can lag the DOM: a figure came out half painted once.
    # Take shots until two in a row are identical (bounded), and keep the last.
    shot = page.screenshot()
    for _ in range(10):
        page.wait_for_timeout(400)
        previous, shot = shot, page.screenshot()
        if shot == previous:
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(shot)


def close_notebook(page) -> None:
    """Dismiss any dialog, shut the notebook's kernel down and close it without saving."""
    for _ in range(5):
        if not page.locator(".jp-Dialog").count():
            break
        page.keyboard.press("Escape")
        page.wait_for_timeout(200)
    page.evaluate(_CLOSE_JS, 30_000)


# every async page script goes through _retained (see there); a new one that does not fails here
assert not [k for k, v in list(globals().items()) if k.endswith("_JS") and isinstance(v, str)
            and v.lstrip().startswith("async")], "wrap async page scripts in _retained"
