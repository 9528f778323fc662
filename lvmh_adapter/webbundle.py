"""The web UI's ES modules as one script: a page fetches and compiles one file instead of some 35.

Pure (no I/O): ``build(entry, read)`` takes the entry module's name (``"app.js"``) and a function that returns a
module's source by name (``"dom.js"``, ``"vendor/marked.esm.js"``), follows the static imports, and returns the
script. Each module becomes a function scope, run once in the order a browser evaluates the modules (depth first,
imports in source order, the importer after what it imports); its exports are returned as a frozen object (the
module's namespace) and each import becomes a ``const`` taken from the namespace of the module it names::

    const __lvmh_m3 = (() => {      // ---- view.js
    const { h } = __lvmh_m1;        // import { h } from "./dom.js";
    ... the module, its `export` keywords dropped ...
    ;return Object.freeze({ __proto__: null, renderItem, timeEl });
    })();

That is the modules' meaning only for what this bundler accepts, and it refuses the rest (``BundleError``):
an import cycle (an export read before its module ran), ``export let``/``var`` (a live binding that may be
reassigned), ``export default``, ``export *``, re-exports, ``import.meta``, and ``import()`` of anything but a
literal path. A top-level ``await`` would be a syntax error in a function scope: the web UI's bundle is
checked with ``node --check`` (tests/lvmh/test_webbundle.py). Dynamic ``import("./x.js")`` stays (the
highlight.js grammars load on demand), its path rewritten to be relative to the entry's folder, where the
bundle is served. Import and export statements of our own modules are recognised at the start of a line;
the vendored libraries' single ``export{a as b}`` clause anywhere.
The output depends on the sources only (no time, no path): the same files give the same bytes.

A module named in ``late`` runs at the first read of one of its exports instead of in its turn: its section
returns a namespace of getters, the first of which runs the module (its imports then read from the modules
before it, already run). Every import of it must be a namespace import (``import * as ns``), whose reads
(``ns.default``) are those of the running program: a named import would read the export, and run the module,
as the importer runs. For a library whose set-up is not on the way to a page's first paint (highlight.js's
core: nothing is highlighted before its grammars are in).
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable, NamedTuple

PREFIX = "__lvmh_m"  # the namespaces' names; a module that uses this prefix itself is refused

_IDENT = r"[A-Za-z_$][\w$]*"
_IMPORT = re.compile(
    r"""^import\s+(?:(?P<clause>[^;"'`]*?)\s+from\s+)?(?P<q>["'])(?P<spec>[^"']+)(?P=q)[ \t]*;?""", re.M)
_EXPORT_DECL = re.compile(
    rf"^export\s+(?P<kw>(?:async\s+)?function\b\s*\*?|class\b|const\b|let\b|var\b)\s*(?P<name>{_IDENT})", re.M)
_EXPORT_LIST = re.compile(r"\bexport\s*\{(?P<list>[^}]*)\}(?P<from>\s*from\b)?\s*;?")
_LEFT = re.compile(  # an import or export left after the rewrite: something not translated
    r"^\s*(?:import|export)\b(?!\s*\()|[;})]\s*export\s*[{*]|\bexport\s+default\b|\bimport\s*\.\s*meta\b", re.M)
_DYNAMIC = re.compile(r"\bimport\s*\(\s*(?:(?P<q>[\"'])(?P<spec>[^\"']+)(?P=q)\s*\))?")
_MAP = re.compile(r"^//[#@] sourceMappingURL=.*$", re.M)


class BundleError(ValueError):
    """The modules use something the bundler does not translate (see the module's docstring)."""


class Bundle(NamedTuple):
    text: str
    modules: tuple[str, ...]  # in the order they run; the entry last


class _Module(NamedTuple):
    name: str
    imports: list[tuple[str, list[tuple[str, str]]]]  # (module, [(exported name or "*", local name)])
    exports: dict[str, str]  # exported name -> local name
    body: str


def resolve(importer: str, spec: str) -> str:
    """The name of the module ``spec`` names in ``importer`` (both relative to the web folder)."""
    if not spec.startswith(("./", "../")):
        raise BundleError(f"{importer}: only relative imports are bundled, not {spec!r}")
    name = posixpath.normpath(posixpath.join(posixpath.dirname(importer), spec))
    if name.startswith("../") or name.startswith("/"):
        raise BundleError(f"{importer}: {spec!r} is outside the web folder")
    return name


def _bindings(importer: str, clause: str) -> list[tuple[str, str]]:
    """``X, { a, b as c }`` -> [("default", "X"), ("a", "a"), ("b", "c")]; ``* as ns`` -> [("*", "ns")]."""
    out: list[tuple[str, str]] = []
    clause = clause.strip()
    m = re.match(rf"({_IDENT})\s*(?:,\s*|$)", clause)
    if m and not clause.startswith("{"):
        out.append(("default", m.group(1)))
        clause = clause[m.end():].strip()
    if not clause:
        return out
    star = re.fullmatch(rf"\*\s*as\s+({_IDENT})", clause)
    if star:
        return out + [("*", star.group(1))]
    braces = re.fullmatch(r"\{([^}]*)\}", clause, re.S)
    if braces is None:
        raise BundleError(f"{importer}: cannot read the import clause {clause!r}")
    return out + [_pair(importer, part) for part in braces.group(1).split(",") if part.strip()]


def _pair(module: str, part: str) -> tuple[str, str]:
    """``a`` -> ("a", "a"); ``a as b`` -> ("a", "b")."""
    m = re.fullmatch(rf"\s*({_IDENT})(?:\s+as\s+({_IDENT}))?\s*", part)
    if m is None:
        raise BundleError(f"{module}: cannot read {part.strip()!r}")
    return m.group(1), m.group(2) or m.group(1)


def _blank(m: re.Match) -> str:
    return "\n" * m.group(0).count("\n")  # a statement taken out keeps the lines after it where they were


def parse(name: str, text: str) -> _Module:
    """A module's imports, exports and body (its source without the import statements and `export` keywords)."""
    if PREFIX in text:
        raise BundleError(f"{name}: uses the bundler's own prefix {PREFIX!r}")
    imports = [(resolve(name, m["spec"]), _bindings(name, m["clause"] or "")) for m in _IMPORT.finditer(text)]
    body = _IMPORT.sub(_blank, _MAP.sub("", text))
    exports: dict[str, str] = {}

    def declared(m: re.Match) -> str:
        kw = m["kw"].split()[0] if m["kw"].startswith("async") else m["kw"].rstrip("* \t")
        if kw in ("let", "var"):
            raise BundleError(f"{name}: `export {kw} {m['name']}` may be reassigned; export a const or a function")
        _add(name, exports, m["name"], m["name"])
        return m.group(0)[len("export"):].lstrip()

    def listed(m: re.Match) -> str:
        if m["from"]:
            raise BundleError(f"{name}: re-exports (`export {{...}} from`) are not bundled")
        for part in m["list"].split(","):
            if part.strip():
                local, exported = _pair(name, part)
                _add(name, exports, exported, local)
        return ";"

    body = _EXPORT_LIST.sub(listed, _EXPORT_DECL.sub(declared, body))
    left = _LEFT.search(body)
    if left:
        line = (body[left.start():].strip().splitlines() or [""])[0]
        raise BundleError(f"{name}: cannot bundle {line[:60]!r}")
    return _Module(name, imports, exports, body)


def _add(module: str, exports: dict[str, str], exported: str, local: str) -> None:
    if exported in exports:
        raise BundleError(f"{module}: exports {exported!r} twice")
    exports[exported] = local


def order(entry: str, read: Callable[[str], str]) -> list[_Module]:
    """Every module ``entry`` imports, directly or not, parsed, in the order a browser runs them (the entry last)."""
    done: dict[str, _Module] = {}
    path: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in path:
            raise BundleError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        path.append(name)
        mod = parse(name, read(name))
        for dep, _ in mod.imports:
            visit(dep)
        path.pop()
        done[name] = mod

    visit(entry)
    return list(done.values())


def build(entry: str, read: Callable[[str], str], late: frozenset[str] = frozenset()) -> Bundle:
    """``entry`` and every module it imports as one script; those in ``late`` run when first read (see the
    module's docstring)."""
    mods = order(entry, read)
    _check_late(mods, late)
    var = {m.name: f"{PREFIX}{i}" for i, m in enumerate(mods)}
    by_name = {m.name: m for m in mods}
    parts = [f"// The lvmh web UI in one script: {entry} and the {len(mods) - 1} modules it imports, each in a "
             f"function\n"
             f"// scope, built by lvmh_adapter/webbundle.py from lvmh_adapter/web/ (edit the modules, not this).\n"]
    for m in mods:
        head = []
        for dep, names in m.imports:
            head.append(_import_line(m.name, by_name[dep], var[dep], names))
        body = _DYNAMIC.sub(lambda d, m=m: _dynamic(m.name, entry, d), m.body)
        parts.append(_section(m, var[m.name], "".join(head) + body.rstrip(), m.name in late))
    return Bundle("".join(parts), tuple(m.name for m in mods))


def _section(m: _Module, var: str, code: str, late: bool) -> str:
    """Module ``m`` (``code``: its import lines and body) as a function scope whose namespace is ``var``; run now,
    or at the first read of an export when ``late``."""
    exported = ", ".join(f"{k}: {v}" if k != v else k for k, v in sorted(m.exports.items()))  # a namespace's order
    ns = f"Object.freeze({{ __proto__: null{', ' if exported else ''}{exported} }})"
    if not late:
        return f"const {var} = (() => {{ // ---- {m.name}\n{code}\n;return {ns};\n}})();\n"
    # the module's own names cannot hold the prefix (`parse`): nothing of it shadows var_ns nor var_run
    getters = "".join(f", get {k}() {{ return {var}_run().{k}; }}" for k in sorted(m.exports))
    return (f"const {var} = (() => {{ // ---- {m.name}\n// late: run at the first read of an export\n"
            f"let {var}_ns = null;\nconst {var}_run = () => {var}_ns || ({var}_ns = (() => {{\n{code}\n"
            f";return {ns};\n}})());\nreturn Object.freeze({{ __proto__: null{getters} }});\n}})();\n")


def _check_late(mods: list[_Module], late: frozenset[str]) -> None:
    """Every module in ``late`` is in the graph, and imported as a namespace only (``import * as ns``)."""
    names = {m.name for m in mods}
    for name in sorted(late - names):
        raise BundleError(f"{name} is to run late but nothing imports it")
    for m in mods:
        for dep, bindings in m.imports:
            if dep in late and (not bindings or any(exported != "*" for exported, _ in bindings)):
                raise BundleError(f"{m.name}: {dep} runs late: import it as a namespace (`import * as ns`)")


def _import_line(importer: str, dep: _Module, var: str, names: list[tuple[str, str]]) -> str:
    lines = []
    picked = []
    for exported, local in names:
        if exported == "*":
            lines.append(f"const {local} = {var};\n")
            continue
        if exported not in dep.exports:
            raise BundleError(f"{importer}: {dep.name} exports no {exported!r}")
        picked.append(local if exported == local else f"{exported}: {local}")
    if picked:
        lines.append(f"const {{ {', '.join(picked)} }} = {var};\n")
    return "".join(lines)


def _dynamic(importer: str, entry: str, m: re.Match) -> str:
    """``import("./x.js")`` in ``importer``, its path relative to where the bundle is served (``entry``'s folder)."""
    if m["spec"] is None:
        raise BundleError(f"{importer}: import() of something else than a literal path")
    target = resolve(importer, m["spec"])
    rel = posixpath.relpath(target, posixpath.dirname(entry) or ".")
    return f'import("{rel if rel.startswith("../") else "./" + rel}")'


__all__ = ["Bundle", "BundleError", "build", "order", "parse", "resolve"]
