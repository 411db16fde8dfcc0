#!/usr/bin/env bash
# One command for a fresh machine: installs what is missing, builds runsc
# and Warren, then runs the server on the built-in image (which it builds
# the first time). Extra arguments go to `warren server`.
source "$(dirname "$0")/lib.sh"
need_root
install_packages
build_runsc
build_warren
say "starting warren server (the admin key is written to ${WARREN_STATE_DIR:-/var/lib/warren}/admin.key)"
exec "$WARREN_ROOT/bin/warren" server --cache-dir "$CACHE_DIR" --runsc "$(runsc_path)" "$@"
