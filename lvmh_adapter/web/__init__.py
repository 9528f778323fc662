"""The lvmh web UI: static files served by the lvmh front end at ``/`` and ``/static/<name>``.

The page holds no data (every API call and the browser WebSocket carry the token),
so these routes need no auth. Files are served only by name from a fixed list built
at import time (no path from the request ever reaches the file system), with
``Cache-Control: no-cache`` and a strict Content-Security-Policy. The page's script,
``/static/app.js``, is served as one script holding app.js and every module it imports
(``app_bundle``, lvmh_adapter/webbundle.py): a page load fetches and compiles one file, not
some 35 (docs/web-ui.md, "Long conversations"). The modules stay served by name too, and the
highlight.js grammars are fetched from there on demand.

Usage in the daemon's app::

    from lvmh_adapter.web import static_routes
    app.add_routes(static_routes())
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from aiohttp import web

from ..webbundle import BundleError, build

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
    """A shipped file's bytes, read again only when it changed."""
    cached = _bytes.get(path)
    if cached is None or cached[0] != etag:
        cached = _bytes[path] = (etag, path.read_bytes())
    return cached[1]


def _response(request: web.Request, body: bytes, etag: str, content_type: str) -> web.StreamResponse:
    """``body`` with the page's headers and ``etag``; a 304 when the browser holds that version already."""
    headers = dict(HEADERS)
    headers["ETag"] = etag
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = content_type
    return web.Response(body=body, headers=headers)


def _file_response(path: Path, request: web.Request) -> web.StreamResponse:
    try:
        stat = path.stat()
    except OSError:
        raise web.HTTPNotFound(text='{"error": "not found"}', content_type="application/json")
    etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
    return _response(request, _read(path, etag), etag, CONTENT_TYPES[path.suffix])


ENTRY = "app.js"  # the page's script: served as the bundle of its whole module graph
LATE = frozenset({"vendor/hljs-core.min.js"})  # in the bundle, run at its first use (after the first paint)

_bundle: dict = {}


def _stat(name: str) -> tuple[int, int]:
    st = STATIC_FILES[name].stat()
    return st.st_mtime_ns, st.st_size


def app_bundle() -> tuple[bytes, str]:
    """``app.js`` and every module it imports as one script (lvmh_adapter/webbundle.py) and its ETag: built on
    first use, kept, and built again when one of its modules changed (an edit in a checkout shows on reload)."""
    if not _bundle or {n: _stat(n) for n in _bundle["modules"]} != _bundle["stamp"]:
        stamp: dict[str, tuple[int, int]] = {}

        def source(name: str) -> str:
            path = STATIC_FILES.get(name)
            if path is None:
                raise BundleError(f"{name} is not a shipped file of the web UI")
            stamp[name] = _stat(name)  # before the read: a file written meanwhile differs next time, and is read again
            return path.read_text(encoding="utf-8")

        built = build(ENTRY, source, LATE)
        body = built.text.encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        _bundle.update(modules=built.modules, stamp=stamp, body=body, etag=etag)
    return _bundle["body"], _bundle["etag"]


async def index(request: web.Request) -> web.StreamResponse:
    return _file_response(WEB_DIR / "index.html", request)


async def static_file(request: web.Request) -> web.StreamResponse:
    if request.match_info["name"] == ENTRY:
        body, etag = app_bundle()
        return _response(request, body, etag, CONTENT_TYPES[".js"])
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


__all__ = ["static_routes", "web_files", "WEB_DIR", "CSP", "LATE"]

if __name__ == "__main__":  # pragma: no cover - quick local preview: python -m lvmh_adapter.web [port]
    import sys

    app = web.Application()
    app.add_routes(static_routes())
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "8699")))
