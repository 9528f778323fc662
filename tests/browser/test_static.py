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


async def test_index_preloads_every_module_the_page_imports(client):
    """The page's modules are fetched at once (modulepreload), not level by level of the import graph:
    every module app.js imports, directly or not, is listed, served, and nothing else is."""
    from lvmh_adapter.web import module_graph

    body = await (await client.get("/")).text()
    listed = re.findall(r'<link rel="modulepreload" href="/static/([^"]+)">', body)
    graph = module_graph()
    assert graph[0] == "app.js" and sorted(listed) == sorted(graph[1:])
    assert {"markdown.js", "virtual.js", "vendor/marked.esm.js", "vendor/hljs-core.min.js"} <= set(listed)
    for name in listed:
        assert (await client.get(f"/static/{name}")).status == 200, name
    # every import of every listed module is listed too
    for name in ["app.js", *listed]:
        for spec in re.findall(r'from\s+"\./([^"]+)"', (WEB_DIR / name).read_text()):
            dep = str(Path(name).parent / spec) if "/" in name else spec
            assert dep in listed, (name, dep)
    # the first requests start while the modules load (boot.js, async, before app.js)
    assert body.index('src="/static/boot.js"') < body.index('src="/static/app.js"')


async def test_every_shipped_file_is_served_with_its_type(client):
    types = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for name in web_files():
        if name == "index.html":
            continue
        resp = await client.get(f"/static/{name}")
        assert resp.status == 200, name
        assert resp.headers["Content-Type"].startswith(types[Path(name).suffix]), name
        assert resp.headers["Cache-Control"] == "no-cache"
        assert await resp.read() == (WEB_DIR / name).read_bytes()


async def test_etag_revalidation(client):
    resp = await client.get("/static/app.js")
    etag = resp.headers["ETag"]
    again = await client.get("/static/app.js", headers={"If-None-Match": etag})
    assert again.status == 304


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
