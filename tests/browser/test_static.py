"""The web UI's static routes (lvmh_adapter.web.static_routes), without a browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from lvmh_adapter.web import CSP, WEB_DIR, static_routes, web_files
from tests.peers import missing_peer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(aiohttp_client):
    app = web.Application()
    app.add_routes(static_routes())
    return await aiohttp_client(app)


async def test_index_served_without_auth_and_not_cached(client):
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/html")
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["Content-Security-Policy"] == CSP
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    body = await resp.text()
    assert '<script type="module" src="/static/app.js">' in body


async def test_every_script_the_index_names_is_served_and_the_page_script_holds_the_whole_graph(client):
    """The page fetches and compiles one script for its modules (lvmh_adapter/webbundle.py), not one per module:
    every script index.html names is served 200 as JavaScript; /static/app.js holds app.js and every module it
    imports, directly or not (found by a scan of the files, not by the bundler), each once; no modulepreload is left."""
    from lvmh_adapter.web import app_bundle

    body = await (await client.get("/")).text()
    scripts = re.findall(r'<script type="module"(?: async)? src="/static/([^"]+)"></script>', body)
    assert scripts == ["boot.js", "app.js"] and "modulepreload" not in body
    for name in scripts:
        resp = await client.get(f"/static/{name}")
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/javascript"), name
    served = await (await client.get("/static/app.js")).text()
    assert served.encode() == app_bundle()[0]
    graph, queue = {"app.js"}, ["app.js"]
    while queue:
        name = queue.pop()
        for spec in re.findall(r'from\s+"\./([^"]+)"', (WEB_DIR / name).read_text()):
            dep = str(Path(name).parent / spec) if "/" in name else spec
            if dep not in graph:
                graph.add(dep)
                queue.append(dep)
    sections = re.findall(r"^const __lvmh_m\d+ = \(\(\) => \{ // ---- (\S+)$", served, re.M)
    assert sorted(sections) == sorted(graph) and sections[-1] == "app.js"
    assert {"markdown.js", "virtual.js", "vendor/marked.esm.js", "vendor/hljs-core.min.js"} <= set(sections)
    for name in graph:  # each module's own text is there (its import lines and `export` keywords aside)
        lines = [ln for ln in (WEB_DIR / name).read_text().splitlines() if not re.search(r"\b(import|export)\b", ln)]
        assert max(lines, key=len) in served, name
    # the first requests start while the page's script loads (boot.js, async, before app.js)
    assert body.index('src="/static/boot.js"') < body.index('src="/static/app.js"')


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/dom.js", "/static/vendor/hljs-go.min.js"])
async def test_etag_revalidation(client, path):
    resp = await client.get(path)
    etag = resp.headers["ETag"]
    again = await client.get(path, headers={"If-None-Match": etag})
    assert again.status == 304 and again.headers["ETag"] == etag
    assert again.headers["Content-Security-Policy"] == CSP and again.headers["Cache-Control"] == "no-cache"


@pytest.mark.parametrize(
    "path",
    ["/static/__init__.py", "/static/..%2F__init__.py", "/static/../web/__init__.py", "/static/nope.js", "/static/"],
)
async def test_unknown_or_traversal_paths_are_404(client, path):
    resp = await client.get(path)
    assert resp.status == 404


def test_modules_import_only_local_files():
    """No CDN, no network at run time: every import and asset URL is local (vendored libraries
    mention their home pages in comments, but import nothing)."""
    for name in web_files():
        text = (WEB_DIR / name).read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
        if not name.startswith("vendor/"):
            assert "http://" not in text and "https://" not in text, name
        for spec in re.findall(r'from\s+"([^"]+)"', text):
            here = (WEB_DIR / name).parent
            assert spec.startswith("./") and (here / spec[2:]).is_file(), (name, spec)


def test_vendored_libraries_are_pinned_with_licenses():
    """marked, DOMPurify and highlight.js, as scripts/vendor-web.sh fetched them: their licenses ship alongside."""
    vendor = WEB_DIR / "vendor"
    for lib in ("marked", "dompurify", "highlightjs"):
        assert (vendor / f"LICENSE.{lib}.txt").stat().st_size > 500, lib
    versions = (vendor / "VERSIONS.txt").read_text()
    script = (ROOT / "scripts" / "vendor-web.sh").read_text()
    for line in versions.splitlines()[1:]:
        if "sha256:" in line:
            spec, digest = line.split()
            assert f'"{spec} {digest.removeprefix("sha256:")}"' in script, line
    assert "vendor/marked.esm.js" in web_files() and "vendor/purify.es.mjs" in web_files()


def test_no_inner_html_with_data():
    """Everything is placed as text: our sources never assign innerHTML/outerHTML or use insertAdjacentHTML
    (markdown reaches the page as DOMPurify's DocumentFragment)."""
    for name in web_files():
        if name.endswith(".js") and not name.startswith("vendor/"):
            text = (WEB_DIR / name).read_text()
            assert not re.search(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write", text), name


def test_reducer_node_tests():
    """The page's pure modules (reducer.js, sessions.js, format.js, labels.js) under node's test runner."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(missing_peer("Node", "node is not on PATH (needed for the reducer's node tests)"))
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        pytest.skip(missing_peer("Node", f"node {version} is too old for node --test (need >= 18)"))
    proc = subprocess.run(
        [node, "--test", *sorted(str(p) for p in (ROOT / "tests/browser/js").glob("*.test.mjs"))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
