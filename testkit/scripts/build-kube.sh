#!/usr/bin/env bash
# build-kube.sh: build the Kubernetes v1.20.2 binaries of the test cluster from
# Debian bookworm's `kubernetes` source package: kube-apiserver and
# kube-controller-manager for every real-apiserver test, and kube-scheduler,
# kubelet, kube-proxy and the pause container's program for the real-node tier.
#
# Why this exists: the tests need a real API server without a cluster, Docker or
# downloads from outside Debian's archive, and Debian ships the full v1.20.2 tree
# (vendor/ included) as the orig tarball of its `kubernetes` source package (which
# Debian only uses to build kubectl). Building it is slow (about 5 min on 2 cores), so the
# two binaries are cached per machine, outside the repository, under a key made
# of the Debian version and a hash of this script: only the first run on a
# machine (or the first after this recipe changes) pays for the build.
#
# Usage:
#   build-kube.sh              build if needed; the LAST line of stdout is the bin dir
#   build-kube.sh --print-dir  print the bin dir without building (exit 0 even if not built)
#   build-kube.sh --check      exit 0 if the cached binaries exist, 1 otherwise
#
# Progress goes to stderr. etcd comes from Debian's etcd-server (/usr/bin/etcd),
# which this script installs too. Needs root (or sudo) only to install packages.
set -euo pipefail
export LC_ALL=C

# ---- the recipe --------------------------------------------------------------
readonly KUBE_SRC_PKG="kubernetes"
readonly KUBE_DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
readonly KUBE_ORIG_TARBALL="kubernetes_1.20.5+really1.20.2.orig.tar.gz"
readonly KUBE_TREE_NAME="kubernetes-1.20.2"
readonly KUBE_EXPECTED_VERSION="v1.20.2"
readonly KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# The pod sandbox's program, compiled statically from the tree's own source.
readonly PAUSE_SRCS=(build/pause/linux/pause.c build/pause/pause.c)
# Debian's golang-go on bookworm is Go 1.19 (golang-1.19-go).
readonly GO_ROOT="/usr/lib/go-1.19"
# The vendored reflect2 v1.0.1 panics on Go >= 1.18 (nil pointer in
# reflect2.(*frozenConfig).Type2 on every map decode, so `POST /pods` gets an
# empty reply). Debian's golang-github-modern-go-reflect2-dev ships v1.0.2.
readonly REFLECT2_VENDOR_DIR="vendor/github.com/modern-go/reflect2"
readonly REFLECT2_DEBIAN_DIR="/usr/share/gocode/src/github.com/modern-go/reflect2"
readonly BUILD_PACKAGES=(golang-go rsync make dpkg-dev golang-github-modern-go-reflect2-dev gcc libc6-dev)
readonly RUNTIME_PACKAGES=(etcd-server openssl)
readonly LOCK_WAIT_SECONDS=3600
readonly MIN_FREE_KIB=$((3 * 1024 * 1024))

# ---- paths -------------------------------------------------------------------
script_path=$(readlink -f "${BASH_SOURCE[0]}")
recipe_hash=$(sha256sum "$script_path" | cut -c1-12)
cache_root="${XDG_CACHE_HOME:-${HOME:?HOME or XDG_CACHE_HOME must be set}/.cache}/consul-elector"
out_dir="$cache_root/kube-$KUBE_DEB_VERSION-$recipe_hash"
bin_dir="$out_dir/bin"
marker="$out_dir/.complete" # written last; its presence means the build is complete
# Fixed (not mktemp) so the Go build cache, whose keys include source paths,
# is reused when the recipe changes. Only one build runs at a time (flock).
build_dir="$cache_root/build"
tree="$build_dir/$KUBE_TREE_NAME"
gocache="$cache_root/go-build"
build_log="$cache_root/build-kube.log"
lock_file="$cache_root/build.lock"

usage() {
  sed -n '/^# Usage:/,/^#$/p' "$script_path" | sed 's/^# \{0,1\}//' >&2
}

