#!/usr/bin/env bash
# fetch-consul.sh: the real Consul server the tests run against (CONSUL_BIN), Debian
# bullseye's own `consul` package, downloaded and unpacked (never installed) and cached.
#
# Why this exists: the real-Consul tests need a Consul binary, and the only one a Debian
# machine can fetch through its package archive is Debian's build of the upstream release.
# The package comes through a private apt configuration that reuses the host's Debian archive
# address with the bullseye suite (the system's apt configuration is untouched), apt checks
# the archive's signature, and this script checks the package's pinned SHA-256 on top. The
# unpacked tree is cached per machine under a key made of the version and that checksum.
#
# Usage:
#   fetch-consul.sh              fetch if needed; the LAST line of stdout is the binary's path
#   fetch-consul.sh --print-path print the path without fetching (exit 0 even if not fetched)
#
# Anywhere else (another distribution, another Consul version): set CONSUL_BIN to any consul
# binary instead; the tests and .ci/run take it from there.
set -euo pipefail
export LC_ALL=C

# ---- the recipe --------------------------------------------------------------
readonly PKG="consul"
readonly DEB_VERSION="1.8.7+dfsg1-2+b3"
readonly SUITE="bullseye"
readonly ARCH="amd64"
readonly DEB_SHA256="e4e888bba104daba1d9161f49bfc52649a7e4efd45b1a7ead5bc54f2cb9c89d9"
readonly EXPECTED_VERSION="Consul v1.8.7"
readonly KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"

script_path=$(readlink -f "${BASH_SOURCE[0]}")
cache_root="${XDG_CACHE_HOME:-${HOME:?HOME or XDG_CACHE_HOME must be set}/.cache}/consul-elector"
out_dir="$cache_root/consul-$DEB_VERSION-${DEB_SHA256:0:12}"
bin="$out_dir/usr/bin/consul"
marker="$out_dir/.complete" # written last; its presence means the tree is complete

LOG_NAME=fetch-consul PHASE=cache
# shellcheck source=phases.sh
source "$(dirname "$script_path")/phases.sh"
die() {
  log "ERROR: $*"
  exit 1
}

case "${1:-}" in
  "") ;;
  --print-path) printf '%s\n' "$bin"; exit 0 ;;
  -h | --help) sed -n '/^# Usage:/,/^#$/p' "$script_path" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
  *) die "unknown argument '$1'" ;;
esac

if [[ -f "$marker" && -x "$bin" ]]; then
  log "cached: $bin"
  printf '%s\n' "$bin"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/fetch-consul.lock"
flock -w 600 9 || die "timed out waiting for $cache_root/fetch-consul.lock"
if [[ -f "$marker" && -x "$bin" ]]; then
  printf '%s\n' "$bin"
  exit 0
fi

# ---- the host's Debian archive address ---------------------------------------------
phase archive "the host's Debian archive address"
[[ -f "$KEYRING" ]] || die "$KEYRING is missing (Debian's debian-archive-keyring package)"
sys_sourcelist="" sys_sourceparts=""
eval "$(apt-config shell sys_sourcelist Dir::Etc::sourcelist/f sys_sourceparts Dir::Etc::sourceparts/d)"
sources=()
[[ -n "$sys_sourcelist" && -f "$sys_sourcelist" ]] && sources+=("$sys_sourcelist")
for f in "${sys_sourceparts%/}"/*.list "${sys_sourceparts%/}"/*.sources; do
  [[ -f "$f" ]] && sources+=("$f")
done
((${#sources[@]} > 0)) || die "no apt source lists found"
# The first archive (not the security archive) that carries `main`: in deb822 stanzas or in
# one-line entries.
uri=$(awk '
  BEGIN { RS = "" }
  /(^|\n)Types:[^\n]*[ \t]deb([ \t\n]|$)/ && /(^|\n)Components:[^\n]*[ \t]main([ \t\n]|$)/ {
    if (match($0, /(^|\n)URIs:[ \t]*[^ \t\n]+/)) {
      u = substr($0, RSTART, RLENGTH); sub(/^\n?URIs:[ \t]*/, "", u)
      if (u !~ /security/) { print u; exit }
    }
  }' "${sources[@]}" 2>/dev/null || true)
if [[ -z "$uri" ]]; then
  uri=$(awk '$1 == "deb" {
      i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if ($i !~ /security/) { for (j = i + 2; j <= NF; j++) if ($j == "main") { print $i; exit } }
    }' "${sources[@]}" 2>/dev/null || true)
fi
[[ -n "$uri" ]] || die "no Debian archive with 'main' in ${sources[*]}"
log "archive: $uri ($SUITE main)"

# ---- download, check, unpack ---------------------------------------------------------
phase download "$PKG=$DEB_VERSION through a private apt configuration"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb [signed-by=$KEYRING] $uri $SUITE main" >"$work/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$work/sources.list"
  -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache::Archives=$work/archives"
  -o "APT::Architecture=$ARCH"
  # The private dirs may sit where the _apt sandbox user cannot write.
  -o "APT::Sandbox::User=$(id -un)"
)
apt-get -q "${apt_opts[@]}" update >&2 || die "apt-get update of $uri $SUITE failed"
(cd "$work" && apt-get -q "${apt_opts[@]}" download "$PKG=$DEB_VERSION" >&2) ||
  die "apt-get download $PKG=$DEB_VERSION failed (is $SUITE still on $uri?)"
deb=$(find "$work" -maxdepth 1 -name "${PKG}_*_$ARCH.deb" -print -quit)
[[ -n "$deb" ]] || die "the download left no ${PKG}_*_$ARCH.deb"
sum=$(sha256sum "$deb" | cut -d' ' -f1)
[[ "$sum" == "$DEB_SHA256" ]] || die "$(basename "$deb") has SHA-256 $sum, expected $DEB_SHA256"

phase unpack "$out_dir"
rm -rf "$out_dir"
mkdir -p "$out_dir"
dpkg-deb -x "$deb" "$out_dir"
[[ -x "$bin" ]] || die "the package has no usr/bin/consul"
version=$("$bin" version | head -n 1)
[[ "$version" == "$EXPECTED_VERSION" ]] || die "$bin reports '$version', expected '$EXPECTED_VERSION'"
touch "$marker"
end_phase
log "$version at $bin ($phase_report)"
printf '%s\n' "$bin"
