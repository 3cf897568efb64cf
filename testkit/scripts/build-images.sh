#!/usr/bin/env bash
# build-images.sh: build the container images of the end-to-end tests without any image
# registry, and export each as an archive that `ctr -n k8s.io images import` loads into a
# node's containerd (1.6) under its full name.
#
# Why stand-ins: this project's CI has no image registry (and no network but the package
# registries), so the Dockerfile's two base images cannot be pulled. This script builds
# local STAND-INS for them, from Debian packages and the machine's own Rust toolchain, under
# the very names the Dockerfile uses, and then builds the Dockerfile unchanged on top:
#
#   gcr.io/distroless/cc-debian12:nonroot  libc6, libgcc-s1, ca-certificates, tzdata,
#       netbase, base-files unpacked with `dpkg-deb -x` (no chroot, no shell), /etc/passwd
#       and /etc/group with root and nonroot (65532), the CA bundle, /tmp 1777;
#       User 65532:65532, WorkingDir /home/nonroot.
#   rust:<RUST_VERSION>-bookworm  a Debian bookworm minbase (mmdebstrap) with bash, gcc,
#       libc6-dev, ca-certificates, make, pkg-config, plus this machine's rustup toolchain of
#       the same version (checked against the Dockerfile's RUST_VERSION), RUSTUP_HOME=
#       /usr/local/rustup, CARGO_HOME=/usr/local/cargo; it trusts the host's CA bundle, since
#       its cargo fetches crates through the host's network.
#
# Both carry the label dev.consul-elector.stand-in saying so. Anywhere with a registry, do
# not use this script for the operator: `docker build .` (or `make image`) pulls the real
# base images.
#
# Usage:
#   WORKLOAD_BIN=... CONSUL_BIN=... PAUSE_BIN=... build-images.sh OUT_DIR [OPERATOR_IMAGE]
#
#   OUT_DIR         where the archives go (created if missing); printed as the LAST line
#                   of stdout. Progress goes to stderr.
#   OPERATOR_IMAGE  name of the operator image (default consul-elector:e2e).
#
# Environment:
#   WORKLOAD_BIN  the testkit `workload` binary (`cargo build -p testkit --bin workload`;
#                 a debug build is fine). It must link against this machine's glibc
#                 (Debian bookworm), which the stand-in carries.
#   CONSUL_BIN    a Consul binary (static, or dynamic against glibc); the image tag is
#                 its version (`$CONSUL_BIN version`, without a leading "v").
#   PAUSE_BIN     a static pause binary (sleeps until SIGTERM/SIGINT); the image is FROM
#                 scratch.
#   IMAGES        comma-separated subset of operator,workload,consul,pause (default: all);
#                 only the chosen images' variables above are needed.
#   SKIP_SMOKE=1    do not run each image once (runc, private network namespace) to check
#                   that it starts.
#   CHECK_IMPORT=1  import every archive into a private, temporary containerd and check
#                   the names it lists (installs Debian's containerd when missing).
#
# Outputs, in OUT_DIR: operator.tar, workload.tar, consul.tar, pause.tar (docker-archive
# format) and images.tsv, one line per image: kind, archive, name as containerd lists it,
# image ID. The names containerd lists:
#   docker.io/library/consul-elector:e2e            (OPERATOR_IMAGE, normalised)
#   docker.io/consul-elector-e2e/workload:latest
#   docker.io/consul-elector-e2e/consul:<version>
#   docker.io/consul-elector-e2e/pause:3.2
#
# Caching: the stand-ins are rebuilt only when their recipe (the parts of this script between
# the ">>> stand-in recipe" and "<<< stand-in recipe" markers), the host toolchain or the
# host's CA bundle changes (their label dev.consul-elector.stand-in-recipe holds the key);
# the operator build uses buildah's layer cache (--layers), so after a change under src/ only
# the last layers run again (the operator's own compile). On 2 cores: about 7 minutes cold
# (stand-ins 1, operator 6), 6 seconds warm, 3.5 minutes after a change under src/. Old
# cached layers stay in buildah's storage (/var/lib/containers/storage); `buildah rmi
# --prune` frees them when the disk fills (the next build is cold).
#
# Needs root (buildah with the overlay driver, mmdebstrap, runc) and installs what is missing
# from Debian: buildah, runc, mmdebstrap, jq, curl (and containerd for CHECK_IMPORT=1). The
# operator build fetches crates from crates.io, with the host's network.
set -euo pipefail
export LC_ALL=C