is_built() {
  [[ -f "$marker" ]] || return 1
  local c
  for c in "${KUBE_CMDS[@]}" pause; do
    [[ -x "$bin_dir/$c" ]] || return 1
  done
}

case "${1:-}" in
  "") ;;
  --print-dir) printf '%s\n' "$bin_dir"; exit 0 ;;
  --check) if is_built; then exit 0; else exit 1; fi ;;
  -h | --help) usage; exit 0 ;;
  *) echo "build-kube.sh: unknown argument '$1'" >&2; usage; exit 2 ;;
esac

# ---- logging, phases, failure reporting ----------------------------------------
LOG_NAME=build-kube PHASE=lock-wait
# shellcheck source=phases.sh
source "$(dirname "$script_path")/phases.sh"

die() {
  log "ERROR: $*"
  exit 1
}

tmp_out=""
on_exit() {
  local rc=$?
  [[ -n "$tmp_out" && -d "$tmp_out" ]] && rm -rf "$tmp_out"
  if ((rc != 0)); then
    log "FAILED in phase '$current_phase' (exit $rc) after $(since "$script_start")s."
    [[ "$current_phase" == build ]] && log "full make output: $build_log"
    [[ -d "$build_dir" ]] && log "scratch dir left for inspection (wiped by the next run): $build_dir"
  fi
}
trap on_exit EXIT

as_root() {
  if ((EUID == 0)); then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    die "need root (or sudo) to run: $*"
  fi
}

pkg_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

missing_packages() {
  local p
  for p in "$@"; do
    pkg_installed "$p" || printf '%s\n' "$p"
  done
}

