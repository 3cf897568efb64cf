#!/usr/bin/env bash
# node-packages.sh: install the Debian packages a real test node runs on (testkit's `node`
# module): containerd with its CRI plugin, runc, the CNI plugins (bridge, host-local,
# loopback, portmap), iptables and conntrack for kube-proxy. Only what is missing is
# installed; needs root (or sudo) when something is. Nothing is started or enabled: the tests
# run containerd themselves, with their own configuration and directories.
set -euo pipefail
readonly PACKAGES=(containerd runc containernetworking-plugins iptables conntrack)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" == ii* ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

as_root() {
  if ((EUID == 0)); then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "node-packages.sh: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
}
echo "node-packages.sh: installing ${missing[*]}" >&2
as_root apt-get -q -o DPkg::Lock::Timeout=600 update >&2
as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends \
  -o DPkg::Lock::Timeout=600 install "${missing[@]}" >&2
for p in "${missing[@]}"; do
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" == ii* ]] ||
    { echo "node-packages.sh: $p is still not installed" >&2; exit 1; }
done
