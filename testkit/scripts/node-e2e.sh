#!/usr/bin/env bash
# node-e2e.sh: the e2e suite (tests/e2e) on a real one-node cluster started on this host, as
# root on Debian bookworm: the images built locally (build-images.sh: the operator from the
# repository's Dockerfile, the test workload, a dev Consul from CONSUL_BIN, the pause image),
# then `node-e2e` starts the cluster and the node, installs the chart, and runs the suite.
#
#   CONSUL_BIN=/path/to/consul testkit/scripts/node-e2e.sh [extra cargo test args...]
#
# Environment: CONSUL_BIN (required: the dev Consul's binary), CARGO_TARGET_DIR (as cargo),
# ELECTOR_E2E_RUNS (failovers per real-node scenario, default 3), ELECTOR_E2E_LOGS (where the
# cluster's and node's logs are kept; default a new temp dir, printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${CONSUL_BIN:?set CONSUL_BIN to a consul binary (1.0 or later)}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/consul-elector"
target="${CARGO_TARGET_DIR:-target}"
logs="${ELECTOR_E2E_LOGS:-$(mktemp -d /tmp/node-e2e-logs.XXXXXX)}"
echo "node-e2e.sh: logs in $logs" >&2

# The node's programs (kubelet, kube-proxy, kube-scheduler, pause) and its packages.
kube_bin="$(testkit/scripts/build-kube.sh | tail -n 1)"
testkit/scripts/node-packages.sh

cargo build --locked -p testkit --bin workload --bin node-e2e
images="$(WORKLOAD_BIN="$target/debug/workload" PAUSE_BIN="$kube_bin/pause" \
  testkit/scripts/build-images.sh "$cache/node-images" | tail -n 1)"
consul_version="$("$CONSUL_BIN" version | sed -n '1s/^Consul v//p')"

exec "$target/debug/node-e2e" --images "$images" --operator-image consul-elector:e2e \
  --consul-image "consul-elector-e2e/consul:$consul_version" --log-dir "$logs" -- \
  cargo test --locked --test e2e -- --ignored --test-threads=1 "$@"