ensure_packages() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  if ((${#missing[@]} == 0)); then
    log "all needed packages present: $*"
    return 0
  fi
  log "installing: ${missing[*]}"
  as_root apt-get -q -o DPkg::Lock::Timeout=600 update >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends \
    -o DPkg::Lock::Timeout=600 install "${missing[@]}" >&2
  mapfile -t missing < <(missing_packages "$@")
  ((${#missing[@]} == 0)) || die "still not installed after apt-get install: ${missing[*]}"
}

check_etcd() {
  local v
  v=$(etcd --version 2>&1) || die "'etcd --version' failed: $v"
  [[ "$v" == *"etcd Version:"* ]] || die "unexpected 'etcd --version' output: $v"
  log "etcd: $(head -n1 <<<"$v") ($(command -v etcd))"
}

# Fast path: nothing to do (no lock, no output on stdout but the dir).
if is_built && [[ -z "$(missing_packages "${RUNTIME_PACKAGES[@]}")" ]]; then
  log "cached: $bin_dir"
  printf '%s\n' "$bin_dir"
  exit 0
fi

# ---- one build at a time --------------------------------------------------------
mkdir -p "$cache_root"
exec 9>"$lock_file"
if ! flock -n 9; then
  log "another build-kube.sh holds $lock_file; waiting up to ${LOCK_WAIT_SECONDS}s for it"
  flock -w "$LOCK_WAIT_SECONDS" 9 || die "timed out waiting for $lock_file"
fi

if is_built; then
  # Someone else built it while we waited (or only runtime packages were missing).
  phase packages "runtime only"
  ensure_packages "${RUNTIME_PACKAGES[@]}"
  check_etcd
  end_phase
  log "cached: $bin_dir"
  printf '%s\n' "$bin_dir"
  exit 0
fi

log "building Kubernetes $KUBE_EXPECTED_VERSION from Debian source $KUBE_SRC_PKG $KUBE_DEB_VERSION"
log "recipe hash $recipe_hash; output $bin_dir"
free_kib=$(df -Pk "$cache_root" | awk 'NR == 2 { print $4 }')
((free_kib >= MIN_FREE_KIB)) || die "only $((free_kib / 1024)) MiB free under $cache_root; the build needs about 3 GiB"

# ---- packages -------------------------------------------------------------------
phase packages "installing what is missing"
ensure_packages "${BUILD_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}"
[[ -x "$GO_ROOT/bin/go" ]] || die "$GO_ROOT/bin/go not found (expected from golang-go on Debian bookworm)"
[[ -d "$REFLECT2_DEBIAN_DIR" ]] || die "$REFLECT2_DEBIAN_DIR not found (golang-github-modern-go-reflect2-dev)"
log "go: $("$GO_ROOT/bin/go" version)"
check_etcd

# ---- source -----------------------------------------------------------------------
phase source "apt-get source $KUBE_SRC_PKG=$KUBE_DEB_VERSION via a private apt config"
rm -rf "$build_dir"
apt_dir="$build_dir/apt"
src_dir="$build_dir/src"
mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$src_dir"
: >"$apt_dir/sources.list"

# Derive deb-src entries from the system's own (binary) Debian entries, keeping
# their URIs, suites, components and Signed-By; the system config is untouched.
# Only entries for this release's suites are taken (third-party repos rarely
# carry sources).
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null | tr -d '"' || true)
[[ -n "$codename" ]] || codename=$(apt-config dump | awk -F'"' '/^APT::Default-Release /{ print $2 }')
[[ -n "$codename" ]] || die "cannot tell the Debian release codename from /etc/os-release"
[[ "$codename" == bookworm ]] || log "warning: this recipe was verified on Debian bookworm, this is '$codename'"
sys_sourcelist="" sys_sourceparts=""
eval "$(apt-config shell sys_sourcelist Dir::Etc::sourcelist/f sys_sourceparts Dir::Etc::sourceparts/d)"
src_files=()
[[ -n "$sys_sourcelist" && -f "$sys_sourcelist" ]] && src_files+=("$sys_sourcelist")
if [[ -n "$sys_sourceparts" && -d "$sys_sourceparts" ]]; then
  sys_sourceparts=${sys_sourceparts%/}
  for f in "$sys_sourceparts"/*.list "$sys_sourceparts"/*.sources; do
    [[ -f "$f" ]] && src_files+=("$f")
  done
fi
((${#src_files[@]} > 0)) || die "no apt source lists found (looked at ${sys_sourcelist:-?} and ${sys_sourceparts:-?})"
for f in "${src_files[@]}"; do
  base=$(basename "$f")
  case "$f" in
    *.sources)
      # deb822: one stanza per paragraph; keep enabled stanzas of Types deb for
      # this codename, rewritten to Types: deb-src.
      awk -v codename="$codename" '
        BEGIN { RS = ""; ORS = "" }
        {
          n = split($0, line, "\n"); out = ""; is_deb = 0; enabled = 1; ours = 0
          for (i = 1; i <= n; i++) {
            l = line[i]
            if (l ~ /^#/) continue
            if (l ~ /^Types:/) { if (l ~ /[ \t]deb([ \t]|$)/) is_deb = 1; l = "Types: deb-src" }
            if (l ~ /^Enabled:[ \t]*[Nn]o/) enabled = 0
            if (l ~ /^Suites:/ && l ~ ("[ \t]" codename "([-/][^ \t]*)?([ \t]|$)")) ours = 1
            out = out l "\n"
          }
          if (is_deb && enabled && ours) print out "\n"
        }' "$f" >"$apt_dir/sources.list.d/$base"
      ;;
    *)
      # one-line format: deb [options] uri suite components...
      awk -v codename="$codename" '
        $1 == "deb" {
          i = 2
          if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          suite = $(i + 1)
          if (suite == codename || index(suite, codename "-") == 1 || index(suite, codename "/") == 1) {
            sub(/^deb/, "deb-src"); print
          }
        }' "$f" >"$apt_dir/sources.list.d/${base%.list}-src.list"
      ;;
  esac
done
grep -rqE '^(Types: deb-src|deb-src )' "$apt_dir/sources.list.d" ||
  die "found no Debian '$codename' entries to derive deb-src from in: ${src_files[*]}"
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache"
  # The private dirs live under $HOME, which the _apt sandbox user cannot read.
  -o "APT::Sandbox::User=$(id -un)"
)
log "private apt config: $apt_dir (deb-src derived from ${src_files[*]})"
if ! apt-get -q "${apt_opts[@]}" update >&2; then
  log "warning: 'apt-get update' on the derived deb-src entries reported errors; trying the download anyway"
fi
(cd "$src_dir" && apt-get -q "${apt_opts[@]}" source --download-only "$KUBE_SRC_PKG=$KUBE_DEB_VERSION" >&2) ||
  die "apt-get source $KUBE_SRC_PKG=$KUBE_DEB_VERSION failed (is that version still in the archive?)"
dsc="$src_dir/${KUBE_SRC_PKG}_${KUBE_DEB_VERSION}.dsc"
[[ -f "$dsc" && -f "$src_dir/$KUBE_ORIG_TARBALL" ]] || die "apt-get source did not produce $dsc and $KUBE_ORIG_TARBALL"
# apt already checked every file against the signed Sources index; check the
# orig tarball against the .dsc once more, since it is all that gets used.
want_sha=$(awk -v f="$KUBE_ORIG_TARBALL" '
  /^Checksums-Sha256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == f { print $1 }' "$dsc")
[[ -n "$want_sha" ]] || die "no Checksums-Sha256 entry for $KUBE_ORIG_TARBALL in $dsc"
have_sha=$(sha256sum "$src_dir/$KUBE_ORIG_TARBALL" | cut -d' ' -f1)
[[ "$have_sha" == "$want_sha" ]] || die "sha256 mismatch for $KUBE_ORIG_TARBALL: got $have_sha, .dsc says $want_sha"
log "$KUBE_ORIG_TARBALL sha256 $have_sha matches the .dsc"

# ---- unpack -----------------------------------------------------------------------
# Only the orig tarball: Debian's own patches (debian.tar.xz) touch kubectl only.
phase unpack "$KUBE_ORIG_TARBALL"
tar -xzf "$src_dir/$KUBE_ORIG_TARBALL" -C "$build_dir"
[[ -d "$tree/cmd/kube-apiserver" ]] || die "unexpected tarball layout: $tree/cmd/kube-apiserver missing"
rm -rf "$apt_dir" "$src_dir"

# ---- patch ------------------------------------------------------------------------
phase patch "vendored reflect2 v1.0.1 -> Debian's $(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev)"
rm -rf "${tree:?}/$REFLECT2_VENDOR_DIR"
cp -r "$REFLECT2_DEBIAN_DIR" "$tree/$REFLECT2_VENDOR_DIR"
rm -f "$tree/$REFLECT2_VENDOR_DIR/go.mod" "$tree/$REFLECT2_VENDOR_DIR/go.sum"
# vendor/modules.txt keeps saying v1.0.1 on purpose: the Kubernetes 1.20 build
# runs in GOPATH mode (hack/lib/init.sh exports GO111MODULE=off), where
# modules.txt is not read, and it must stay consistent with go.mod anyway.
[[ -f "$tree/$REFLECT2_VENDOR_DIR/reflect2.go" ]] || die "reflect2 swap failed"

# ---- build ------------------------------------------------------------------------
phase build "make WHAT='${KUBE_CMDS[*]/#/cmd/}' (several minutes)"
# hack/lib/golang.sh forces GOCACHE=_output/local/go/cache; point that at a
# persistent cache so a rebuild after a recipe change is faster.
mkdir -p "$gocache" "$tree/_output/local/go"
ln -sfn "$gocache" "$tree/_output/local/go/cache"
whats=()
for c in "${KUBE_CMDS[@]}"; do whats+=("cmd/$c"); done
time_cmd=()
[[ -x /usr/bin/time ]] && time_cmd=(/usr/bin/time -f 'make: %e s wall, %U s user, peak RSS of one process %M KiB')
# Version info (v1.20.2, commit faecb19...) comes from the `git archive`
# substitutions already present in the tarball's hack/lib/version.sh; no git
# repo and no KUBE_GIT_* variables are needed. Clear any the caller set.
log "full make output: $build_log"
(
  cd "$tree"
  unset KUBE_GIT_VERSION_FILE KUBE_GIT_VERSION KUBE_GIT_COMMIT KUBE_GIT_TREE_STATE KUBE_GIT_MAJOR KUBE_GIT_MINOR
  unset GOPATH GOROOT GOBIN GO111MODULE
  export PATH="$GO_ROOT/bin:$PATH" GOPROXY=off GOFLAGS="" GOENV=off CGO_ENABLED=0 GOTOOLCHAIN=local
  "${time_cmd[@]}" make WHAT="${whats[*]}" 2>&1
) | tee "$build_log" | sed -u 's/^/  | /' >&2

# ---- pause ------------------------------------------------------------------------
phase pause "the pod sandbox's program, static"
pause_src=""
for f in "${PAUSE_SRCS[@]}"; do
  if [[ -f "$tree/$f" ]]; then pause_src="$tree/$f" && break; fi
done
[[ -n "$pause_src" ]] || die "no pause.c under $tree/build/pause"
gcc -Os -static -Wall -Werror -DVERSION="$KUBE_EXPECTED_VERSION" -o "$tree/_output/bin/pause" "$pause_src" ||
  die "compiling $pause_src failed"
log "pause: $("$tree/_output/bin/pause" -v 2>&1 | head -n1) (from ${pause_src#"$tree/"})"

# ---- verify -----------------------------------------------------------------------
phase verify "--version of each binary"
for c in "${KUBE_CMDS[@]}"; do
  b="$tree/_output/bin/$c"
  [[ -x "$b" ]] || die "make finished but $b is missing"
  v=$("$b" --version 2>&1) || die "'$c --version' failed: $v"
  [[ "$v" == "Kubernetes $KUBE_EXPECTED_VERSION" ]] || die "'$c --version' printed '$v', expected 'Kubernetes $KUBE_EXPECTED_VERSION'"
  log "$c: $v ($(du -m "$b" | cut -f1) MB)"
done
check_etcd

# ---- publish ----------------------------------------------------------------------
phase publish "$out_dir"
tmp_out=$(mktemp -d "$cache_root/.kube-publish.XXXXXX")
chmod 755 "$tmp_out"
mkdir -p "$tmp_out/bin"
for c in "${KUBE_CMDS[@]}" pause; do
  cp "$tree/_output/bin/$c" "$tmp_out/bin/$c"
done
{
  echo "source: $KUBE_SRC_PKG $KUBE_DEB_VERSION ($KUBE_ORIG_TARBALL sha256 $have_sha)"
  echo "patch: $REFLECT2_VENDOR_DIR replaced by golang-github-modern-go-reflect2-dev $(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev)"
  echo "go: $("$GO_ROOT/bin/go" version)"
  echo "recipe: $script_path sha256 prefix $recipe_hash"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
} >"$tmp_out/build-info.txt"
sync -f "$tmp_out/bin/${KUBE_CMDS[0]}" 2>/dev/null || true
touch "$tmp_out/.complete"
rm -rf "$out_dir" # only ever an incomplete leftover here: complete ones return early
mv -T "$tmp_out" "$out_dir"
tmp_out=""

# ---- clean up ---------------------------------------------------------------------
phase cleanup "removing $build_dir"
rm -rf "$build_dir"
end_phase
for d in "$cache_root"/kube-*; do
  [[ "$d" != "$out_dir" && -d "$d" ]] && log "note: $d is from another recipe version; delete it when nothing uses it"
done
log "done in $(since "$script_start")s ($phase_report)"
printf '%s\n' "$bin_dir"
