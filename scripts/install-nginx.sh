#!/usr/bin/env bash
# Debian's nginx for the remote-access tests (tests/remote): /usr/sbin/nginx. See install-apt-peer.sh.
exec "$(dirname "$0")/install-apt-peer.sh" nginx /usr/sbin/nginx "$@"
