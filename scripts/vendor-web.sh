#!/usr/bin/env bash
# Re-fetch the web UI's vendored libraries into lvmh_adapter/web/vendor/ (pinned, checksummed).
#
#   scripts/vendor-web.sh           # fetch with `npm pack`, check each tarball's sha256, extract the ESM files
#   scripts/vendor-web.sh --check   # fetch and compare with what is committed; exit 1 on any difference
#
# The page has no build step: these files are served as they are published, under /static/vendor/.
# To upgrade: change a version below, run once with the new sha256 printed by the mismatch, review, commit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/lvmh_adapter/web/vendor
HLJS_LANGS=(bash diff go javascript json python rust shell sql typescript xml yaml css)

# name@version  sha256 of the npm tarball
PACKAGES=(
  "marked@18.2.1 d66c5213fc203466186060105b01f51896764ba64b3797d2620d02e28e34b8ca"
  "dompurify@3.5.0 faa5f2bfe2814384b83d6edb4ed66812fbfdb2a654b4d59edd4b12304058ec20"
  "@highlightjs/cdn-assets@11.11.1 28a06bf6ebcc2218c6e842bdb4f1c8353508a8cada59e85110f91892f5726195"
)

die() { echo "vendor-web: error: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm is needed (node's package manager)"

check=0
[ "${1:-}" = "--check" ] && check=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/vendor
mkdir -p "$out"

for entry in "${PACKAGES[@]}"; do
  spec=${entry% *}
  want=${entry#* }
  (cd "$work" && npm pack --silent "$spec" >"$work/name")
  tgz=$work/$(tail -n 1 "$work/name")
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  [ "$got" = "$want" ] || die "$spec: sha256 $got, expected $want"
  dir=$work/x-${spec//[@\/]/_}
  mkdir -p "$dir"
  tar xzf "$tgz" -C "$dir"
  p=$dir/package
  case "$spec" in
    marked@*)
      cp "$p/lib/marked.esm.js" "$out/marked.esm.js"
      cp "$p/LICENSE" "$out/LICENSE.marked.txt" ;;
    dompurify@*)
      cp "$p/dist/purify.es.mjs" "$out/purify.es.mjs"
      cp "$p/LICENSE" "$out/LICENSE.dompurify.txt"            # dual licensed: Apache-2.0 ...
      cp "$p/LICENSE-MPL" "$out/LICENSE-MPL.dompurify.txt" ;;  # ... or MPL-2.0
    @highlightjs/*)
      cp "$p/es/core.min.js" "$out/hljs-core.min.js"
      for lang in "${HLJS_LANGS[@]}"; do cp "$p/es/languages/$lang.min.js" "$out/hljs-$lang.min.js"; done
      cp "$p/LICENSE" "$out/LICENSE.highlightjs.txt" ;;
  esac
done
{
  echo "Vendored by scripts/vendor-web.sh (do not edit these files by hand)."
  for entry in "${PACKAGES[@]}"; do echo "  ${entry% *}  sha256:${entry#* }"; done
  echo "highlight.js languages: ${HLJS_LANGS[*]}"
} >"$out/VERSIONS.txt"

if [ $check = 1 ]; then
  diff -r "$out" "$DEST" >/dev/null || { diff -rq "$out" "$DEST" >&2; die "lvmh_adapter/web/vendor differs from the pinned packages"; }
  echo "vendor-web: up to date"
else
  rm -rf "$DEST"
  cp -r "$out" "$DEST"
  echo "vendor-web: wrote $(ls "$DEST" | wc -l) files to lvmh_adapter/web/vendor"
fi
