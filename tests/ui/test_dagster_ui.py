"""The Dagster UI as a user sees it: the demo materialised, `dagster dev` serving it, headless Chromium.

One module-scoped fixture runs `meddevkg demo` (model-free hashing encoder) into a temporary
MEDDEVKG_HOME and starts `dagster dev` on 127.0.0.1 in its own process group; the tests drive the
system Chromium over the DevTools protocol (the `websockets` client, which dagster-webserver already
installs through uvicorn[standard]; no browser download) and save screenshots to
$MEDDEVKG_SCREENSHOTS or <repo>/.meddevkg/screenshots/.
Skipped, saying why, when no Chromium is installed (scripts/system_packages.sh installs it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
GROUPS = ["sources", "ontology", "entities", "embeddings", "companies", "candidates", "rerank", "graph", "evaluation"]
KEY_ASSETS = ["pma_documents", "candidate_pool", "reranked_links", "link_evaluation", "meddevkg", "graph_export"]
PLOTS = ["recall_volume_plot", "rank_distribution_plot"]
WIDTH, HEIGHT = 1600, 1000


def _chromium() -> str | None:
    for candidate in (os.environ.get("MEDDEVKG_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (/usr/bin/chromium, chromium on PATH or "
                                "$MEDDEVKG_CHROMIUM); scripts/system_packages.sh installs it")


def screenshot_dir() -> Path:
    out = Path(os.environ.get("MEDDEVKG_SCREENSHOTS") or REPO / ".meddevkg" / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(base: str, query: str, timeout: float = 10) -> dict:
    req = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)["data"]


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the whole process group (webserver, daemon, code servers), then SIGKILL what is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the leader
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class DagsterUI:
    def __init__(self, base: str, home: Path, asset_names: list[str]):
        self.base, self.home, self.asset_names = base, home, asset_names


@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory) -> DagsterUI:
    home = tmp_path_factory.mktemp("meddevkg_home")
    (home / "tmp").mkdir()  # dagster dev's workspace and socket directories: a stop under load left them in /tmp
    env = {**os.environ, "MEDDEVKG_HOME": str(home), "MEDDEVKG_EMBEDDING_MODEL": "hashing",
           "DAGSTER_HOME": str(home / "dagster_home"), "TMPDIR": str(home / "tmp")}
    for var in ("MEDDEVKG_CORPUS", "MEDDEVKG_DUCKDB", "MEDDEVKG_EMBEDDING_CACHE", "MEDDEVKG_CROSS_ENCODER",
                "MEDDEVKG_DEVICE_SOURCE", "MEDDEVKG_PATENT_SOURCE"):
        env.pop(var, None)  # the bundled demo corpus and the defaults, whatever the caller's shell says
    meddevkg = VENV_BIN / "meddevkg"
    cmd = [str(meddevkg)] if meddevkg.is_file() else [sys.executable, "-m", "meddevkg_dagster.cli"]
    demo = subprocess.run([*cmd, "demo"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, f"meddevkg demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = (home / "dagster_dev.log").open("w")
    dagster = VENV_BIN / "dagster"
    proc = subprocess.Popen([*([str(dagster)] if dagster.is_file() else [sys.executable, "-m", "dagster"]), "dev",
                             "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
                            env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, names, last = time.monotonic() + 120, None, ""
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"dagster dev exited early:\n{(home / 'dagster_dev.log').read_text()[-3000:]}"
            try:
                data = _graphql(base, "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus "
                                      "locationOrLoadError { __typename ... on PythonError { message } } } } } "
                                      "assetNodes { assetKey { path } } }")
                entries = data["workspaceOrError"]["locationEntries"]
                last = json.dumps(entries)
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    errors = [e["locationOrLoadError"] for e in entries
                              if e["locationOrLoadError"]["__typename"] != "RepositoryLocation"]
                    assert not errors, f"the code location failed to load: {errors}"
                    names = sorted("/".join(n["assetKey"]["path"]) for n in data["assetNodes"])
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError, TypeError):
                pass
            time.sleep(1)
        assert names, f"dagster dev did not serve the code location within 120 s ({last}):\n" \
                      f"{(home / 'dagster_dev.log').read_text()[-3000:]}"
        # What clicking "Skip" on the first-visit community dialog does, so it does not cover the pages.
        _graphql(base, "mutation { setNuxSeen }")
        yield DagsterUI(base, home, names)
    finally:
        _stop_group(proc)
        log.close()


# ##### A minimal DevTools-protocol driver #########################################################
class Browser:
    """Headless Chromium on one page target, driven over the DevTools websocket."""

    def __init__(self, user_data_dir: Path):
        from websockets.sync.client import connect

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},{HEIGHT}",
             f"--user-data-dir={user_data_dir}", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--hide-scrollbars", "--lang=en-US", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "TMPDIR": str(user_data_dir)})  # its singleton directory, left when it is stopped
        try:
            port_file = user_data_dir / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
                assert self.proc.poll() is None, "Chromium exited at start"
                assert time.monotonic() < deadline, "Chromium did not open its DevTools port within 30 s"
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                target = next(t for t in json.load(resp) if t["type"] == "page")
            self.ws = connect(target["webSocketDebuggerUrl"], max_size=256 * 2**20, open_timeout=10)
        except BaseException:
            self.close()
            raise
        self._id = 0
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            _stop_group(self.proc)

    def send(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:200]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        result = self.send("Page.navigate", url=url)
        assert "errorText" not in result, f"{url}: {result['errorText']}"
        path = urllib.parse.urlsplit(url).path
        self.wait(f"document.readyState === 'complete' && location.pathname === {json.dumps(path)}", 30,
                  f"{url} to load")

    def wait(self, expression: str, timeout: float = 60, what: str = ""):
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                self.screenshot(screenshot_dir() / "timeout.png")
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or expression[:200]}")
            time.sleep(0.3)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def click_icon_button(self, icon: str, exclude_text: str = "") -> bool:
        return self.js("""(() => {
            const b = [...document.querySelectorAll('[aria-label=ICON]')].map(i => i.closest('button'))
              .find(b => b && !(EXCLUDE && b.textContent.includes(EXCLUDE)));
            if (b) b.click();
            return !!b;
        })()""".replace("ICON", json.dumps(icon)).replace("EXCLUDE", json.dumps(exclude_text)))

    def drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 12) -> None:
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x0, y=y0)
        self.send("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left", buttons=1, clickCount=1)
        for k in range(1, steps + 1):
            self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x0 + (x1 - x0) * k / steps,
                      y=y0 + (y1 - y0) * k / steps, button="left", buttons=1)
        self.send("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y1, button="left", buttons=0, clickCount=1)


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Browser:
    b = Browser(tmp_path_factory.mktemp("chromium_profile"))
    try:
        yield b
    finally:
        b.close()


def _dismiss_community_dialog(browser: Browser) -> None:
    browser.js("""(() => {
        const d = [...document.querySelectorAll('[role=dialog]')]
          .find(d => d.textContent.includes('Join the Dagster'));
        const skip = d && [...d.querySelectorAll('button')].find(b => b.textContent.trim() === 'Skip');
        if (skip) skip.click();
    })()""")


# ##### The asset graph ############################################################################
# Names and statuses of the asset nodes drawn in the graph (each node is an SVG foreignObject).
_NODES = """JSON.stringify([...document.querySelectorAll('svg foreignObject')]
  .map(f => [f.querySelector('[class*=AssetNode_assetName], [class*=AssetNode_minimalName]'),
             f.querySelector('[class*=minimalAssetNodeBox]'), f])
  .filter(([n]) => n)
  .map(([n, box, f]) => {const r = f.getBoundingClientRect();
    return {name: n.textContent.trim(), style: box ? box.getAttribute('style') : '', text: f.textContent,
            rect: [r.left, r.top, r.right, r.bottom]}}))"""
# The graph viewport (the element around the zoomed SVG) and the box of everything drawn in it.
_LAYOUT = """JSON.stringify((() => {
  const svg = document.querySelector('svg[class*=svgContainer]');
  const v = svg.parentElement.parentElement.getBoundingClientRect();
  const rs = [...svg.querySelectorAll('foreignObject')].map(f => f.getBoundingClientRect()).filter(r => r.width > 0);
  return {view: [v.left, v.top, v.right, v.bottom],
          graph: [Math.min(...rs.map(r => r.left)), Math.min(...rs.map(r => r.top)),
                  Math.max(...rs.map(r => r.right)), Math.max(...rs.map(r => r.bottom))]};
})())"""


def _matches(label: str, name: str) -> bool:
    """The graph shortens long names in the middle ("cross_enco…_scores")."""
    if "…" not in label:
        return label == name
    head, tail = label.split("…", 1)
    return name.startswith(head) and name.endswith(tail) and len(name) >= len(head) + len(tail)


def _fit_graph(browser: Browser) -> None:
    """Centre the whole graph in its viewport and zoom in as far as it still fits, the way a user would."""
    n_nodes = len(json.loads(browser.js(_NODES)))

    def layout():
        d = json.loads(browser.js(_LAYOUT))
        (vx0, vy0, vx1, vy1), g = d["view"], d["graph"]
        return (vx0 + 10, vy0 + 60, vx1 - 70, vy1 - 10), g  # keep clear of the filter bar and zoom controls

    def centre():
        (vx0, vy0, vx1, vy1), (gx0, gy0, gx1, gy1) = layout()
        dx, dy = (vx0 + vx1 - gx0 - gx1) / 2, (vy0 + vy1 - gy0 - gy1) / 2
        if abs(dx) + abs(dy) < 4:
            return
        # drag the empty canvas, from whichever corner of the viewport is not covered by the graph
        for sx, sy in ((vx0 + 5, vy1 - 5), (vx1 - 5, vy1 - 5), (vx0 + 5, vy0 + 5), (vx1 - 5, vy0 + 5)):
            if browser.js(f"!document.elementFromPoint({sx}, {sy}).closest('foreignObject')"):
                browser.drag(sx, sy, sx + dx, sy + dy)
                time.sleep(0.4)
                return

    def fits():
        (vx0, vy0, vx1, vy1), (gx0, gy0, gx1, gy1) = layout()
        # nodes scrolled out of view are not drawn at all, so count them too
        return (gx1 - gx0 <= vx1 - vx0 and gy1 - gy0 <= vy1 - vy0
                and len(json.loads(browser.js(_NODES))) >= n_nodes)

    centre()
    for _ in range(10):
        if not fits():
            break
        browser.click_icon_button("zoom_in")
        time.sleep(0.5)
        centre()
    while not fits() and browser.click_icon_button("zoom_out"):
        time.sleep(0.5)
        centre()
    time.sleep(0.8)  # let edges and labels settle after the last move


def test_global_asset_lineage_shows_every_asset_materialised(dagster_ui, browser):
    assert set(KEY_ASSETS) <= set(dagster_ui.asset_names), dagster_ui.asset_names
    browser.goto(dagster_ui.base + "/server_info")
    # a roomier graph: vertical layout, the Dagster navigation folded to icons (both kept in localStorage)
    browser.js("localStorage.setItem('asset-graph-direction', JSON.stringify('vertical'));"
               "localStorage.setItem('dagster-nav-collapsed', 'true')")
    # the page the "Lineage" navigation item opens, with every group expanded (Dagster keeps that in the URL)
    expanded = ",".join(f"global@global:{g}" for g in GROUPS)
    browser.goto(f"{dagster_ui.base}/asset-groups?expanded={expanded}")
    _dismiss_community_dialog(browser)
    browser.wait("document.body.innerText.includes('Global asset lineage')", 30, "the lineage page")
    expected = dagster_ui.asset_names

    def drawn():
        return json.loads(browser.js(_NODES))

    def all_drawn_and_green():
        nodes = drawn()
        return (all(any(_matches(n["name"], a) for n in nodes) for a in expected)
                and all("accent-green" in n["style"] for n in nodes if n["style"]))

    deadline = time.monotonic() + 60
    while not all_drawn_and_green():
        if time.monotonic() > deadline:
            browser.screenshot(screenshot_dir() / "timeout.png")
            raise AssertionError(f"the graph did not show every asset as materialised within 60 s: {drawn()}")
        time.sleep(0.5)
    browser.click_icon_button("panel_show_right", exclude_text="navigation")  # hide the asset tree sidebar
    time.sleep(0.5)
    _fit_graph(browser)

    nodes = drawn()
    labels = [n["name"] for n in nodes]
    # Fitted to the screen, Dagster draws every node as a status box: all of them green, none unstyled
    # (the wait above could pass on nodes drawn without their box).
    assert nodes and all("accent-green" in n["style"] for n in nodes), [(n["name"], n["style"]) for n in nodes]
    for asset in KEY_ASSETS:
        assert asset in labels, f"{asset} not drawn in the graph: {labels}"
    missing = [a for a in expected if not any(_matches(label, a) for label in labels)]
    assert not missing, f"assets missing from the graph: {missing}"
    page_text = browser.js("document.body.innerText")
    for group in GROUPS:
        assert group in page_text, f"group {group} not shown"
    layout = json.loads(browser.js(_LAYOUT))
    (vx0, vy0, vx1, vy1), (gx0, gy0, gx1, gy1) = layout["view"], layout["graph"]
    assert vx0 - 1 <= gx0 and gx1 <= vx1 + 1 and vy0 - 1 <= gy0 and gy1 <= vy1 + 1, f"graph cut off: {layout}"

    shot = browser.screenshot(screenshot_dir() / "asset_graph.png")
    assert shot.stat().st_size > 10_000
    browser.js("localStorage.removeItem('dagster-nav-collapsed')")


# ##### The link_evaluation asset page #############################################################
def test_link_evaluation_page_shows_metrics_and_renders_the_plots(dagster_ui, browser):
    browser.goto(dagster_ui.base + "/server_info")
    browser.js("localStorage.removeItem('dagster-nav-collapsed')")
    browser.goto(dagster_ui.base + "/assets/link_evaluation")
    _dismiss_community_dialog(browser)
    def row(key: str) -> str:  # the metadata table row of one key
        return f"[...document.querySelectorAll('tr')].find(r => r.cells[0] && r.cells[0].textContent.trim() === " \
               f"{json.dumps(key)})"

    browser.wait(f"!!({row(PLOTS[0])})", 60, "the metadata table of the latest materialisation")
    text = browser.js("document.body.innerText")
    assert "Latest materialization" in text
    for key in ("n_devices", "pool_recall", "link_recall", "pipeline_MRR"):
        assert key in text, f"metadata {key} not shown"
    # the metadata table, scrolled so the ranking figures and the plot links are in view
    browser.js(f"({row('pipeline_MRR')}).scrollIntoView({{block: 'center'}})")
    time.sleep(0.5)
    shots = [browser.screenshot(screenshot_dir() / "link_evaluation_metadata.png")]

    for key in PLOTS:
        # markdown metadata sits behind "[Show Markdown]": open it as a user would
        assert browser.js("""(() => {const r = ROW; if (!r) return false; r.scrollIntoView({block: 'center'});
                              const a = [...r.querySelectorAll('a')].find(a => a.textContent.includes('Markdown'));
                              if (a) a.click(); return !!a})()""".replace("ROW", row(key))), f"no link to {key}"
        img = browser.wait("""(() => {const d = [...document.querySelectorAll('[role=dialog]')]
                                  .find(d => d.textContent.includes(KEY));
                                const i = d && d.querySelector('img');
                                return i && i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0 &&
                                  JSON.stringify({src: i.src.slice(0, 22), w: i.naturalWidth, h: i.naturalHeight,
                                                  shown: i.getBoundingClientRect().width})})()"""
                           .replace("KEY", json.dumps(key)), 30, f"the {key} image to decode")
        img = json.loads(img)
        assert img["src"] == "data:image/png;base64,", img
        assert img["w"] >= 400 and img["h"] >= 300 and img["shown"] >= 400, img
        time.sleep(0.3)
        shots.append(browser.screenshot(screenshot_dir() / f"link_evaluation_{key.removesuffix('_plot')}.png"))
        browser.js("""[...document.querySelectorAll('[role=dialog] button')]
                      .find(b => b.textContent.trim() === 'Close').click()""")
        browser.wait("!document.querySelector('[role=dialog]')", 10, "the dialog to close")
    for shot in shots:
        assert shot.stat().st_size > 10_000, shot