# ---- the recipe --------------------------------------------------------------
readonly DEFAULT_OPERATOR_IMAGE="consul-elector:e2e"
readonly WORKLOAD_REF="${WORKLOAD_IMAGE:-docker.io/consul-elector-e2e/workload:latest}"
readonly CONSUL_REPO="${CONSUL_REPOSITORY:-docker.io/consul-elector-e2e/consul}"
readonly PAUSE_REF="${PAUSE_IMAGE:-docker.io/consul-elector-e2e/pause:3.2}"
# >>> stand-in recipe
readonly DISTROLESS_REF="gcr.io/distroless/cc-debian12:nonroot"
# Packages of the distroless stand-in: glibc and what it needs at run time (libgcc-s1,
# whose gcc-12-base holds only documents), the CA certificates and time zones the operator
# reads, /etc/services and /etc/protocols (netbase) and /etc/os-release (base-files).
readonly DISTROLESS_PACKAGES=(libc6 libgcc-s1 gcc-12-base ca-certificates tzdata netbase base-files)
readonly RUST_SUITE="bookworm"
readonly RUST_PACKAGES="bash,gcc,libc6-dev,ca-certificates,make,pkg-config"
# One fixed time for the stand-ins' files and creation dates, so the same recipe on the
# same Debian archive gives the same image IDs.
readonly STAND_IN_EPOCH=0
# The builder stage fetches crates with the host's network, so the rust stand-in trusts
# what the host trusts (a TLS-inspecting proxy's CA, say): it gets the host's CA bundle.
readonly HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
readonly STAND_IN_LABEL="dev.consul-elector.stand-in"
readonly RECIPE_LABEL="dev.consul-elector.stand-in-recipe"
# <<< stand-in recipe
readonly TOOL_PACKAGES=(buildah runc mmdebstrap jq curl)
readonly LOCK_WAIT_SECONDS=3600
readonly ALL_IMAGES="operator,workload,consul,pause"

# ---- paths and arguments ----------------------------------------------------------
script_path=$(readlink -f "${BASH_SOURCE[0]}")
repo_root=$(cd "$(dirname "$script_path")/../.." && pwd)
# The stand-ins' key: the recipe blocks of this script (between the ">>> stand-in recipe"
# and "<<< stand-in recipe" markers), so editing anything else keeps their cache.
recipe_hash=$(awk '/^# >>> stand-in recipe/ { on = 1 } on { print } /^# <<< stand-in recipe/ { on = 0 }' "$script_path" |
  sha256sum | cut -c1-16)
cache_root="${XDG_CACHE_HOME:-${HOME:?HOME or XDG_CACHE_HOME must be set}/.cache}/consul-elector"
lock_file="$cache_root/build-images.lock"

usage() {
  sed -n '/^# Usage:/,/^# Outputs/p' "$script_path" | sed '$d; s/^# \{0,1\}//' >&2
}

# Everything but the final line goes to stderr: keep the real stdout on fd 3.
exec 3>&1 1>&2

