"""The web UI's modules as one script (lvmh_adapter/webbundle.py): pure, no browser.

What a bundle means is checked against node running the very same modules as ES modules: same output, same
order of evaluation. What the bundler does not translate it refuses, by name."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lvmh_adapter.web import LATE, WEB_DIR, STATIC_FILES
from lvmh_adapter.webbundle import BundleError, build, resolve
from tests.peers import missing_peer


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip(missing_peer("Node", "node is not on PATH (needed to run the bundle)"))
    return node


def _reader(files: dict[str, str]):
    def read(name: str) -> str:
        if name not in files:
            raise BundleError(f"no {name}")
        return files[name]

    return read


# a small graph with what the web UI's modules use: named imports, renames, a vendored library's default and
# export clause, a namespace import, a diamond (shared.js imported twice, run once), a module in a sub-folder
# and a dynamic import from there
MODULES = {
    "main.js": """import { greet, COUNT as count } from "./a.js";
import lib, { helper } from "./vendor/lib.esm.js";
import * as shared from "./shared.js";
import "./side.js";
log("main", greet("x"), count, lib.name, helper(2), shared.tag, Object.keys(shared).join("+"));
import("./vendor/late.js").then((m) => log("late", m.default));
""",
    "a.js": """// a comment
import {
  tag,
  bump,
} from "./shared.js";
log("a runs", tag);
export const COUNT = bump() + bump();
export function greet(who) { return `hi ${who} ${tag}`; }
export class Thing {}
export async function later() { return 1; }
""",
    "shared.js": """log("shared runs");
let n = 0;
export const tag = "T";
export function bump() { return ++n; }
""",
    "side.js": """import { tag } from "./shared.js";
log("side runs", tag);
""",
    "vendor/lib.esm.js": """var L={name:"lib"};function h(x){return x*21}log("lib runs");export{L as default,h as helper};
//# sourceMappingURL=lib.esm.js.map
""",
    "vendor/late.js": "export default 'late grammar';\n",
}
PRELUDE = "globalThis.log = (...a) => console.log(a.join(' '));\n"


def _run(node: str, folder: Path, script: str) -> str:
    proc = subprocess.run([node, script], capture_output=True, text=True, timeout=60, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_bundle_does_what_its_modules_do_in_node(tmp_path):
    """Output and order of evaluation of the bundle == node running the same files as ES modules."""
    node = _node()
    native, bundled = tmp_path / "native", tmp_path / "bundled"
    for folder in (native, bundled):
        (folder / "vendor").mkdir(parents=True)
        (folder / "package.json").write_text('{"type": "module"}')
        (folder / "vendor" / "late.js").write_text(MODULES["vendor/late.js"])
    for name, text in MODULES.items():
        (native / name).write_text(text)
    (native / "run.js").write_text(PRELUDE + 'await import("./main.js");\n')
    bundle = build("main.js", _reader(MODULES))
    (bundled / "main.js").write_text(bundle.text)
    (bundled / "run.js").write_text(PRELUDE + 'await import("./main.js");\n')
    expected = _run(node, native, "run.js")
    assert "shared runs\na runs T\nlib runs\nside runs T\nmain hi x T 3 lib 42 T bump+tag\nlate late grammar" in expected
    assert _run(node, bundled, "run.js") == expected
    assert bundle.modules == ("shared.js", "a.js", "vendor/lib.esm.js", "side.js", "main.js")
    assert "sourceMappingURL" not in bundle.text


def test_the_same_sources_give_the_same_bytes():
    assert build("main.js", _reader(MODULES)).text == build("main.js", _reader(dict(MODULES))).text


def test_a_dynamic_import_is_made_relative_to_where_the_bundle_is_served():
    files = {"main.js": 'import { go } from "./sub/x.js";\ngo();\n',
             "sub/x.js": 'export function go() { return import("./g.js").then(() => import("../top.js")); }\n'}
    text = build("main.js", _reader(files)).text
    assert 'import("./sub/g.js")' in text and 'import("./top.js")' in text


# a module run late (`late`): at the first read of one of its exports, once, after what it imports
LATE_MODULES = {
    "main.js": """import * as slow from "./slow.js";
