"""The lvmh web UI: static files served by the lvmh front end at ``/`` and ``/static/<name>``.

The page holds no data (every API call and the browser WebSocket carry the token),
so these routes need no auth. Files are served only by name from a fixed list built
at import time (no path from the request ever reaches the file system), with
``Cache-Control: no-cache`` and a strict Content-Security-Policy. ``index.html`` is
served with a ``modulepreload`` link for every module the page imports (``module_graph``),
so that a page load fetches them at once (docs/web-ui.md, "Long conversations").

Usage in the daemon's app::

    from lvmh_adapter.web import static_routes
    app.add_routes(static_routes())
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from aiohttp import web

WEB_DIR = Path(__file__).resolve().parent

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
}

# Only same-origin scripts, styles, connections (REST and /ws); images also from blob: (attachment previews).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)

HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


VENDOR_DIR = WEB_DIR / "vendor"  # marked, DOMPurify, highlight.js: pinned, from scripts/vendor-web.sh


def _static_files(folder: Path, prefix: str = "") -> dict[str, Path]:
    files = {}
    if folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if entry.is_file() and entry.suffix in CONTENT_TYPES and entry.name != "index.html":
                files[prefix + entry.name] = entry
    return files


STATIC_FILES = {**_static_files(WEB_DIR), **_static_files(VENDOR_DIR, "vendor/")}


_bytes: dict[Path, tuple[str, bytes]] = {}


def _read(path: Path, etag: str) -> bytes:
    """A shipped file's bytes, read again only when it changed (a page load asks for some 45 of them)."""
    cached = _bytes.get(path)
    if cached is None or cached[0] != etag:
        cached = _bytes[path] = (etag, path.read_bytes())
    return cached[1]


def _file_response(path: Path, request: web.Request) -> web.StreamResponse:
    try:
        stat = path.stat()
    except OSError:
        raise web.HTTPNotFound(text='{"error": "not found"}', content_type="application/json")
    etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
    headers = dict(HEADERS)
    headers["ETag"] = etag
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    body = _read(path, etag)
    headers["Content-Type"] = CONTENT_TYPES[path.suffix]
    return web.Response(body=body, headers=headers)


_IMPORT = re.compile(r'^\s*import\s[^;]*?from\s+"(\./[^"]+)"|^\s*import\s+"(\./[^"]+)"', re.M)


def module_graph(entry: str = "app.js") -> list[str]:
    """Every module ``entry`` imports, directly or not (names as ``/static/`` serves them), in the order found."""
    seen, queue = [entry], [entry]
    while queue:
        name = queue.pop(0)
        path = STATIC_FILES.get(name)
        if path is None:
            continue
        base = os.path.dirname(name)
        for m in _IMPORT.finditer(path.read_text(encoding="utf-8")):
            spec = (m.group(1) or m.group(2))[2:]
            dep = os.path.normpath(os.path.join(base, spec)) if base else spec
            if dep in STATIC_FILES and dep not in seen:
                seen.append(dep)
                queue.append(dep)
    return seen


_index_cache: dict = {}


def index_html() -> bytes:
    """index.html with a ``modulepreload`` link for every module the page imports: the browser fetches them all
    at once instead of level by level of the import graph (a few round trips less before the page starts)."""
    files = [WEB_DIR / "index.html", *STATIC_FILES.values()]
    stamp = tuple(f.stat().st_mtime_ns for f in files)
    if _index_cache.get("stamp") != stamp:
        text = (WEB_DIR / "index.html").read_text(encoding="utf-8")
        tag = '<script type="module" src="/static/app.js"></script>'
        links = "".join(f'\n  <link rel="modulepreload" href="/static/{name}">' for name in module_graph()[1:])
        _index_cache.update(stamp=stamp, body=text.replace(tag, tag + links).encode())
    return _index_cache["body"]


async def index(request: web.Request) -> web.StreamResponse:
    body = index_html()
    headers = dict(HEADERS)
    headers["ETag"] = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    if request.headers.get("If-None-Match") == headers["ETag"]:
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = CONTENT_TYPES[".html"]
    return web.Response(body=body, headers=headers)


async def static_file(request: web.Request) -> web.StreamResponse:
    path = STATIC_FILES.get(request.match_info["name"])
    if path is None:
        raise web.HTTPNotFound(text='{"error": "not found"}', content_type="application/json")
    return _file_response(path, request)


async def vendor_file(request: web.Request) -> web.StreamResponse:
    path = STATIC_FILES.get("vendor/" + request.match_info["file"])
    if path is None:
        raise web.HTTPNotFound(text='{"error": "not found"}', content_type="application/json")
    return _file_response(path, request)


def static_routes() -> list[web.RouteDef]:
    """``GET /`` (index.html), ``GET /static/{name}`` (app modules, style, icon) and
    ``GET /static/vendor/{name}`` (the vendored libraries); no auth."""
    return [
        web.get("/", index),
        web.get("/static/{name}", static_file),
        web.get("/static/vendor/{file}", vendor_file),
    ]


def web_files() -> list[str]:
    """Names of the shipped UI files (for packaging checks)."""
    return ["index.html", *STATIC_FILES]


__all__ = ["static_routes", "web_files", "WEB_DIR", "CSP"]

if __name__ == "__main__":  # pragma: no cover - quick local preview: python -m lvmh_adapter.web [port]
    import sys

    app = web.Application()
    app.add_routes(static_routes())
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "8699")))
