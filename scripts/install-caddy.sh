#!/usr/bin/env bash
# Debian's Caddy for the remote-access tests (tests/remote): /usr/bin/caddy. See install-apt-peer.sh.
exec "$(dirname "$0")/install-apt-peer.sh" caddy /usr/bin/caddy "$@"
