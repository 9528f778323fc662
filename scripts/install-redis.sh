#!/usr/bin/env bash
# Debian's redis-server for the bus tests (see install-engines.sh).
exec "$(dirname "$0")/install-engines.sh" "$@" redis  # "$@" first: install-engines.sh takes --check before the engine
