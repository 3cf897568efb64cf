#!/usr/bin/env bash
# node-e2e.sh: the e2e suite (tests/e2e) on a real two-node cluster started on this host, as
# root on Debian bookworm: the images built locally (build-images.sh: the operator from the
# repository's Dockerfile, the test workload, a dev Consul from CONSUL_BIN, the pause image),
# then `node-e2e` starts the cluster and its nodes, installs the chart, and runs the suite.
#
#   CONSUL_BIN=/path/to/consul testkit/scripts/node-e2e.sh [extra cargo test args...]
#   testkit/scripts/node-e2e.sh --agnhost-image    # print the name the workload stands in for
#
# Environment: CONSUL_BIN (required: the dev Consul's binary), CARGO_TARGET_DIR (as cargo),
# ELECTOR_E2E_RUNS (failovers per real-node scenario, default 3), ELECTOR_E2E_LOGS (where the
# cluster's and node's logs are kept; default a new temp dir, printed),
# ELECTOR_E2E_KUBE_PROXY_MIN_SYNC_MS (kube-proxy's iptables.minSyncPeriod; default its own, 1 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The workload stands in for examples/web.yaml's agnhost image, under its name.
agnhost="$(sed -n 's/^ *image: \(registry.k8s.io\/e2e-test-images\/agnhost:.*\)$/\1/p' examples/web.yaml)"
[[ -n "$agnhost" ]] || { echo "node-e2e.sh: no agnhost image in examples/web.yaml" >&2; exit 1; }
if [[ "${1:-}" == --agnhost-image ]]; then
  echo "$agnhost"
  exit 0
fi
: "${CONSUL_BIN:?set CONSUL_BIN to a consul binary (1.0 or later)}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/consul-elector"
target="${CARGO_TARGET_DIR:-target}"
logs="${ELECTOR_E2E_LOGS:-$(mktemp -d /tmp/node-e2e-logs.XXXXXX)}"
echo "node-e2e.sh: logs in $logs" >&2

# The node's programs (kubelet, kube-proxy, kube-scheduler, pause) and its packages.
kube_bin="$(testkit/scripts/build-kube.sh | tail -n 1)"
testkit/scripts/node-packages.sh

cargo build --locked -p testkit --bin workload --bin node-e2e
images="$(WORKLOAD_BIN="$target/debug/workload" WORKLOAD_IMAGE="$agnhost" PAUSE_BIN="$kube_bin/pause" \
  testkit/scripts/build-images.sh "$cache/node-images" | tail -n 1)"
# images.tsv: kind, archive, name, image id; one line per image.
image_of() { awk -F '\t' -v kind="$1" '$1 == kind { print $3 }' "$images/images.tsv"; }

exec "$target/debug/node-e2e" --images "$images" --operator-image "$(image_of operator)" \
  --consul-image "$(image_of consul)" --log-dir "$logs" \
  ${ELECTOR_E2E_KUBE_PROXY_MIN_SYNC_MS:+--kube-proxy-min-sync-ms "$ELECTOR_E2E_KUBE_PROXY_MIN_SYNC_MS"} -- \
  cargo test --locked --test e2e -- --ignored --test-threads=1 "$@"