case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "" | -*) echo "build-images.sh: missing OUT_DIR (or unknown option '${1:-}')" >&2; usage; exit 2 ;;
esac
(($# <= 2)) || { echo "build-images.sh: too many arguments" >&2; usage; exit 2; }
out_dir_arg=$1
operator_image_arg=${2:-$DEFAULT_OPERATOR_IMAGE}

# ---- logging, phases, failure reporting ----------------------------------------
LOG_NAME=build-images PHASE=setup
# shellcheck source=phases.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/phases.sh"
die() {
  log "ERROR: $*"
  exit 1
}

# Everything started or made here, undone on exit whatever happens.
work=""
buildah_containers=()
runc_containers=()
runc_root=""
containerd_pid=""
on_exit() {
  local rc=$? c
  for c in "${runc_containers[@]}"; do
    runc --root "$runc_root" delete --force "$c" >/dev/null 2>&1 || true
  done
  if [[ -n "$containerd_pid" ]]; then
    kill "$containerd_pid" 2>/dev/null || true
    wait "$containerd_pid" 2>/dev/null || true
  fi
  for c in "${buildah_containers[@]}"; do
    buildah rm "$c" >/dev/null 2>&1 || true
  done
  [[ -n "$work" && -d "$work" ]] && rm -rf "$work"
  if ((rc != 0)); then
    log "FAILED in phase '$current_phase' (exit $rc) after $(since "$script_start")s."
  fi
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- helpers ------------------------------------------------------------------------
pkg_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

ensure_packages() {
  local missing=() p
  for p in "$@"; do
    pkg_installed "$p" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    log "needed packages present: $*"
    return 0
  fi
  log "installing from Debian: ${missing[*]}"
  apt-get -q -o DPkg::Lock::Timeout=600 update >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends \
    -o DPkg::Lock::Timeout=600 install "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed"
  for p in "${missing[@]}"; do
    pkg_installed "$p" || die "package $p is still not installed after apt-get install"
  done
}

# Fully qualified form of an image name, as containerd and the kubelet spell it:
# consul-elector:e2e -> docker.io/library/consul-elector:e2e.
normalize_ref() {
  local ref=$1 first rest
  [[ "$ref" != *@* ]] || die "image name '$ref': digests are not supported, give a tag"
  [[ "$ref" =~ ^[a-z0-9]([a-z0-9._/:-]*[a-zA-Z0-9_.-])?$ ]] || die "image name '$ref' is not a valid reference"
  if [[ "$ref" != */* ]]; then
    ref="docker.io/library/$ref"
  else
    first=${ref%%/*}
    rest=${ref#*/}
    if [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then
      ref="docker.io/$ref"
    elif [[ "$first" == docker.io && "$rest" != */* ]]; then
      ref="docker.io/library/$rest"
    fi
  fi
  [[ "${ref##*/}" == *:* ]] || ref="$ref:latest"
  printf '%s\n' "$ref"
}

image_exists() {
  buildah inspect --type image "$1" >/dev/null 2>&1
}

image_label() {
  buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null
}

image_id() {
  buildah inspect --type image --format '{{.FromImageID}}' "$1"
}

# A working container of IMAGE (or scratch), removed on exit unless committed with --rm;
# its name goes to $container (not printed: a $(...) subshell would lose the bookkeeping).
container_seq=0
new_container() {
  container_seq=$((container_seq + 1))
  container="ce-images-$$-$container_seq"
  buildah from --pull=never --quiet --name "$container" "$1" >/dev/null || die "buildah from $1 failed"
  buildah_containers+=("$container")
}

forget_container() {
  local keep=() x
  for x in "${buildah_containers[@]}"; do
    [[ "$x" == "$1" ]] || keep+=("$x")
  done
  buildah_containers=("${keep[@]}")
}

remove_container() {
  buildah rm "$1" >/dev/null || die "buildah rm $1 failed"
  forget_container "$1"
}

# The shared library names (libc.so.6, ...) binary $1 needs, one a line; none when static.
needed_libs() {
  local out
  out=$(ldd "$1" 2>&1) || true
  if grep -qE 'not a dynamic executable|statically linked' <<<"$out"; then
    return 0
  fi
  grep -q '=>' <<<"$out" || die "ldd cannot read $1: $out"
  awk '$2 == "=>" && $1 !~ /^linux-vdso/ { print $1 }' <<<"$out"
}

is_static() {
  local out
  out=$(ldd "$1" 2>&1) || true
  grep -qE 'not a dynamic executable|statically linked' <<<"$out"
}

# Checks that every library binary $1 needs is in the root file system $2.
check_libs_in() {
  local bin=$1 root=$2 libs lib missing=()
  libs=$(needed_libs "$bin") || die "cannot list the libraries $bin needs"
  for lib in $libs; do
    if [[ ! -e "$root/lib/x86_64-linux-gnu/$lib" && ! -e "$root/usr/lib/x86_64-linux-gnu/$lib" &&
      ! -e "$root/lib64/$lib" ]]; then
      missing+=("$lib")
    fi
  done
  ((${#missing[@]} == 0)) || die "$bin needs ${missing[*]}, which the distroless stand-in lacks"
}

require_bin() {
  local var=$1 path=${!1:-}
  [[ -n "$path" ]] || die "$var is not set (needed for the $2 image; or leave $2 out of IMAGES)"
  [[ -f "$path" && -x "$path" ]] || die "$var=$path is not an executable file"
  readlink -f "$path"
}

# ---- smoke runs: an image's rootfs under runc, read-only, in its own network namespace --
# smoke_start ID IMAGE USER ARGS_JSON [TMPFS_PATH...]: starts the container in the
# background (ARGS_JSON "null" means the image's entrypoint and cmd). Sets smoke_pid (the
# `runc run` process) and smoke_out (its output file).
smoke_start() {
  local id=$1 image=$2 user=$3 args=$4 mnt bundle cfg
  shift 4
  new_container "$image"
  smoke_container=$container
  mnt=$(buildah mount "$container") || die "buildah mount for the smoke run of $image failed"
  bundle="$work/bundle-$id"
  mkdir -p "$bundle"
  (cd "$bundle" && runc spec) || die "runc spec failed"
  cfg=$(buildah inspect --type image "$image" | jq -c '.OCIv1.config') || die "cannot read the config of $image"
  [[ -n "$user" ]] || user=$(jq -r '.User // "0:0"' <<<"$cfg")
  [[ "$user" =~ ^[0-9]+:[0-9]+$ ]] || die "smoke run of $image: user '$user' is not numeric uid:gid"
  jq --arg root "$mnt" --arg id "$id" --argjson cfg "$cfg" --argjson args "$args" \
    --argjson uid "${user%%:*}" --argjson gid "${user##*:}" \
    --args '
      .root = {path: $root, readonly: true}
      | .hostname = $id
      | .process.terminal = false
      | .process.args = (if $args == null then ($cfg.Entrypoint // []) + ($cfg.Cmd // []) else $args end)
      | .process.env = ($cfg.Env // ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
      | .process.cwd = (if ($cfg.WorkingDir // "") == "" then "/" else $cfg.WorkingDir end)
      | .process.user = {uid: $uid, gid: $gid}
      | .process.noNewPrivileges = true
      | .process.capabilities = {bounding: [], effective: [], permitted: [], inheritable: [], ambient: []}
      | .mounts += [$ARGS.positional[] | {destination: ., type: "tmpfs", source: "tmpfs",
                     options: ["nosuid", "nodev", "mode=1777"]}]
    ' "$@" <"$bundle/config.json" >"$bundle/config.json.new" || die "editing the runc spec failed"
  mv "$bundle/config.json.new" "$bundle/config.json"
  smoke_out="$work/smoke-$id.log"
  runc_containers+=("$id")
  runc --root "$runc_root" run --bundle "$bundle" "$id" </dev/null >"$smoke_out" 2>&1 &
  smoke_pid=$!
}

# The host pid of smoke container $1's process, once it runs.
smoke_container_pid() {
  runc --root "$runc_root" state "$1" 2>/dev/null | jq -r 'select(.status == "running") | .pid'
}

# smoke_wait PID SECONDS: waits for the background `runc run` to end; sets smoke_rc.
smoke_wait() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    smoke_rc=timeout
    return 0
  fi
  smoke_rc=0
  wait "$pid" || smoke_rc=$?
}

# Removes smoke container $1 and its rootfs.
smoke_stop() {
  local id=$1 keep=() x
  runc --root "$runc_root" delete --force "$id" >/dev/null 2>&1 || true
  for x in "${runc_containers[@]}"; do
    [[ "$x" == "$id" ]] || keep+=("$x")
  done
  runc_containers=("${keep[@]}")
  remove_container "$smoke_container"
}

# smoke_run ID IMAGE USER ARGS_JSON [TMPFS...]: runs to completion (at most 300 s); fails
# unless it exits 0. Its output is in $smoke_out.
smoke_run() {
  local id=$1 image=$2
  smoke_start "$@"
  smoke_wait "$smoke_pid" 300
  smoke_stop "$id"
  if [[ "$smoke_rc" != 0 ]]; then
    sed 's/^/  | /' "$smoke_out" >&2
    die "smoke run of $image ($id) ended with '$smoke_rc'"
  fi
}

# smoke_http ID PORT PATH [METHOD]: the body (then a line with the status) of an HTTP
# request to 127.0.0.1:PORT inside smoke container ID's network namespace.
smoke_http() {
  local pid
  pid=$(smoke_container_pid "$1")
  [[ -n "$pid" ]] || return 1
  nsenter --net="/proc/$pid/ns/net" curl -sS --max-time 5 -o - -w '\n%{http_code}\n' \
    -X "${4:-GET}" "http://127.0.0.1:$2$3" 2>/dev/null
}

# smoke_until SECONDS CMD...: retries CMD until it succeeds or the time is up.
smoke_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    kill -0 "$smoke_pid" 2>/dev/null || return 1
    sleep 0.2
  done
}

# >>> stand-in recipe: the text between these markers (and the constants block above)
# is hashed into the stand-ins' key; change how they are built only in here.
# Commits container $1 as image $2; the container is gone afterwards.
commit() {
  local c=$1 ref=$2 id
  id=$(buildah commit --quiet --rm --format oci --timestamp "$STAND_IN_EPOCH" "$c" "$ref") ||
    die "buildah commit of $ref failed"
  forget_container "$c"
  log "committed $ref (${id:0:12})"
}

# ---- stand-in: distroless cc ------------------------------------------------------------
build_distroless() {
  local debs="$work/debs" c root deb pkg f
  mkdir -p "$debs"
  log "apt-get download ${DISTROLESS_PACKAGES[*]}"
  if ! (cd "$debs" && apt-get -q -o APT::Sandbox::User=root download "${DISTROLESS_PACKAGES[@]}" >&2); then
    log "download failed; refreshing the package lists once"
    apt-get -q -o DPkg::Lock::Timeout=600 update >&2 || die "apt-get update failed"
    (cd "$debs" && apt-get -q -o APT::Sandbox::User=root download "${DISTROLESS_PACKAGES[@]}" >&2) ||
      die "apt-get download ${DISTROLESS_PACKAGES[*]} failed"
  fi
  new_container scratch
  c=$container
  root=$(buildah mount "$c") || die "buildah mount (distroless stand-in) failed"
  mkdir -p "$root/var/lib/dpkg/status.d"
  for deb in "$debs"/*.deb; do
    pkg=$(dpkg-deb -f "$deb" Package)
    log "  $pkg $(dpkg-deb -f "$deb" Version)"
    dpkg-deb -x "$deb" "$root" || die "dpkg-deb -x $deb failed"
    # What image scanners read in distroless images: one control file per package.
    dpkg-deb -f "$deb" >"$root/var/lib/dpkg/status.d/$pkg"
  done
  [[ -e "$root/lib64/ld-linux-x86-64.so.2" ]] || die "libc6 did not provide /lib64/ld-linux-x86-64.so.2"
  # Documents but the licences go; nothing in the image reads them.
  rm -rf "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" "$root/usr/share/locale"
  find "$root/usr/share/doc" -type f ! -name copyright -delete
  find "$root/usr/share/doc" -type d -empty -delete

  # What ca-certificates' postinst (update-ca-certificates) would write: every shipped
  # certificate, in name order, each ending in a newline.
  mkdir -p "$root/etc/ssl/certs"
  : >"$root/etc/ssl/certs/ca-certificates.crt"
  local n=0
  while IFS= read -r -d '' f; do
    # shellcheck disable=SC1003 # sed's "append a newline if missing", not a quote
    sed -e '$a\' "$f" >>"$root/etc/ssl/certs/ca-certificates.crt"
    n=$((n + 1))
  done < <(find "$root/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z)
  ((n > 100)) || die "only $n CA certificates found in the ca-certificates package"
  chmod 0644 "$root/etc/ssl/certs/ca-certificates.crt"
  log "  CA bundle: $n certificates"

  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nonroot:x:65532:
EOF
  # Without this file glibc asks DNS before /etc/hosts.
  cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd:    files
group:     files
shadow:    files
hosts:     files dns
networks:  files
protocols: files
services:  files
EOF
  chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
  install -d -m 0700 "$root/root"
  install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
  install -d -m 1777 "$root/tmp"
  ln -sfn /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"

  buildah config \
    --user 65532:65532 \
    --workingdir /home/nonroot \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label "$STAND_IN_LABEL=LOCAL STAND-IN for $DISTROLESS_REF, built from Debian packages by testkit/scripts/build-images.sh; not the real image" \
    --label "$RECIPE_LABEL=$distroless_key" \
    --label "org.opencontainers.image.description=Local stand-in for $DISTROLESS_REF (Debian 12 glibc, libgcc, CA certificates, tzdata; no shell)" \
    --created-by "testkit/scripts/build-images.sh (distroless stand-in)" \
    "$c" || die "buildah config (distroless stand-in) failed"
  commit "$c" "$DISTROLESS_REF"
}

# ---- stand-in: rust -------------------------------------------------------------------
build_rust() {
  local c root tc_name tc_dir b part
  new_container scratch
  c=$container
  root=$(buildah mount "$c") || die "buildah mount (rust stand-in) failed"
  log "mmdebstrap --variant=minbase --include=$RUST_PACKAGES $RUST_SUITE (a few minutes)"
  SOURCE_DATE_EPOCH=$STAND_IN_EPOCH nice -n 10 mmdebstrap --variant=minbase \
    --include="$RUST_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$RUST_SUITE" "$root" >&2 || die "mmdebstrap $RUST_SUITE into the rust stand-in failed"
  # mmdebstrap made device nodes; a container runtime mounts its own /dev.
  find "$root/dev" -mindepth 1 -delete
  if [[ -s "$HOST_CA_BUNDLE" ]]; then
    cp --dereference "$HOST_CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
    chmod 0644 "$root/etc/ssl/certs/ca-certificates.crt"
    log "  CA bundle: the host's $HOST_CA_BUNDLE ($(grep -c 'BEGIN CERTIFICATE' "$HOST_CA_BUNDLE") certificates)"
  else
    log "  CA bundle: Debian's (the host has no $HOST_CA_BUNDLE)"
  fi

  # The toolchain as rustup lays it out, its binaries on PATH through /usr/local/cargo/bin
  # (the real image puts rustup's proxies there; the real binaries do as well without rustup:
  # rustc finds its sysroot from its own resolved path). Its documents (share/) stay out.
  tc_name="$host_release-$host_host"
  tc_dir="$root/usr/local/rustup/toolchains/$tc_name"
  mkdir -p "$tc_dir" "$root/usr/local/cargo/bin"
  for part in bin lib libexec etc; do
    [[ -e "$sysroot/$part" ]] && cp -a "$sysroot/$part" "$tc_dir/"
  done
  for b in "$tc_dir"/bin/*; do
    ln -s "../../rustup/toolchains/$tc_name/bin/${b##*/}" "$root/usr/local/cargo/bin/${b##*/}"
  done
  chmod -R a+rX,go-w "$root/usr/local/rustup" "$root/usr/local/cargo"
  log "  toolchain $tc_name: $(du -sm "$tc_dir" | cut -f1) MB"

  buildah config \
    --env RUSTUP_HOME=/usr/local/rustup \
    --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env "RUST_VERSION=$host_release" \
    --cmd '["bash"]' \
    --label "$STAND_IN_LABEL=LOCAL STAND-IN for rust:$rust_version-$RUST_SUITE: Debian $RUST_SUITE (mmdebstrap minbase) and the build machine's Rust $host_release, built by testkit/scripts/build-images.sh; not the official image" \
    --label "$RECIPE_LABEL=$rust_key" \
    --label "org.opencontainers.image.description=Local stand-in for rust:$rust_version-$RUST_SUITE" \
    --created-by "testkit/scripts/build-images.sh (rust stand-in)" \
    "$c" || die "buildah config (rust stand-in) failed"
  commit "$c" "$rust_ref"
}

smoke_distroless() {
  # A dynamic binary of this machine runs in it as the nonroot user: the loader, libc and
  # libgcc_s are there. `workload` is one when given; /bin/true of the host is not (it has
  # no libgcc_s dependency), so use whichever is available.
  log "smoke: the distroless stand-in runs a host binary as 65532"
  local root probe
  new_container "$DISTROLESS_REF"
  root=$(buildah mount "$container")
  [[ -s "$root/etc/ssl/certs/ca-certificates.crt" && -d "$root/usr/share/zoneinfo" ]] ||
    die "distroless stand-in lacks the CA bundle or zoneinfo"
  probe=/bin/true
  [[ -n "${workload_bin:-}" ]] && probe=$workload_bin
  check_libs_in "$probe" "$root"
  remove_container "$container"
}

smoke_rust() {
  log "smoke: cargo, rustc and cc in the rust stand-in compile and link a program"
  local out program
  program='cargo --version; rustc --version; cc --version | head -n1; cd /tmp
echo '"'"'fn main() { println!("hello from the stand-in"); }'"'"' > m.rs
rustc -o m m.rs && ./m'
  smoke_run "ce-smoke-$$-rust" "$rust_ref" 0:0 \
    "$(jq -cn --arg p "$program" '["bash", "-euo", "pipefail", "-c", $p]')" /tmp
  out=$(<"$smoke_out")
  sed 's/^/  | /' "$smoke_out" >&2
  grep -q "^rustc $host_release " <<<"$out" || die "rust stand-in: rustc is not $host_release"
  grep -q '^hello from the stand-in$' <<<"$out" || die "rust stand-in: compiling a program failed"
}
# <<< stand-in recipe

# ensure_stand_in REF KEY BUILD_FUNCTION SMOKE_FUNCTION
ensure_stand_in() {
  local ref=$1 key=$2 have
  if image_exists "$ref"; then
    have=$(image_label "$ref" "$RECIPE_LABEL")
    if [[ "$have" == "$key" ]]; then
      log "$ref: stand-in with recipe $key present ($(image_id "$ref" | cut -c1-12))"
      return 0
    fi
    if [[ -z "$have" ]]; then
      log "$ref exists but is not this script's stand-in; replacing its tag with the stand-in"
    else
      log "$ref: stand-in of another recipe ($have); rebuilding"
    fi
  else
    log "$ref: not in buildah's storage; building the stand-in"
  fi
  "$3"
  [[ "${SKIP_SMOKE:-}" == 1 ]] || "$4"
}


# ---- start ----------------------------------------------------------------------------
((EUID == 0)) || die "needs root (buildah's overlay storage, mmdebstrap, runc); run it with sudo"
IFS=, read -r -a wanted <<<"${IMAGES:-$ALL_IMAGES}"
want() {
  local w
  for w in "${wanted[@]}"; do [[ "$w" == "$1" ]] && return 0; done
  return 1
}
for w in "${wanted[@]}"; do
  [[ ",$ALL_IMAGES," == *",$w,"* ]] || die "IMAGES: unknown image '$w' (known: $ALL_IMAGES)"
done
operator_ref=$(normalize_ref "$operator_image_arg")
workload_ref=$(normalize_ref "$WORKLOAD_REF")
pause_ref=$(normalize_ref "$PAUSE_REF")
want workload && workload_bin=$(require_bin WORKLOAD_BIN workload)
want consul && consul_bin=$(require_bin CONSUL_BIN consul)
want pause && pause_bin=$(require_bin PAUSE_BIN pause)
mkdir -p "$out_dir_arg" || die "cannot create OUT_DIR $out_dir_arg"
out_dir=$(cd "$out_dir_arg" && pwd)
log "images: ${wanted[*]}; output $out_dir; recipe $recipe_hash"

phase packages "installing what is missing"
packages=("${TOOL_PACKAGES[@]}")
[[ "${CHECK_IMPORT:-}" == 1 ]] && packages+=(containerd)
ensure_packages "${packages[@]}"

mkdir -p "$cache_root"
exec 9>"$lock_file"
if ! flock -n 9; then
  log "another build-images.sh holds $lock_file; waiting up to ${LOCK_WAIT_SECONDS}s"
  flock -w "$LOCK_WAIT_SECONDS" 9 || die "timed out waiting for $lock_file"
fi
work=$(mktemp -d "${TMPDIR:-/var/tmp}/build-images.XXXXXX")
runc_root="$work/runc"

# ---- the Dockerfile's bases and the host toolchain -------------------------------------
phase bases "checking the Dockerfile and the host's Rust toolchain"
dockerfile="$repo_root/Dockerfile"
[[ -f "$dockerfile" ]] || die "no Dockerfile at $dockerfile"
rust_version=$(sed -n 's/^ARG RUST_VERSION=\([0-9.]*\)[[:space:]]*$/\1/p' "$dockerfile" | head -n1)
[[ -n "$rust_version" ]] || die "no 'ARG RUST_VERSION=x.y' line in $dockerfile"
grep -q "^FROM rust:\${RUST_VERSION}-$RUST_SUITE AS builder\$" "$dockerfile" ||
  die "$dockerfile no longer builds FROM rust:\${RUST_VERSION}-$RUST_SUITE; update this script's rust stand-in"
grep -q "^FROM $DISTROLESS_REF\$" "$dockerfile" ||
  die "$dockerfile no longer runs FROM $DISTROLESS_REF; update this script's distroless stand-in"
rust_ref="docker.io/library/rust:$rust_version-$RUST_SUITE"
need_rust=0
want operator && need_rust=1
if ((need_rust)); then
  host_rustc_v=$(cd "$repo_root" && rustc -vV) || die "'rustc -vV' failed: the rust stand-in copies the host's toolchain"
  host_release=$(sed -n 's/^release: //p' <<<"$host_rustc_v")
  host_host=$(sed -n 's/^host: //p' <<<"$host_rustc_v")
  [[ "$host_release" == "$rust_version" || "$host_release" == "$rust_version".* ]] ||
    die "the host's rustc is $host_release but the Dockerfile's RUST_VERSION is $rust_version: the rust stand-in must carry that version (rustup toolchain install $rust_version, or a rust-toolchain override)"
  [[ "$host_host" == x86_64-unknown-linux-gnu ]] || die "host toolchain is $host_host; this script builds x86_64 images only"
  sysroot=$(cd "$repo_root" && rustc --print sysroot) || die "'rustc --print sysroot' failed"
  [[ -x "$sysroot/bin/rustc" && -x "$sysroot/bin/cargo" ]] || die "no bin/rustc and bin/cargo in the toolchain $sysroot"
  host_cargo_v=$("$sysroot/bin/cargo" -vV) || die "'$sysroot/bin/cargo -vV' failed"
  host_ca_sum=$(sha256sum "$HOST_CA_BUNDLE" 2>/dev/null | cut -d' ' -f1 || true)
  rust_key=$(printf '%s\n' "$recipe_hash" "$host_rustc_v" "$host_cargo_v" "$host_ca_sum" | sha256sum | cut -c1-16)
  log "host toolchain: rustc $host_release, $(head -n1 <<<"$host_cargo_v") ($sysroot); rust stand-in key $rust_key"
fi
distroless_key=$recipe_hash

phase stand-ins "only when missing or of another recipe"
if want operator || want workload || want consul; then
  ensure_stand_in "$DISTROLESS_REF" "$distroless_key" build_distroless smoke_distroless
fi
if ((need_rust)); then
  ensure_stand_in "$rust_ref" "$rust_key" build_rust smoke_rust
fi

# ---- the images ---------------------------------------------------------------------------
manifest_lines=()
# export_image KIND REF: writes OUT_DIR/KIND.tar with REF as its one name.
export_image() {
  local kind=$1 ref=$2 tmp="$out_dir/.$1.tar.tmp"
  rm -f "$tmp"
  buildah push --quiet "$ref" "docker-archive:$tmp:$ref" >&2 || die "exporting $ref to $tmp failed"
  mv -f "$tmp" "$out_dir/$kind.tar"
  manifest_lines+=("$kind	$kind.tar	$ref	$(image_id "$ref")")
  log "$kind: $out_dir/$kind.tar ($(du -m "$out_dir/$kind.tar" | cut -f1) MB) = $ref"
}

if want operator; then
  phase operator "buildah bud --layers of $dockerfile as $operator_ref"
  version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$repo_root/Cargo.toml")
  revision=$(git -C "$repo_root" rev-parse HEAD 2>/dev/null || echo unknown)
  nice -n 10 buildah bud --layers --force-rm --format docker --pull=never --network host \
    --build-arg "VERSION=${version:-0.1.0}" --build-arg "REVISION=$revision" \
    -f "$dockerfile" -t "$operator_ref" "$repo_root" >&2 ||
    die "buildah bud of $dockerfile failed (output above)"
  if [[ "${SKIP_SMOKE:-}" != 1 ]]; then
    log "smoke: $operator_ref prints its CRD as its own user, read-only"
    smoke_run "ce-smoke-$$-operator" "$operator_ref" "" '["/usr/local/bin/consul-elector","crd"]'
    grep -q '^kind: CustomResourceDefinition$' "$smoke_out" || die "$operator_ref: 'consul-elector crd' printed no CRD"
    [[ "$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$operator_ref")" == 65532:65532 ]] ||
      die "$operator_ref does not run as 65532:65532"
  fi
  export_image operator "$operator_ref"
fi

if want workload; then
  phase workload "$workload_bin as $workload_ref"
  new_container "$DISTROLESS_REF"
  c=$container
  root=$(buildah mount "$c")
  check_libs_in "$workload_bin" "$root"
  buildah copy --quiet --chmod 0755 --chown 0:0 "$c" "$workload_bin" /usr/local/bin/workload >/dev/null ||
    die "copying $workload_bin into the workload image failed"
  buildah config --entrypoint '["/usr/local/bin/workload"]' --port 8080 --workingdir / \
    --env PORT=8080 \
    --label "org.opencontainers.image.description=consul-elector end-to-end test workload (GET /, /readyz, /livez and their flips)" \
    --label "dev.consul-elector.binary-sha256=$(sha256sum "$workload_bin" | cut -d' ' -f1)" \
    --created-by "testkit/scripts/build-images.sh (workload)" "$c" || die "buildah config (workload) failed"
  commit "$c" "$workload_ref"
  if [[ "${SKIP_SMOKE:-}" != 1 ]]; then
    log "smoke: $workload_ref serves its name and flips its probes; exits 0 on SIGTERM"
    id="ce-smoke-$$-workload"
    smoke_start "$id" "$workload_ref" "" null
    smoke_until 30 smoke_http "$id" 8080 /readyz >/dev/null ||
      { sed 's/^/  | /' "$smoke_out" >&2; die "$workload_ref: no answer on :8080/readyz"; }
    [[ "$(smoke_http "$id" 8080 /)" == "$id"$'\n\n200' ]] || die "$workload_ref: GET / did not answer the host name"
    smoke_http "$id" 8080 /readyz/fail POST >/dev/null
    [[ "$(smoke_http "$id" 8080 /readyz | tail -n1)" == 503 ]] || die "$workload_ref: /readyz did not fail after POST /readyz/fail"
    runc --root "$runc_root" kill "$id" TERM
    smoke_wait "$smoke_pid" 10
    smoke_stop "$id"
    [[ "$smoke_rc" == 0 ]] || die "$workload_ref: after SIGTERM: '$smoke_rc' instead of exit 0"
  fi
  export_image workload "$workload_ref"
fi

if want consul; then
  consul_version=$("$consul_bin" version | head -n1 | awk '{ print $2 }') || true
  consul_version=${consul_version#v}
  [[ "$consul_version" =~ ^[0-9][A-Za-z0-9_.-]{0,127}$ ]] ||
    die "cannot tell the version of $consul_bin ('$consul_bin version' printed '$("$consul_bin" version 2>&1 | head -n1)')"
  consul_ref=$(normalize_ref "$CONSUL_REPO:$consul_version")
  phase consul "$consul_bin (Consul $consul_version) as $consul_ref"
  new_container "$DISTROLESS_REF"
  c=$container
  root=$(buildah mount "$c")
  check_libs_in "$consul_bin" "$root"
  buildah copy --quiet --chmod 0755 --chown 0:0 "$c" "$consul_bin" /bin/consul >/dev/null ||
    die "copying $consul_bin into the consul image failed"
  # The official image's user and directories: uid 100 (consul), gid 1000; the chart runs it
  # so, with emptyDirs on /consul/data and /consul/config.
  printf 'consul:x:100:1000:consul:/consul:/sbin/nologin\n' >>"$root/etc/passwd"
  printf 'consul:x:1000:\n' >>"$root/etc/group"
  install -d -m 0775 -o 100 -g 1000 "$root/consul" "$root/consul/data" "$root/consul/config"
  buildah config --entrypoint '["/bin/consul"]' --cmd '["agent","-dev","-client","0.0.0.0"]' \
    --user 100:1000 --workingdir / --port 8500 --port 8600/udp \
    --label "org.opencontainers.image.description=Consul $consul_version on the distroless stand-in, for consul-elector's end-to-end tests" \
    --label "org.opencontainers.image.version=$consul_version" \
    --label "dev.consul-elector.binary-sha256=$(sha256sum "$consul_bin" | cut -d' ' -f1)" \
    --created-by "testkit/scripts/build-images.sh (consul)" "$c" || die "buildah config (consul) failed"
  commit "$c" "$consul_ref"
  if [[ "${SKIP_SMOKE:-}" != 1 ]]; then
    log "smoke: $consul_ref 'agent -dev' as 100:1000, read-only root, writable data/config/tmp, elects itself"
    id="ce-smoke-$$-consul"
    smoke_start "$id" "$consul_ref" 100:1000 '["/bin/consul","agent","-dev","-client","0.0.0.0"]' \
      /consul/data /consul/config /tmp
    leader_elected() { smoke_http "$id" 8500 /v1/status/leader | head -n1 | grep -q '^"[^"]'; }
    smoke_until 60 leader_elected ||
      { sed 's/^/  | /' "$smoke_out" >&2; die "$consul_ref: no leader on :8500/v1/status/leader within 60s"; }
    log "  leader: $(smoke_http "$id" 8500 /v1/status/leader | head -n1)"
    runc --root "$runc_root" kill "$id" TERM
    smoke_wait "$smoke_pid" 20
    smoke_stop "$id"
  fi
  export_image consul "$consul_ref"
fi

if want pause; then
  phase pause "$pause_bin as $pause_ref"
  is_static "$pause_bin" || die "PAUSE_BIN=$pause_bin is not a static binary (the pause image is FROM scratch)"
  new_container scratch
  c=$container
  buildah copy --quiet --chmod 0755 --chown 0:0 "$c" "$pause_bin" /pause >/dev/null ||
    die "copying $pause_bin into the pause image failed"
  buildah config --entrypoint '["/pause"]' --user 65535:65535 \
    --label "org.opencontainers.image.description=pause (pod sandbox) for consul-elector's end-to-end tests" \
    --label "dev.consul-elector.binary-sha256=$(sha256sum "$pause_bin" | cut -d' ' -f1)" \
    --created-by "testkit/scripts/build-images.sh (pause)" "$c" || die "buildah config (pause) failed"
  commit "$c" "$pause_ref"
  if [[ "${SKIP_SMOKE:-}" != 1 ]]; then
    log "smoke: $pause_ref keeps running, exits 0 on SIGTERM"
    id="ce-smoke-$$-pause"
    smoke_start "$id" "$pause_ref" "" null
    pause_running() { [[ -n "$(smoke_container_pid "$id")" ]]; }
    smoke_until 10 pause_running || die "$pause_ref did not start"
    runc --root "$runc_root" kill "$id" TERM
    smoke_wait "$smoke_pid" 10
    smoke_stop "$id"
    [[ "$smoke_rc" == 0 ]] || die "$pause_ref: after SIGTERM: '$smoke_rc' instead of exit 0"
  fi
  export_image pause "$pause_ref"
fi

printf '%s\n' "${manifest_lines[@]}" >"$out_dir/images.tsv"

# ---- optional: what containerd 1.6 makes of the archives ----------------------------------
if [[ "${CHECK_IMPORT:-}" == 1 ]]; then
  phase check-import "ctr images import into a private containerd"
  cdir="$work/containerd"
  mkdir -p "$cdir"
  cat >"$cdir/config.toml" <<EOF
version = 2
root = "$cdir/root"
state = "$cdir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$cdir/containerd.sock"
[ttrpc]
  address = "$cdir/containerd-ttrpc.sock"
[debug]
  address = "$cdir/debug.sock"
EOF
  containerd --config "$cdir/config.toml" >"$cdir/log" 2>&1 &
  containerd_pid=$!
  for _ in $(seq 100); do
    [[ -S "$cdir/containerd.sock" ]] && break
    kill -0 "$containerd_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -S "$cdir/containerd.sock" ]] || { cat "$cdir/log" >&2; die "the private containerd did not start"; }
  ctr_=(ctr -a "$cdir/containerd.sock" -n k8s.io)
  for line in "${manifest_lines[@]}"; do
    IFS=$'\t' read -r kind archive ref _ <<<"$line"
    "${ctr_[@]}" images import "$out_dir/$archive" >&2 || die "ctr images import $archive failed"
    "${ctr_[@]}" images ls -q | grep -qxF "$ref" || die "after importing $archive, containerd does not list $ref"
    log "containerd lists $ref (from $archive)"
  done
  "${ctr_[@]}" images ls >&2
  kill "$containerd_pid"
  wait "$containerd_pid" 2>/dev/null || true
  containerd_pid=""
fi

end_phase
log "done in $(since "$script_start")s ($phase_report)"
for line in "${manifest_lines[@]}"; do
  IFS=$'\t' read -r kind archive ref _ <<<"$line"
  log "  $archive  $ref"
done
printf '%s\n' "$out_dir" >&3
