#!/usr/bin/env bash
# Builds the pinned runsc into the cache (once per version).
source "$(dirname "$0")/lib.sh"
build_runsc
runsc_path
