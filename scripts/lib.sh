# Shared by Warren's scripts: package installs and the runsc build.
set -euo pipefail

WARREN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR=${CACHE_DIR:-/var/cache/warren}
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

need_root() {
	[ "$(id -u)" = 0 ] || die "run as root (sudo $0): Warren makes network namespaces, cgroups and gVisor sandboxes"
}

# install_packages installs the Debian packages Warren needs that are missing.
install_packages() {
	local want=(iproute2 nftables debootstrap ca-certificates make git busybox-static python3 python3-venv e2fsprogs) missing=()
	for p in "${want[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl) into /usr/local/go"
}

# runsc_version is the pinned gvisor.dev/gvisor module version.
runsc_version() {
	awk '$1 == "gvisor.dev/gvisor" { print $2 }' "$WARREN_ROOT/tools/runsc/go.mod"
}

runsc_path() { echo "$CACHE_DIR/runsc/$(runsc_version)/runsc"; }

# build_runsc builds runsc once per version into the cache.
build_runsc() {
	local v out tmp
	v=$(runsc_version)
	[ -n "$v" ] || die "no gvisor.dev/gvisor version in tools/runsc/go.mod"
	out=$(runsc_path)
	if [ -x "$out" ]; then
		return 0
	fi
	say "building runsc $v (static, about 2-4 minutes; cached in $CACHE_DIR/runsc/$v)"
	mkdir -p "$(dirname "$out")"
	tmp=$(mktemp "$out.tmp.XXXXXX")
	(cd "$WARREN_ROOT/tools/runsc" && CGO_ENABLED=0 go build -o "$tmp" gvisor.dev/gvisor/runsc)
	chmod 0755 "$tmp"
	mv "$tmp" "$out"
}

build_warren() {
	say "building bin/warren and bin/warren-agent"
	make -C "$WARREN_ROOT" --no-print-directory build
}
