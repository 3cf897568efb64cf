# consul-elector: developer and demo tasks. `make help` lists them.
#
# The demo targets need Docker (a running engine), kind, kubectl and helm; each checks for
# them first (scripts/require.sh) and stops with one clear message naming what is missing.
# They only ever talk to the kind cluster's context (kind-$(CLUSTER)), never to the current
# kubectl context; `make e2e` deliberately uses the current context.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

# ---- settings (override on the command line: make demo CLUSTER=mine) -------------------
# Name of the kind cluster.
CLUSTER ?= consul-elector
# kubectl/helm context of the demo targets.
KUBE_CONTEXT ?= kind-$(CLUSTER)
# Helm release name and the operator's namespace.
RELEASE ?= consul-elector
NAMESPACE ?= consul-elector
# Namespace the demo's examples/web.yaml goes into.
DEMO_NAMESPACE ?= default
# Image built by `make image` and loaded into kind.
VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
GIT_SHORT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_DIRTY := $(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)
IMAGE_REPOSITORY ?= consul-elector
IMAGE_TAG ?= $(VERSION)-g$(GIT_SHORT)$(GIT_DIRTY)
IMAGE := $(IMAGE_REPOSITORY):$(IMAGE_TAG)
# Set to 1 when the image was built elsewhere (CI builds it with a layer cache): `make image`
# then only checks that it exists locally.
SKIP_IMAGE_BUILD ?=

KUBECTL := kubectl --context $(KUBE_CONTEXT)
HELM := helm --kube-context $(KUBE_CONTEXT)
REQUIRE := scripts/require.sh
CRD_FILE := crds/leaderelections.elector.dev.yaml
CHART := charts/consul-elector

.PHONY: help demo e2e crds crds-check lint test clean image cluster load install demo-status

help: ## List the targets
	@echo "consul-elector make targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Settings (make TARGET NAME=value): CLUSTER=$(CLUSTER) NAMESPACE=$(NAMESPACE)"
	@echo "  RELEASE=$(RELEASE) DEMO_NAMESPACE=$(DEMO_NAMESPACE) IMAGE=$(IMAGE)"

demo: ## kind cluster + image + chart with a dev Consul, then examples/web.yaml and its leader
	@$(REQUIRE) demo docker-engine kind kubectl helm
	@$(MAKE) cluster
	@$(MAKE) load
	@$(MAKE) install
	$(KUBECTL) apply -n $(DEMO_NAMESPACE) -f examples/web.yaml
	$(KUBECTL) wait -n $(DEMO_NAMESPACE) --for=condition=LeaderElected le/web --timeout=180s
	@$(MAKE) demo-status

demo-status: ## Print the demo's leader, pod roles and the Services' endpoints
	@$(REQUIRE) demo-status kubectl
	@leader="$$($(KUBECTL) get -n $(DEMO_NAMESPACE) le web -o jsonpath='{.status.leader.pod}')"; \
	echo; echo "== LeaderElection web: leader $$leader"; \
	$(KUBECTL) get -n $(DEMO_NAMESPACE) le web; \
	echo; echo "== pods, their role label and fencing token (an annotation)"; \
	$(KUBECTL) get pods -n $(DEMO_NAMESPACE) -l app=web \
	  -o custom-columns='NAME:.metadata.name,READY:.status.containerStatuses[0].ready,ROLE:.metadata.labels.elector\.dev/role,TOKEN:.metadata.annotations.elector\.dev/fencing-token,IP:.status.podIP,NODE:.spec.nodeName'; \
	echo; echo "== EndpointSlices of web-leader (only the leader) and web-followers"; \
	for _ in $$(seq 30); do \
	  endpoints="$$($(KUBECTL) get endpointslices -n $(DEMO_NAMESPACE) \
	    -l kubernetes.io/service-name=web-leader -o jsonpath='{.items[*].endpoints[*].targetRef.name}')"; \
	  [[ "$$endpoints" == "$$leader" ]] && break; sleep 1; \
	done; \
	$(KUBECTL) get endpointslices -n $(DEMO_NAMESPACE) \
	  -l 'kubernetes.io/service-name in (web-leader,web-followers)' \
	  -o custom-columns='SERVICE:.metadata.labels.kubernetes\.io/service-name,ADDRESSES:.endpoints[*].addresses[0],PODS:.endpoints[*].targetRef.name'; \
	echo; echo "Try a failover: $(KUBECTL) delete pod -n $(DEMO_NAMESPACE) $$leader && make demo-status"

cluster: ## Create the kind cluster (kept if it exists)
	@$(REQUIRE) cluster docker-engine kind
	@if kind get clusters 2>/dev/null | grep -qx '$(CLUSTER)'; then \
	  echo "kind cluster $(CLUSTER) exists"; \
	else \
	  kind create cluster --name '$(CLUSTER)' --wait 120s; \
	fi

image: ## Build the operator image (docker build .)
	@$(REQUIRE) image docker-engine
ifeq ($(SKIP_IMAGE_BUILD),1)
	docker image inspect '$(IMAGE)' >/dev/null
else
	docker build --build-arg VERSION='$(VERSION)' --build-arg REVISION='$(REVISION)' -t '$(IMAGE)' .
endif

load: image ## Load the image into the kind cluster
	@$(REQUIRE) load docker-engine kind
	kind load docker-image '$(IMAGE)' --name '$(CLUSTER)'

install: ## helm upgrade --install the chart with consulDev.enabled=true and the loaded image
	@$(REQUIRE) install kubectl helm
	$(HELM) upgrade --install '$(RELEASE)' $(CHART) --namespace '$(NAMESPACE)' --create-namespace \
	  --set consulDev.enabled=true \
	  --set-string image.repository='$(IMAGE_REPOSITORY)' \
	  --set-string image.tag='$(IMAGE_TAG)' \
	  --set image.pullPolicy=Never \
	  --wait --timeout 5m

e2e: ## Run the e2e suite against the current kube context (after make demo)
	@$(REQUIRE) e2e cargo
	ELECTOR_E2E=1 ELECTOR_E2E_NAMESPACE='$(NAMESPACE)' cargo test --test e2e -- --ignored --test-threads=1

crds: ## Regenerate crds/ and the chart's crds/ copy from `consul-elector crd`
	@$(REQUIRE) crds cargo
	cargo run --quiet --locked -p consul-elector --bin consul-elector -- crd > $(CRD_FILE).tmp
	mv $(CRD_FILE).tmp $(CRD_FILE)
	cp $(CRD_FILE) $(CHART)/crds/

crds-check: crds ## Fail when the committed CRDs differ from the code (CI)
	@git diff --exit-code -- crds $(CHART)/crds || { \
	  echo "The CRD YAML is out of date: run 'make crds' and commit the result." >&2; exit 1; }

lint: ## cargo fmt --check, clippy -D warnings, chart lint (charts/tests/check_chart.py), hadolint
	@$(REQUIRE) lint cargo python3
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	py="$$(charts/tests/setup-venv.sh)" && "$$py" charts/tests/check_chart.py lint
	@if command -v hadolint >/dev/null 2>&1; then \
	  echo "hadolint Dockerfile" && hadolint Dockerfile; \
	else \
	  echo "note: hadolint is not installed; skipped (tests/repo/dockerfile.rs still checks the Dockerfile)"; \
	fi

test: ## Run every test (the README's test command)
	cargo test --workspace

clean: ## Delete the kind cluster and cargo clean
	@if command -v kind >/dev/null 2>&1; then \
	  kind delete cluster --name '$(CLUSTER)'; \
	else \
	  echo "kind is not installed: no kind cluster to delete"; \
	fi
	cargo clean
