#!/usr/bin/env bash
# Debian's PostgreSQL server for the store tests (see install-engines.sh).
exec "$(dirname "$0")/install-engines.sh" "$@" postgresql  # "$@" first: install-engines.sh takes --check before the engine
