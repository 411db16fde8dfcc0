#!/usr/bin/env bash
# Runs every test, as CI does: installs what is missing, builds runsc (cached)
# and Warren, builds the built-in image if it is not cached, then runs the
# unit and integration tests against the real runsc.
source "$(dirname "$0")/lib.sh"
need_root
install_packages
build_runsc
build_warren
export WARREN_RUNSC=$(runsc_path) WARREN_CACHE_DIR=$CACHE_DIR WARREN_BIN=$WARREN_ROOT/bin
cd "$WARREN_ROOT"
say "go vet"
go vet ./...
say "go test (unit and integration, real runsc)"
go test -count=1 -timeout 25m -p 2 ./... "$@"