import { tag } from "./shared.js";
log("main runs", tag, Object.keys(slow).join("+"));
log("read", slow.value, slow.twice(2));
log("again", slow.value);
""",
    "slow.js": """import { bump } from "./shared.js";
log("slow runs", bump());
export const value = 7;
export function twice(x) { return 2 * x; }
""",
    "shared.js": MODULES["shared.js"],
}


def test_a_late_module_runs_at_the_first_read_of_an_export_and_once(tmp_path):
    node = _node()
    (tmp_path / "package.json").write_text('{"type": "module"}')
    bundle = build("main.js", _reader(LATE_MODULES), frozenset({"slow.js"}))
    (tmp_path / "main.js").write_text(bundle.text)
    (tmp_path / "run.js").write_text(PRELUDE + 'await import("./main.js");\n')
    assert _run(node, tmp_path, "run.js") == "shared runs\nmain runs T twice+value\nslow runs 1\nread 7 4\nagain 7\n"
    assert bundle.modules == ("shared.js", "slow.js", "main.js")
    # not late: in its turn, as node runs it
    (tmp_path / "main.js").write_text(build("main.js", _reader(LATE_MODULES)).text)
    assert _run(node, tmp_path, "run.js").startswith("shared runs\nslow runs 1\nmain runs")


@pytest.mark.parametrize(
    "files, late, refused",
    [
        ({"main.js": 'import { value } from "./slow.js";\n', "slow.js": "export const value = 1;\n"}, "slow.js",
         "main.js: slow.js runs late: import it as a namespace"),
        ({"main.js": 'import "./slow.js";\n', "slow.js": "log(1);\n"}, "slow.js",
         "main.js: slow.js runs late: import it as a namespace"),
        ({"main.js": "log(1);\n"}, "slow.js", "slow.js is to run late but nothing imports it"),
    ],
)
def test_a_late_module_is_imported_as_a_namespace_only(files, late, refused):
    with pytest.raises(BundleError) as err:
        build("main.js", _reader(files), frozenset({late}))
    assert refused in str(err.value)


@pytest.mark.parametrize(
    "files, refused",
    [
        ({"main.js": 'import { a } from "./a.js";\n', "a.js": 'import { m } from "./main.js";\nexport const a = 1;\n'},
         "import cycle: main.js -> a.js -> main.js"),
        ({"main.js": "export let n = 1;\n"}, "`export let n` may be reassigned"),
        ({"main.js": "export var n = 1;\n"}, "`export var n` may be reassigned"),
        ({"main.js": "export default 1;\n"}, "cannot bundle 'export default 1;'"),
        ({"main.js": 'export * from "./a.js";\n'}, "cannot bundle"),
        ({"main.js": 'export { a } from "./a.js";\n'}, "re-exports"),
        ({"main.js": "log(import.meta.url);\n"}, "cannot bundle 'import.meta.url);'"),
        ({"main.js": "const name = './x.js';\nimport(name);\n"}, "import() of something else than a literal path"),
        ({"main.js": 'import { nope } from "./a.js";\n', "a.js": "export const a = 1;\n"}, "a.js exports no 'nope'"),
        ({"main.js": 'import { a } from "lodash";\n'}, "only relative imports are bundled, not 'lodash'"),
        ({"main.js": 'import { a } from "../secret.js";\n'}, "outside the web folder"),
        ({"main.js": "const __lvmh_m0 = 1;\n"}, "uses the bundler's own prefix"),
        ({"main.js": "export const a = 1;\nexport function a() {}\n"}, "exports 'a' twice"),
        ({"main.js": "export const { a, b } = o;\n"}, "cannot bundle 'export const { a, b } = o;'"),
        ({"main.js": 'import { a } from "./missing.js";\n'}, "no missing.js"),
    ],
)
def test_what_the_bundler_does_not_translate_it_refuses(files, refused):
    with pytest.raises(BundleError) as err:
        build("main.js", _reader(files))
    assert refused in str(err.value)


def test_resolve():
    assert resolve("a.js", "./b.js") == "b.js"
    assert resolve("vendor/a.js", "./b.js") == "vendor/b.js"
    assert resolve("vendor/a.js", "../b.js") == "b.js"


# --- the web UI's own modules -----------------------------------------------------------------------

def _graph_by_scan() -> set[str]:
    """Every module app.js imports, directly or not, found by a scan of its own (not the bundler's)."""
    seen, queue = {"app.js"}, ["app.js"]
    while queue:
        name = queue.pop()
        for spec in re.findall(r'^import\s[^;]*?from\s+"\./([^"]+)"', (WEB_DIR / name).read_text(), re.M):
            dep = str(Path(name).parent / spec) if "/" in name else spec
            if dep not in seen:
                seen.add(dep)
                queue.append(dep)
    return seen


def test_the_web_ui_bundle_holds_every_module_of_its_graph_and_parses(tmp_path):
    bundle = build("app.js", lambda name: STATIC_FILES[name].read_text(encoding="utf-8"), LATE)
    # highlight.js's core is not on the way to a first paint: it runs once the grammars come
    assert LATE == {"vendor/hljs-core.min.js"} and "// ---- vendor/hljs-core.min.js\n// late: run at" in bundle.text
    assert set(bundle.modules) == _graph_by_scan() and bundle.modules[-1] == "app.js"
    assert {"markdown.js", "virtual.js", "vendor/marked.esm.js", "vendor/purify.es.mjs", "vendor/hljs-core.min.js"} <= set(
        bundle.modules)
    for name in bundle.modules:
        assert f"// ---- {name}\n" in bundle.text, name
    # the highlight.js grammars stay separate files, loaded on demand from the folder the bundle is served from
    grammars = re.findall(r'import\("\./(vendor/hljs-[a-z]+\.min\.js)"\)', bundle.text)
    assert len(grammars) == 13 and all(g in STATIC_FILES for g in grammars)
    # a syntax error (or a top-level await left in a module's function scope) fails here, not in a browser
    path = tmp_path / "app.mjs"
    path.write_text(bundle.text)
    proc = subprocess.run([_node(), "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- served: built once, kept, built again when a module changed -------------------------------------

async def test_the_page_script_is_built_again_when_a_module_changed(tmp_path, monkeypatch, aiohttp_client):
    """Editing a module in a checkout shows on the next load: its mtime changed, the bundle is built again (a new
    ETag); unchanged, the same bytes are served without a build."""
    import os

    from aiohttp import web

    import lvmh_adapter.web as webui

    copy = tmp_path / "toast.js"
    copy.write_text(STATIC_FILES["toast.js"].read_text())
    monkeypatch.setitem(webui.STATIC_FILES, "toast.js", copy)
    monkeypatch.setattr(webui, "_bundle", {})
    builds = []
    real = webui.build
    monkeypatch.setattr(webui, "build", lambda *a: builds.append(1) or real(*a))
    app = web.Application()
    app.add_routes(webui.static_routes())
    client = await aiohttp_client(app)

    first = await client.get("/static/app.js")
    body, etag = await first.text(), first.headers["ETag"]
    assert first.status == 200 and "// ---- toast.js" in body and len(builds) == 1
    again = await client.get("/static/app.js")
    assert await again.text() == body and again.headers["ETag"] == etag and len(builds) == 1
    assert (await client.get("/static/app.js", headers={"If-None-Match": etag})).status == 304

    copy.write_text(copy.read_text() + "\nconsole.debug('edited in a checkout');\n")
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a later mtime, whatever the clock's grain
    edited = await client.get("/static/app.js", headers={"If-None-Match": etag})
    assert edited.status == 200 and edited.headers["ETag"] != etag and len(builds) == 2
    assert "edited in a checkout" in await edited.text()
