#!/usr/bin/env python3
"""Checks the consul-elector Helm chart with Helm's own engine (helm-sdkpy bundles Helm 4's Go
library), since no helm CLI exists here.

    check_chart.py lint
        No cluster. `helm lint` of the chart with its defaults and with every optional feature
        on (the admission policy included), and a values file of the wrong type must fail the
        lint.

    check_chart.py cluster --kubeconfig PATH --default-namespace NS --features-namespace NS
                           --no-servicemonitor-namespace NS --watch-namespaces NS1,NS2
                           [--summary-out FILE]
        Installs the chart into a real cluster (whose API server validates every object):
        values of the wrong type must fail with the schema's message; the default values, and
        every optional feature on (once before the ServiceMonitor CRD exists, once after),
        install (the PrometheusRule, like the ServiceMonitor, only once its API is served, holding
        files/prometheus-rules.yaml; the dashboard ConfigMap holding dashboards/ with the Grafana
        sidecar's label); the pre-delete hook's objects are rendered but not created; the
        hardening and RBAC rules are checked on the objects Helm rendered and again
        on the objects the API server stored, and the default view/edit/admin ClusterRoles must
        have aggregated the chart's LeaderElection rules. admissionPolicy.enabled must render
        the ValidatingAdmissionPolicy (a cluster before 1.30 refuses the install naming it; its
        CEL is tested by tests/repo/admission_policy.rs). The namespaces must exist.

    check_chart.py install --kubeconfig PATH --namespace NS --release NAME --values FILE
        Installs the chart as a user would (`helm install --create-namespace -f FILE`), for the
        real-node e2e suite: no checks, the exit status is Helm's.

    check_chart.py install ... --chart PATH
        The same with another chart (a directory or an archive): the upgrade test installs the
        previous chart this way.

    check_chart.py upgrade --kubeconfig PATH --namespace NS --release NAME
        `helm upgrade --reset-then-reuse-values` of the release to this chart (the new chart's
        defaults, then the values the user set); prints the revision and the hooks. The exit
        status is Helm's.

    check_chart.py uninstall --kubeconfig PATH --namespace NS --release NAME [--timeout S]
        `helm uninstall --wait` with its hooks (the chart's pre-delete hook deletes the
        elections first), for the real-node e2e suite's uninstall test; the exit status is Helm's.

Every failure is printed; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent.parent / "consul-elector"

# Helm (and kubectl) keep caches and repository lists; keep them out of the user's home.
_HELM_HOME = tempfile.mkdtemp(prefix="check-chart-helm-")
atexit.register(shutil.rmtree, _HELM_HOME, ignore_errors=True)
for _var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
    os.environ.setdefault(_var, os.path.join(_HELM_HOME, _var.lower()))

try:
    import helm_sdkpy as helm
except ImportError as error:  # pragma: no cover - the message is the point
    sys.exit(
        f"check_chart: cannot import helm_sdkpy ({error}); create the venv with "
        "charts/tests/setup-venv.sh and run this script with its python"
    )

# The minimum permissions the operator needs, as the chart must grant them (and no more).
# files/rbac-rules.yaml is the single source the chart renders; this table is what the check
# holds it to, so widening a rule there fails here until this table is changed too.
EXPECTED_RULES = {
    ("", "pods"): ["get", "list", "watch", "patch"],
    ("apps", "replicasets"): ["get"],
    ("apps", "statefulsets"): ["get"],
    ("apps", "daemonsets"): ["get"],
    ("batch", "jobs"): ["get"],
    ("elector.dev", "leaderelections"): ["get", "list", "watch", "patch", "update"],
    ("elector.dev", "leaderelections/status"): ["patch"],
    ("elector.dev", "leaderelections/finalizers"): ["update"],
    ("events.k8s.io", "events"): ["create", "patch"],
}
SECRET_RULE = {("", "secrets"): ["get"]}
# The operator's own Lease (which replica writes): a Role in the release namespace only.
LEASE_RULE = {("coordination.k8s.io", "leases"): ["create", "get", "patch", "update"]}
# Without clusterName the operator reads the kube-system namespace's UID, and nothing else.
IDENTITY_RULE = {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]}

# The aggregated ClusterRoles (name suffix): the default roles they feed, and their rules.
READ = ["get", "list", "watch"]
AGGREGATED_ROLES = {
    "-view": (["view"], {("elector.dev", "leaderelections"): READ}),
    "-edit": (["edit", "admin"], {("elector.dev", "leaderelections"): sorted(
        READ + ["create", "update", "patch", "delete", "deletecollection"])}),
}

# The optional ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.30+).
ADMISSION_POLICY = {"admissionPolicy": {"enabled": True, "extraLabelKeys": ["app.example.com/role"]}}
POLICY_KINDS = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]

SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"
PROMETHEUSRULE_CRD = "prometheusrules.monitoring.coreos.com"
FIXTURE_LABEL = "consul-elector.dev/test-fixture"

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", *POLICY_KINDS}


def all_features(watch: list[str]) -> dict:
    """Values turning on every optional feature of the chart."""
    return {
        "watchNamespaces": watch,
        "rbac": {"secretAccess": True},
        "logFormat": "json",
        "logFilter": "info,consul_elector=debug",
        "extraEnv": [{"name": "ELECTOR_CONSUL_MAX_CONNECTIONS", "value": "32"}],
        "clusterName": "chart-features",
        "formerNames": ["chart-old/ops.consul-elector"],
        "consul": {
            "allowedAddresses": ["https://consul.team-a.example:8501", "consul.team-b.example:8500"],
            "allowedDatacenters": ["dc2", "eu-west_1"],
            "datacenter": "dc1",
            "tlsServerName": "server.dc1.consul",
            "caCert": {"secretName": "consul-ca"},
            "clientCert": {"secretName": "consul-client"},
            "token": {"secretName": "consul-token"},
        },
        "consulDev": {"enabled": True},
        "image": {"pullSecrets": [{"name": "regcred"}], "registry": "mirror.example:5000",
                  "digest": "sha256:" + "0123456789abcdef" * 4},
        "serviceAccount": {"annotations": {"example.com/owner": "platform"}},
        "service": {"annotations": {"example.com/scrape": "true"}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"},
                           "jobLabel": "app.kubernetes.io/name", "tlsConfig": {"insecureSkipVerify": False}},
        # Rendered only where the PrometheusRule API is served (lint's default capabilities do not).
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}, "alerts": {
            "ConsulElectorElectionConflict": {"for": "15m", "labels": {"team": "platform", "severity": "info"},
                                              "runbookUrl": "https://runbooks.example/conflict"},
            "ConsulElectorStateDisagrees": {"enabled": False},
        }},
        "grafanaDashboard": {
            "enabled": True,
            "sidecarLabel": "grafana.example.com/dashboard",
            "sidecarLabelValue": "consul-elector",
            "labels": {"team": "platform"},
            "annotations": {"grafana_folder": "Operators"},
        },
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
            ],
            "apiServer": {"cidrs": ["127.0.0.1/32"]},
            "consul": {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
        },
        "podDisruptionBudget": {"enabled": True},
        "commonLabels": {"example.com/cost-center": "platform"},
        "deploymentAnnotations": {"example.com/owner": "platform"},
        "leaderElection": {"leaseDuration": "20s", "renewDeadline": "12s"},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "extraVolumes": [{"name": "consul-agent", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": "consul-agent", "mountPath": "/run/consul", "readOnly": True}],
        "podLabels": {"team": "platform"},
        "podAnnotations": {"example.com/note": "checked"},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [
                                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                            ]
                        },
                    }
                ]
            }
        },
    }


# Values of the wrong type (or unknown names) and the part of Helm's schema message naming them.
WRONG_VALUES = [
    ({"replicaCount": "1"}, "at '/replicaCount': got string, want integer"),
    ({"replicaCount": -1}, "at '/replicaCount': minimum: got -1, want 0"),
    ({"watchNamespaces": "shop"}, "at '/watchNamespaces': got string, want array"),
    ({"consul": {"tlsVerify": "no"}}, "at '/consul/tlsVerify': got string, want boolean"),
    ({"metrics": {"port": "http"}}, "at '/metrics/port': got string, want integer"),
    ({"lockWatchWait": "60"}, "at '/lockWatchWait': '60' does not match pattern"),
    ({"clusterName": "Prod"}, "at '/clusterName': 'Prod' does not match pattern"),
    ({"consul": {"allowedAddresses": "consul:8500"}}, "at '/consul/allowedAddresses': got string, want array"),
    ({"consul": {"allowedDatacenters": ["dc 2"]}}, "at '/consul/allowedDatacenters/0': 'dc 2' does not match pattern"),
    ({"logFormat": "xml"}, "at '/logFormat': value must be one of 'plain', 'json'"),
    ({"image": {"digest": "latest"}}, "at '/image/digest': 'latest' does not match pattern"),
    ({"watchNamespace": ["shop"]}, "additional properties 'watchNamespace' not allowed"),
    # Values the operator or the API server would refuse are refused by the schema already.
    ({"lockWatchWait": "11m"}, "at '/lockWatchWait': '11m' does not match pattern"),
    ({"livenessTimeout": "0s"}, "at '/livenessTimeout': '0s' does not match pattern"),
    ({"livenessProbe": {"successThreshold": 3}}, "at '/livenessProbe/successThreshold': value must be 1"),
    ({"consul": {"address": "ftp://consul:8500"}}, "at '/consul/address': 'ftp://consul:8500' does not match pattern"),
    ({"consul": {"namespace": "team_a"}}, "at '/consul/namespace': 'team_a' does not match pattern"),
    ({"consul": {"partition": "p" * 64}}, "at '/consul/partition': '" + "p" * 64 + "' does not match pattern"),
]
# Values the schema cannot judge alone, refused by the chart as it renders, with its message.
REFUSED_AT_RENDER = [
    ({"leaderElection": {"leaseDuration": "10s", "renewDeadline": "10s"}},
     "leaderElection.renewDeadline (10s) must be at least 2s and shorter than leaderElection.leaseDuration (10s)"),
    ({"leaderElection": {"renewDeadline": "1s"}},
     "leaderElection.renewDeadline (1s) must be at least 2s"),
]
SCHEMA_MESSAGE = "values don't meet the specifications of the schema"


class Checks:
    """Collects check results; every failure is printed as it happens."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def expect(self, condition: bool, what: str) -> bool:
        if condition:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"FAIL: {what}", flush=True)
        return condition

    def finish(self, mode: str) -> int:
        if self.failed:
            print(f"check_chart {mode}: {len(self.failed)} of {self.passed + len(self.failed)} checks FAILED")
            return 1
        print(f"check_chart {mode}: all {self.passed} checks passed")
        return 0


def expected_image(image: dict) -> str:
    """The operator image the values ask for: the repository with its registry host replaced
    by `registry` (or prefixed when it names none), then `@digest`, else `:tag` (default: the
    chart's appVersion)."""
    repository = image["repository"]
    if image.get("registry"):
        host, _, rest = repository.partition("/")
        if rest and ("." in host or ":" in host or host == "localhost"):
            repository = f"{image['registry']}/{rest}"
        else:
            repository = f"{image['registry']}/{repository}"
    if image.get("digest"):
        return f"{repository}@{image['digest']}"
    return f"{repository}:{image['tag'] or chart_meta()['appVersion']}"


def deep_merge(base: dict, override: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def chart_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def chart_meta() -> dict:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


# ---------------------------------------------------------------------------------------------
# lint


def lint(chart_dir: Path) -> list[tuple[int, str]]:
    """(severity, path) of every lint message (helm-sdkpy loses the messages' text)."""
    config = helm.Configuration(namespace="default")
    result = asyncio.run(helm.Lint(config).run(str(chart_dir)))
    return [(m["Severity"], m["Path"]) for m in result.get("Messages") or []]


def chart_copy_with_values(values: dict, workdir: Path) -> Path:
    """A copy of the chart whose values.yaml is `values` (lint takes no values of its own)."""
    target = workdir / CHART.name
    shutil.copytree(CHART, target)
    (target / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    return target


# Severity 1 is INFO. The only one allowed is Chart.yaml's "icon is recommended": the project
# has no icon to point to.
def lint_is_clean(messages: list[tuple[int, str]]) -> bool:
    return all(severity <= 1 and path == "Chart.yaml" for severity, path in messages)


def run_lint() -> int:
    checks = Checks()
    rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    schema = json.loads((CHART / "values.schema.json").read_text())
    named = schema["properties"]["prometheusRule"]["properties"]["alerts"]["propertyNames"]["enum"]
    checks.expect(named == alerts, f"the schema's alert names are files/prometheus-rules.yaml's: {named}")
    messages = lint(CHART)
    checks.expect(lint_is_clean(messages), f"helm lint with default values is clean: {messages}")
    with tempfile.TemporaryDirectory() as work:
        chart = chart_copy_with_values(
            deep_merge(chart_values(), {**all_features(["shop", "billing"]), **ADMISSION_POLICY,
                                        "crds": {"enabled": True}}), Path(work)
        )
        messages = lint(chart)
        checks.expect(lint_is_clean(messages), f"helm lint with every feature on is clean: {messages}")
    with tempfile.TemporaryDirectory() as work:
        chart = chart_copy_with_values(deep_merge(chart_values(), {"replicaCount": "1"}), Path(work))
        messages = lint(chart)
        checks.expect(
            any(severity >= 3 and path == "values.yaml" for severity, path in messages),
            f"helm lint fails on a values.yaml of the wrong type: {messages}",
        )
    return checks.finish("lint")


# ---------------------------------------------------------------------------------------------
# cluster


class Cluster:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, "--cache-dir", os.path.join(_HELM_HOME, "kube"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def get(self, kind: str, api_version: str, name: str, namespace: str | None) -> dict | None:
        # kubectl's fully qualified form <kind>.<version>.<group>; core kinds are unambiguous.
        group, _, version = api_version.rpartition("/")
        resource = f"{kind}.{version}.{group}" if group else kind
        args = ["get", resource, name, "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        result = self.kubectl(*args, check=False)
        if result.returncode != 0:
            return None
        return json.loads(result.stdout)

    def api_versions(self) -> set[str]:
        return set(self.kubectl("api-versions").stdout.split())

    def install(self, namespace: str, release: str, values: dict, chart: Path = CHART,
                take_ownership: bool = False) -> dict:
        config = helm.Configuration(namespace=namespace, kubeconfig=self.kubeconfig)
        return asyncio.run(helm.Install(config).run(release, str(chart), values=values, wait=False,
                                                    take_ownership=take_ownership))

    def crd_labels(self, name: str) -> dict | None:
        crd = self.get("CustomResourceDefinition", "apiextensions.k8s.io/v1", name, None)
        return None if crd is None else crd["metadata"].get("labels") or {}

    def wait(self, what: str, predicate, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.5)


def servicemonitor_crd(kind: str = "ServiceMonitor") -> str:
    """A minimal stand-in for one of prometheus-operator's CRDs (the API only)."""
    plural = kind.lower() + "s"
    return yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com", "labels": {FIXTURE_LABEL: "true"}},
            "spec": {
                "group": "monitoring.coreos.com",
                "names": {
                    "kind": kind,
                    "listKind": f"{kind}List",
                    "plural": plural,
                    "singular": kind.lower(),
                },
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )


def manifest_docs(manifest: str) -> list[tuple[dict, str]]:
    """(object, its source text) for every object of a rendered manifest."""
    docs = []
    for text in manifest.split("\n---\n"):
        obj = yaml.safe_load(text)
        if obj:
            docs.append((obj, text))
    return docs


def key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")


def rules_table(rules: list[dict]) -> dict:
    table = {}
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                table[(group, resource)] = sorted(rule.get("verbs", []))
    return table


def file_rules(secret_access: bool) -> list[dict]:
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    if secret_access:
        rules += yaml.safe_load((CHART / "files" / "rbac-secret-rules.yaml").read_text())
    return rules


class Expect:
    """What one install must contain."""

    def __init__(self, release: str, namespace: str, values: dict, servicemonitor: bool, pdb_version: str):
        self.release = release
        self.namespace = namespace
        self.values = deep_merge(chart_values(), values)
        self.servicemonitor = servicemonitor
        self.pdb_version = pdb_version

    @property
    def watch(self) -> list[str]:
        return self.values["watchNamespaces"]


def check_objects(checks: Checks, objs: list[dict], e: Expect, where: str) -> None:
    """The chart's promises, on rendered or stored objects."""
    v = e.values
    by_kind: dict[str, list[dict]] = {}
    for obj in objs:
        by_kind.setdefault(obj["kind"], []).append(obj)

    def one(kind: str, component: str | None = None) -> dict | None:
        found = [
            o for o in by_kind.get(kind, [])
            if component is None
            or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
        checks.expect(len(found) == 1, f"{where}: exactly one {kind} {component or ''}: {[key(o) for o in found]}")
        return found[0] if found else None

    # Labels and namespaces of every object.
    for obj in objs:
        meta = obj["metadata"]
        labels = meta.get("labels", {})
        for label in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                      "app.kubernetes.io/managed-by", "helm.sh/chart"):
            checks.expect(label in labels, f"{where}: {key(obj)} has label {label}")
        checks.expect(labels.get("app.kubernetes.io/instance") == e.release, f"{where}: {key(obj)} instance label")
        for label, value in v["commonLabels"].items():
            checks.expect(labels.get(label) == value, f"{where}: {key(obj)} has commonLabels {label}={value}")
        if obj["kind"] in CLUSTER_SCOPED:
            checks.expect("namespace" not in meta, f"{where}: {key(obj)} is cluster-scoped")
        elif obj["kind"] in ("Role", "RoleBinding") and meta["name"].endswith("-lease"):
            checks.expect(meta.get("namespace") == e.namespace, f"{where}: {key(obj)} is in the release namespace")
        elif obj["kind"] in ("Role", "RoleBinding"):
            checks.expect(meta.get("namespace") in e.watch, f"{where}: {key(obj)} is in a watched namespace")
        else:
            checks.expect(meta.get("namespace") == e.namespace, f"{where}: {key(obj)} is in the release namespace")

    # The operator's Deployment: replicas, RollingUpdate, spread, a hardened pod, real probes.
    deployment = one("Deployment", "operator")
    service_account = one("ServiceAccount")
    if deployment is None or service_account is None:
        return
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    checks.expect(spec.get("replicas") == v["replicaCount"], f"{where}: operator replicas is {v['replicaCount']}")
    checks.expect(spec.get("strategy") == {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                  f"{where}: operator strategy is RollingUpdate, one new pod before an old one stops")
    spread = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": spec["selector"]["matchLabels"]}},
    }]}}
    checks.expect(pod.get("affinity") == (v["affinity"] or spread),
                  f"{where}: operator affinity is the values' or the soft spread by hostname")
    checks.expect(pod.get("serviceAccountName") == service_account["metadata"]["name"],
                  f"{where}: the operator runs as the chart's ServiceAccount")
    checks.expect(pod.get("automountServiceAccountToken") is True, f"{where}: operator pod mounts its API token")
    checks.expect(service_account.get("automountServiceAccountToken") is False,
                  f"{where}: the ServiceAccount does not mount its token into other pods")
    check_hardened_pod(checks, pod, f"{where}: operator pod")
    container = pod["containers"][0]
    image = container["image"]
    checks.expect(image == expected_image(v["image"]), f"{where}: operator image {image}")
    checks.expect([p.get("name") for p in container.get("ports", [])] == ["http"], f"{where}: port named http")
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        checks.expect(get.get("path") == path and get.get("port") == "http", f"{where}: {probe} on {path}, port http")
    args = container.get("args", [])
    checks.expect(args[:1] == ["run"], f"{where}: the container runs `consul-elector run`: {args}")
    watch_arg = [a for a in args if a.startswith("--watch-namespaces=")]
    expected_watch = [f"--watch-namespaces={','.join(e.watch)}"] if e.watch else []
    checks.expect(watch_arg == expected_watch, f"{where}: --watch-namespaces matches watchNamespaces: {watch_arg}")
    env = {item["name"]: item for item in container.get("env", [])}
    checks.expect(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
                  f"{where}: POD_NAME comes from the downward API")
    checks.expect(env.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                  == "metadata.namespace", f"{where}: POD_NAMESPACE (the Lease's) comes from the downward API")
    lease_arg = [a for a in args if a.startswith("--lease-name=")]
    checks.expect(lease_arg == [f"--lease-name={deployment['metadata']['name']}"],
                  f"{where}: each release has its own Lease: {lease_arg}")
    timing = [a for a in args if a.startswith(("--lease-duration=", "--lease-renew-deadline="))]
    lease = v["leaderElection"]
    checks.expect(timing == [f"--lease-duration={lease['leaseDuration']}",
                             f"--lease-renew-deadline={lease['renewDeadline']}"],
                  f"{where}: the Lease timing is leaderElection's: {timing}")
    annotations = deployment["metadata"].get("annotations") or {}
    checks.expect(all(annotations.get(k) == x for k, x in v["deploymentAnnotations"].items()),
                  f"{where}: the Deployment carries deploymentAnnotations: {annotations}")
    selector = {"matchLabels": spec["selector"]["matchLabels"]}
    expected_spread = [{"labelSelector": selector, **c} if "labelSelector" not in c else c
                       for c in v["topologySpreadConstraints"]]
    checks.expect((pod.get("topologySpreadConstraints") or []) == expected_spread,
                  f"{where}: topologySpreadConstraints, each with the operator's selector by default")
    checks.expect("CONSUL_HTTP_TOKEN" not in env, f"{where}: no Consul token in the environment")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    volumes = {vol["name"]: vol for vol in pod.get("volumes", [])}
    for extra in v["extraVolumes"]:
        checks.expect(volumes.get(extra["name"]) == extra, f"{where}: extraVolumes has {extra['name']}")
    for extra in v["extraVolumeMounts"]:
        checks.expect(mounts.get(extra["mountPath"]) == extra, f"{where}: extraVolumeMounts has {extra['mountPath']}")
    for variable, secret in (("CONSUL_HTTP_TOKEN_FILE", v["consul"]["token"]["secretName"]),
                             ("CONSUL_CACERT", v["consul"]["caCert"]["secretName"]),
                             ("CONSUL_CLIENT_CERT", v["consul"]["clientCert"]["secretName"]),
                             ("CONSUL_CLIENT_KEY", v["consul"]["clientCert"]["secretName"])):
        if not secret:
            checks.expect(variable not in env, f"{where}: no {variable} without its Secret")
            continue
        path = env.get(variable, {}).get("value", "")
        mount = mounts.get(path.rsplit("/", 1)[0])
        volume = volumes.get(mount["name"]) if mount else None
        checks.expect(
            mount is not None and mount.get("readOnly") is True
            and volume is not None and volume.get("secret", {}).get("secretName") == secret,
            f"{where}: {variable}={path} is a file of Secret {secret}, mounted read-only",
        )
    consul_dev = v["consulDev"]["enabled"]
    address = v["consul"]["address"]
    if consul_dev and not address:
        dev_service = f"{deployment['metadata']['name']}-consul-dev"
        address = f"http://{dev_service}.{e.namespace}.svc:8500"
    checks.expect(env.get("CONSUL_HTTP_ADDR", {}).get("value", "") == address,
                  f"{where}: CONSUL_HTTP_ADDR is {address!r}")
    for variable, value in [("ELECTOR_ALLOWED_ADDRESSES", "allowedAddresses"),
                            ("ELECTOR_ALLOWED_DATACENTERS", "allowedDatacenters")]:
        allowed = ",".join(v["consul"][value])
        checks.expect(env.get(variable, {}).get("value", "") == allowed,
                      f"{where}: {variable} is {allowed!r}")
    for variable, value in [("CONSUL_DATACENTER", "datacenter"), ("CONSUL_NAMESPACE", "namespace"),
                            ("CONSUL_PARTITION", "partition")]:
        checks.expect(env.get(variable, {}).get("value", "") == v["consul"][value],
                      f"{where}: {variable} is {v['consul'][value]!r}")
    checks.expect(env.get("ELECTOR_CLUSTER_NAME", {}).get("value", "") == v["clusterName"],
                  f"{where}: ELECTOR_CLUSTER_NAME is {v['clusterName']!r}")
    former = ",".join(v["formerNames"])
    checks.expect(env.get("ELECTOR_FORMER_NAMES", {}).get("value", "") == former,
                  f"{where}: ELECTOR_FORMER_NAMES is {former!r}")

    # RBAC from files/: the operator's rules in a ClusterRole or one Role per watched namespace;
    # the cluster-identity rule cluster-wide unless clusterName is set.
    fullname = deployment["metadata"]["name"]
    operator_subjects = [{"kind": "ServiceAccount", "name": service_account["metadata"]["name"],
                          "namespace": e.namespace}]

    def named(kind: str, suffix: str) -> list[dict]:
        return [o for o in by_kind.get(kind, []) if o["metadata"]["name"] == fullname + suffix]

    expected_rules = {**EXPECTED_RULES, **(SECRET_RULE if v["rbac"]["secretAccess"] else {})}
    sources = file_rules(v["rbac"]["secretAccess"])
    checks.expect(rules_table(sources) == {k: sorted(x) for k, x in expected_rules.items()},
                  f"{where}: files/rbac-*.yaml grant exactly the minimum verbs")
    def not_lease(objs: list[dict]) -> list[dict]:
        return [o for o in objs if not o["metadata"]["name"].endswith("-lease")]

    if e.watch:
        roles, bindings = not_lease(by_kind.get("Role", [])), not_lease(by_kind.get("RoleBinding", []))
        checks.expect(not named("ClusterRole", "") and not named("ClusterRoleBinding", ""),
                      f"{where}: no cluster-wide operator rules when watchNamespaces is set")
        checks.expect(sorted(r["metadata"]["namespace"] for r in roles) == sorted(e.watch)
                      and sorted(b["metadata"]["namespace"] for b in bindings) == sorted(e.watch),
                      f"{where}: a Role and a RoleBinding in each watched namespace")
        role_kind = "Role"
    else:
        roles, bindings = named("ClusterRole", ""), named("ClusterRoleBinding", "")
        checks.expect(len(roles) == 1 and len(bindings) == 1 and not not_lease(by_kind.get("Role", [])),
                      f"{where}: one ClusterRole and ClusterRoleBinding when every namespace is watched")
        role_kind = "ClusterRole"
    for role in roles:
        checks.expect(role.get("rules") == sources, f"{where}: {key(role)} has exactly the rules of files/")
    for binding in bindings:
        checks.expect(
            binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                   "name": roles[0]["metadata"]["name"] if roles else None}
            and binding.get("subjects") == operator_subjects,
            f"{where}: {key(binding)} binds the role to the operator's ServiceAccount",
        )
    lease_rules = yaml.safe_load((CHART / "files" / "rbac-lease-rules.yaml").read_text())
    checks.expect(rules_table(lease_rules) == LEASE_RULE,
                  f"{where}: the Lease rule is get, create, update and patch on leases: {lease_rules}")
    lease_roles = named("Role", "-lease")
    lease_bindings = named("RoleBinding", "-lease")
    checks.expect(len(lease_roles) == 1 and len(lease_bindings) == 1,
                  f"{where}: one Lease Role and RoleBinding in the release namespace")
    for role in lease_roles:
        checks.expect(role.get("rules") == lease_rules, f"{where}: {key(role)} has exactly the rules of files/")
    for binding in lease_bindings:
        checks.expect(
            binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                   "name": f"{fullname}-lease"}
            and binding.get("subjects") == operator_subjects,
            f"{where}: {key(binding)} binds the Lease role to the operator's ServiceAccount",
        )
    identity_rules = yaml.safe_load((CHART / "files" / "rbac-cluster-identity-rules.yaml").read_text())
    checks.expect(identity_rules == [IDENTITY_RULE],
                  f"{where}: the cluster-identity rule is get on namespace kube-system only: {identity_rules}")
    identity_roles = named("ClusterRole", "-cluster-identity")
    identity_bindings = named("ClusterRoleBinding", "-cluster-identity")
    want = 0 if v["clusterName"] else 1
    checks.expect(len(identity_roles) == want and len(identity_bindings) == want,
                  f"{where}: {want} cluster-identity ClusterRole and binding (clusterName {v['clusterName']!r})")
    for role in identity_roles:
        checks.expect(role.get("rules") == identity_rules, f"{where}: {key(role)} has exactly the rules of files/")
    for binding in identity_bindings:
        checks.expect(
            binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                   "name": f"{fullname}-cluster-identity"}
            and binding.get("subjects") == operator_subjects,
            f"{where}: {key(binding)} binds the cluster-identity role to the operator's ServiceAccount",
        )

    # The admission policy, only when enabled.
    for kind in POLICY_KINDS:
        count = len(by_kind.get(kind, []))
        checks.expect(count == (1 if v["admissionPolicy"]["enabled"] else 0), f"{where}: {count} {kind}")

    # Aggregated ClusterRoles for the default view/edit/admin roles; they bind nothing.
    want = 1 if v["rbac"]["aggregateToDefaultRoles"] else 0
    for suffix, (aggregate_to, table) in AGGREGATED_ROLES.items():
        found = named("ClusterRole", suffix)
        checks.expect(len(found) == want, f"{where}: {want} ClusterRole {fullname}{suffix}")
        for role in found:
            labels = {k for k, x in role["metadata"]["labels"].items()
                      if k.startswith("rbac.authorization.k8s.io/aggregate-to-") and x == "true"}
            checks.expect(labels == {f"rbac.authorization.k8s.io/aggregate-to-{r}" for r in aggregate_to},
                          f"{where}: {key(role)} aggregates to {aggregate_to} only: {labels}")
            checks.expect(rules_table(role["rules"]) == table, f"{where}: {key(role)} grants {table}")
    cluster_wide = {fullname + suffix for suffix in ("", "-cluster-identity", *AGGREGATED_ROLES)}
    for obj in by_kind.get("ClusterRole", []) + by_kind.get("ClusterRoleBinding", []):
        checks.expect(obj["metadata"]["name"] in cluster_wide, f"{where}: {key(obj)} is expected")

    # Metrics Service, ServiceMonitor, NetworkPolicy, PodDisruptionBudget.
    selector = spec["selector"]["matchLabels"]
    service = one("Service", "operator")
    if service:
        ports = service["spec"]["ports"]
        checks.expect(service["spec"]["selector"] == selector, f"{where}: the metrics Service selects the operator")
        checks.expect([(p["name"], p["targetPort"]) for p in ports] == [("http", "http")],
                      f"{where}: the metrics Service targets port http")
    monitors = by_kind.get("ServiceMonitor", [])
    checks.expect(len(monitors) == (1 if e.servicemonitor else 0),
                  f"{where}: {'one' if e.servicemonitor else 'no'} ServiceMonitor")
    for monitor in monitors:
        endpoints = monitor["spec"]["endpoints"]
        checks.expect(monitor["spec"]["selector"]["matchLabels"] == selector
                      and [(x["port"], x["path"]) for x in endpoints] == [("http", "/metrics")],
                      f"{where}: the ServiceMonitor scrapes /metrics of the operator")
        sm = v["serviceMonitor"]
        checks.expect(monitor["spec"].get("jobLabel", "") == sm["jobLabel"]
                      and all(x.get("scheme") == sm["scheme"] for x in endpoints)
                      and all(x.get("tlsConfig", {}) == sm["tlsConfig"] for x in endpoints),
                      f"{where}: the ServiceMonitor has serviceMonitor's jobLabel, scheme and tlsConfig")
    # The PrometheusRule (only where its API is served, like the ServiceMonitor) ships the rules
    # file as it is; the dashboard ConfigMap ships the dashboard JSON with the sidecar's label.
    rules = by_kind.get("PrometheusRule", [])
    want_rules = e.servicemonitor and v["prometheusRule"]["enabled"]
    checks.expect(len(rules) == (1 if want_rules else 0), f"{where}: PrometheusRule count")
    shipped_rules = alerts_as_set(yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text()),
                                  v["prometheusRule"]["alerts"])
    for rule in rules:
        checks.expect(rule["spec"] == shipped_rules,
                      f"{where}: the PrometheusRule holds files/prometheus-rules.yaml as prometheusRule.alerts sets it")
        checks.expect(all(rule["metadata"]["labels"].get(k) == x for k, x in v["prometheusRule"]["labels"].items()),
                      f"{where}: the PrometheusRule carries prometheusRule.labels")
    dashboards = [o for o in by_kind.get("ConfigMap", []) if o["metadata"]["name"].endswith("-dashboard")]
    dash = v["grafanaDashboard"]
    checks.expect(len(dashboards) == (1 if dash["enabled"] else 0), f"{where}: dashboard ConfigMap count")
    shipped_dashboard = json.loads((CHART / "dashboards" / "consul-elector.json").read_text())
    for config_map in dashboards:
        labels = config_map["metadata"]["labels"]
        checks.expect(labels.get(dash["sidecarLabel"]) == dash["sidecarLabelValue"],
                      f"{where}: the dashboard ConfigMap carries the sidecar label")
        checks.expect(json.loads(config_map["data"]["consul-elector.json"]) == shipped_dashboard,
                      f"{where}: the ConfigMap holds dashboards/consul-elector.json")
    policies = by_kind.get("NetworkPolicy", [])
    checks.expect(len(policies) == (1 if v["networkPolicy"]["enabled"] else 0), f"{where}: NetworkPolicy count")
    for policy in policies:
        pspec = policy["spec"]
        checks.expect(pspec["podSelector"]["matchLabels"] == selector
                      and sorted(pspec["policyTypes"]) == ["Egress", "Ingress"],
                      f"{where}: the NetworkPolicy isolates the operator both ways")
        ingress_ports = [p["port"] for rule in pspec.get("ingress", []) for p in rule.get("ports", [])]
        scrapes = [v["metrics"]["port"]] if v["networkPolicy"]["metricsFrom"] else []
        checks.expect(ingress_ports == scrapes, f"{where}: ingress only to the metrics port, from metricsFrom")
        egress_ports = {(p.get("protocol", "TCP"), p["port"]) for rule in pspec.get("egress", [])
                        for p in rule.get("ports", [])}
        dns = {(protocol, port) for port in v["networkPolicy"]["dns"]["ports"] for protocol in ("UDP", "TCP")}
        needed = dns | {("TCP", 443), ("TCP", 6443), ("TCP", 8500), ("TCP", 8501)}
        checks.expect(egress_ports == needed, f"{where}: egress only to DNS, the API server and Consul: {egress_ports}")
    budgets = by_kind.get("PodDisruptionBudget", [])
    checks.expect(len(budgets) == (1 if v["podDisruptionBudget"]["enabled"] else 0), f"{where}: PDB count")
    for budget in budgets:
        checks.expect(budget["apiVersion"] == e.pdb_version, f"{where}: PDB is {budget['apiVersion']}, want {e.pdb_version}")
        checks.expect(budget["spec"]["selector"]["matchLabels"] == selector, f"{where}: the PDB selects the operator")

    # The trial Consul server.
    dev = [o for o in by_kind.get("Deployment", []) if o is not deployment]
    checks.expect(len(dev) == (1 if consul_dev else 0), f"{where}: consulDev Deployment count")
    for consul in dev:
        cpod = consul["spec"]["template"]["spec"]
        c = cpod["containers"][0]
        checks.expect(c["image"].startswith("hashicorp/consul:") and c["args"] == ["agent", "-dev", "-client", "0.0.0.0"],
                      f"{where}: consulDev runs `consul agent -dev -client 0.0.0.0`")
        checks.expect(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/v1/status/leader",
                      f"{where}: consulDev readiness on /v1/status/leader")
        checks.expect(cpod.get("automountServiceAccountToken") is False, f"{where}: consulDev mounts no API token")
        check_hardened_pod(checks, cpod, f"{where}: consulDev pod")
        dev_services = [s for s in by_kind.get("Service", []) if s["metadata"]["name"] == consul["metadata"]["name"]]
        checks.expect(len(dev_services) == 1 and [p["port"] for p in dev_services[0]["spec"]["ports"]] == [8500],
                      f"{where}: consulDev Service on 8500")


def alerts_as_set(rules: dict, settings: dict) -> dict:
    """The rules file as prometheusRule.alerts sets it: alerts turned off dropped, `for`
    replaced, labels added (the setting's win), runbook_url added."""
    groups = []
    for group in rules["groups"]:
        kept = []
        for rule in group["rules"]:
            setting = settings.get(rule.get("alert", ""), {})
            if setting.get("enabled") is False:
                continue
            rule = copy.deepcopy(rule)
            if setting.get("for"):
                rule["for"] = setting["for"]
            if setting.get("labels"):
                rule["labels"] = {**rule.get("labels", {}), **setting["labels"]}
            if setting.get("runbookUrl"):
                rule["annotations"] = {**rule.get("annotations", {}), "runbook_url": setting["runbookUrl"]}
            kept.append(rule)
        groups.append({**group, "rules": kept})
    return {**rules, "groups": groups}


def check_hardened_pod(checks: Checks, pod: dict, where: str) -> None:
    security = pod.get("securityContext", {})
    checks.expect(security.get("runAsNonRoot") is True, f"{where}: runAsNonRoot")
    checks.expect(security.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: seccomp RuntimeDefault")
    for container in pod["containers"]:
        sc = container.get("securityContext", {})
        name = f"{where}, container {container['name']}"
        checks.expect(sc.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation false")
        checks.expect(sc.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem")
        caps = sc.get("capabilities", {})
        checks.expect(caps.get("drop") == ["ALL"] and not caps.get("add"), f"{name}: drops ALL capabilities")
        checks.expect(sc.get("privileged") in (None, False), f"{name}: not privileged")
        checks.expect("resources" in container and container["resources"].get("limits", {}).get("memory"),
                      f"{name}: has a memory limit")


def check_rendered_rbac_comments(checks: Checks, docs: list[tuple[dict, str]], where: str) -> None:
    """Every rendered rule keeps the comment that says why it exists."""
    for obj, text in docs:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("- apiGroups")]
        checks.expect(len(starts) == len(obj["rules"]), f"{where}: {key(obj)} rules are rendered from files/")
        for i in starts:
            checks.expect(i > 0 and lines[i - 1].startswith("#"),
                          f"{where}: {key(obj)} rule `{lines[i + 1].strip()}` has its comment")


def granted(cluster: Cluster, role: str) -> dict:
    """(group, resource) -> the verbs ClusterRole `role` grants, over all its rules."""
    verbs: dict = {}
    for rule in (cluster.get("ClusterRole", "rbac.authorization.k8s.io/v1", role, None) or {}).get("rules") or []:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                verbs.setdefault((group, resource), set()).update(rule.get("verbs", []))
    return verbs


def check_aggregation(checks: Checks, cluster: Cluster, release: str) -> None:
    """The cluster's aggregation controller added the rules to the default roles, never the status."""
    elections, status = ("elector.dev", "leaderelections"), ("elector.dev", "leaderelections/status")
    writes = set(AGGREGATED_ROLES["-edit"][1][elections])
    want = {"view": set(READ), "edit": writes, "admin": writes}
    try:
        cluster.wait("the default roles to aggregate LeaderElections",
                     lambda: all(granted(cluster, r).get(elections) == w for r, w in want.items()))
    except RuntimeError as error:
        print(f"{error}: {[(r, granted(cluster, r).get(elections)) for r in want]}", flush=True)
    for role, verbs in want.items():
        table = granted(cluster, role)
        checks.expect(table.get(elections) == verbs, f"{release}: ClusterRole {role} grants {sorted(verbs)} "
                      f"on leaderelections: {table.get(elections)}")
        checks.expect(status not in table, f"{release}: ClusterRole {role} cannot write leaderelections/status")


def check_install(checks: Checks, cluster: Cluster, e: Expect, overrides: dict, notes_must: list[str]) -> dict:
    print(f"--- install {e.release} into {e.namespace}", flush=True)
    try:
        release = cluster.install(e.namespace, e.release, overrides)
    except helm.HelmError as error:
        checks.expect(False, f"helm install {e.release}: {error}")
        return {}
    checks.expect(release.get("info", {}).get("status") == "deployed", f"{e.release}: deployed")
    docs = manifest_docs(release["manifest"])
    rendered = [obj for obj, _ in docs]
    check_objects(checks, rendered, e, f"{e.release} rendered")
    check_rendered_rbac_comments(checks, docs, f"{e.release} rendered")
    notes = release.get("info", {}).get("notes", "")
    for text in ["kind: LeaderElection", "get leaderelections", *notes_must]:
        checks.expect(text in notes, f"{e.release}: NOTES.txt says {text!r}")
    stored = []
    for obj in rendered:
        live = cluster.get(obj["kind"], obj["apiVersion"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
        if checks.expect(live is not None, f"{e.release}: {key(obj)} exists in the cluster"):
            stored.append(live)
    check_objects(checks, stored, e, f"{e.release} stored")
    check_uninstall_hook(checks, cluster, release, e)
    crd = cluster.get("CustomResourceDefinition", "apiextensions.k8s.io/v1", "leaderelections.elector.dev", None)
    checks.expect(crd is not None, f"{e.release}: the LeaderElection CRD is installed")
    if e.values["rbac"]["aggregateToDefaultRoles"]:
        check_aggregation(checks, cluster, e.release)
    return {"release": e.release, "namespace": e.namespace, "deployment": next(
        (o["metadata"]["name"] for o in rendered if o["kind"] == "Deployment"
         and o["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"), None)}


def check_uninstall_hook(checks: Checks, cluster: Cluster, release: dict, e: Expect) -> None:
    """The pre-delete hook: its ServiceAccount, rules (from files/, with their comments) and Job,
    all pre-delete hooks, none of them created by the install."""
    where = f"{e.release} uninstall hook"
    hooks = release.get("hooks") or []
    docs = [doc for hook in hooks for doc in manifest_docs(hook.get("manifest", ""))]
    wanted = e.values["uninstallHook"]["enabled"] and e.values["rbac"]["create"]
    if not wanted:
        checks.expect(not docs, f"{where}: none without uninstallHook.enabled and rbac.create: {hooks}")
        return
    for hook in hooks:
        checks.expect(hook.get("events") == ["pre-delete"], f"{where}: {hook.get('name')} runs pre-delete only")
    objs = [obj for obj, _ in docs]
    kinds = sorted(obj["kind"] for obj in objs)
    roles = ["Role", "RoleBinding"] * len(e.watch) if e.watch else ["ClusterRole", "ClusterRoleBinding"]
    # And, in the release's namespace, the right to write the release request on the Lease.
    roles += ["Role", "RoleBinding"]
    checks.expect(kinds == sorted(["ServiceAccount", "Job", *roles]), f"{where}: its objects: {kinds}")
    check_rendered_rbac_comments(checks, docs, where)
    rules = yaml.safe_load((CHART / "files" / "rbac-uninstall-rules.yaml").read_text())
    lease_rules = yaml.safe_load((CHART / "files" / "rbac-uninstall-lease-rules.yaml").read_text())
    for obj in objs:
        if obj["kind"] in ("Role", "ClusterRole"):
            lease = obj["metadata"]["name"].endswith("-lease")
            want_rules, file = (lease_rules, "rbac-uninstall-lease-rules.yaml") if lease else (
                rules, "rbac-uninstall-rules.yaml")
            checks.expect(obj["rules"] == want_rules, f"{where}: {key(obj)} grants exactly files/{file}")
            if lease:
                checks.expect(obj["metadata"]["namespace"] == e.namespace,
                              f"{where}: {key(obj)} is in the release's namespace")
        checks.expect(cluster.get(obj["kind"], obj["apiVersion"], obj["metadata"]["name"],
                                  obj["metadata"].get("namespace")) is None,
                      f"{where}: {key(obj)} is not created by the install")
    for job in (obj for obj in objs if obj["kind"] == "Job"):
        pod = job["spec"]["template"]["spec"]
        check_hardened_pod(checks, pod, f"{where} Job")
        args = pod["containers"][0]["args"]
        # The install's name (its Lease, as the operator's Deployment names it): the hook leaves
        # the elections another install serves.
        command = "delete-elections" if e.values["uninstallHook"].get("deleteElections") else "release-elections"
        want = [command, f"--timeout={e.values['uninstallHook']['timeout']}",
                f"--lease-name={e.release}-consul-elector", f"--lease-namespace={e.namespace}"]
        if e.watch:
            want.append(f"--watch-namespaces={','.join(e.watch)}")
        checks.expect(args == want, f"{where}: Job args {args} == {want}")
        checks.expect(pod["containers"][0]["image"] == expected_image(e.values["image"]),
                      f"{where}: the operator's image")


def check_openshift(checks: Checks, cluster: Cluster, namespace: str, pdb_version: str) -> None:
    """examples/openshift-values.yaml (with the NetworkPolicy on): pods without fixed user and
    group IDs, the uninstall hook's too, and DNS reached on OpenShift's DNS pods' port."""
    values = yaml.safe_load((CHART / "examples" / "openshift-values.yaml").read_text())
    values = deep_merge(values, {"networkPolicy": {"enabled": True}})
    e = Expect("ce-openshift", namespace, values, servicemonitor=False, pdb_version=pdb_version)
    check_install(checks, cluster, e, values, [])
    release = asyncio.run(helm.Status(helm.Configuration(namespace=namespace, kubeconfig=cluster.kubeconfig))
                          .run("ce-openshift"))
    docs = [obj for obj, _ in manifest_docs(release["manifest"])]
    docs += [obj for hook in release.get("hooks") or [] for obj, _ in manifest_docs(hook.get("manifest", ""))]
    pods = [o["spec"]["template"]["spec"] for o in docs if o["kind"] in ("Deployment", "Job")]
    checks.expect(len(pods) == 2, f"openshift: the operator's and the hook's pods: {len(pods)}")
    for pod in pods:
        fixed = {k: v for k, v in pod.get("securityContext", {}).items() if k in ("runAsUser", "runAsGroup", "fsGroup")}
        checks.expect(not fixed, f"openshift: no fixed user or group IDs: {fixed}")
    policies = [o for o in docs if o["kind"] == "NetworkPolicy"]
    dns = [rule for p in policies for rule in p["spec"]["egress"]
           if any(port.get("port") == 5353 for port in rule.get("ports", []))]
    checks.expect(len(dns) == 1 and dns[0]["to"] == values["networkPolicy"]["dns"]["to"]
                  and sorted((x["port"], x["protocol"]) for x in dns[0]["ports"]) == [(5353, "TCP"), (5353, "UDP")],
                  f"openshift: DNS egress to openshift-dns on 5353: {dns}")


def check_admission_policy(checks: Checks, cluster: Cluster, namespace: str) -> None:
    """admissionPolicy.enabled renders the policy and its binding: a cluster that serves them
    gets both; an older one (before 1.30) refuses the install naming them, and keeps nothing."""
    served = "validatingadmissionpolicies.admissionregistration.k8s.io" in cluster.kubectl(
        "api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name").stdout.split()
    print(f"--- admissionPolicy.enabled (the cluster {'serves' if served else 'does not serve'} "
          "ValidatingAdmissionPolicy)", flush=True)
    try:
        release = cluster.install(namespace, "ce-policy", ADMISSION_POLICY)
        kinds = [obj["kind"] for obj, _ in manifest_docs(release["manifest"])]
        checks.expect(served and all(kind in kinds for kind in POLICY_KINDS),
                      f"admissionPolicy.enabled installs {POLICY_KINDS} only where served: {kinds}")
    except helm.HelmError as error:
        checks.expect(not served and "ValidatingAdmissionPolicy" in str(error),
                      f"admissionPolicy.enabled fails only where the policy is not served, naming it: {error}")
        checks.expect(cluster.get("Deployment", "apps/v1", "ce-policy-consul-elector", namespace) is None,
                      "the refused install leaves nothing behind")


def run_cluster(args: argparse.Namespace) -> int:
    checks = Checks()
    cluster = Cluster(args.kubeconfig)
    watch = [ns for ns in args.watch_namespaces.split(",") if ns]
    pdb_version = "policy/v1" if "policy/v1" in cluster.api_versions() else "policy/v1beta1"
    print(f"--- the cluster serves PodDisruptionBudget as {pdb_version}", flush=True)

    print("--- values of the wrong type fail the install with the schema's message", flush=True)
    for values, expected in WRONG_VALUES:
        try:
            cluster.install(args.default_namespace, "ce-wrong", values)
            checks.expect(False, f"install with {values} fails")
        except helm.HelmError as error:
            message = str(error)
            checks.expect(SCHEMA_MESSAGE in message and expected in message,
                          f"install with {values} fails naming {expected!r}: {message}")
    for values, expected in REFUSED_AT_RENDER:
        try:
            cluster.install(args.default_namespace, "ce-wrong", values)
            checks.expect(False, f"install with {values} fails")
        except helm.HelmError as error:
            checks.expect(expected in str(error), f"install with {values} fails naming {expected!r}: {error}")
    checks.expect(cluster.get("Deployment", "apps/v1", "ce-wrong-consul-elector", args.default_namespace) is None,
                  "a failed install leaves nothing behind")

    check_admission_policy(checks, cluster, args.default_namespace)

    features = all_features(watch)
    summary = {}
    labels = cluster.crd_labels(SERVICEMONITOR_CRD)
    if labels is not None and labels.get(FIXTURE_LABEL) != "true":
        print(f"SKIPPED the ServiceMonitor-absent install: {SERVICEMONITOR_CRD} is installed "
              "and not ours to remove", flush=True)
    else:
        if labels is not None:
            cluster.kubectl("delete", "crd", SERVICEMONITOR_CRD, "--wait=true")
        if (cluster.crd_labels(PROMETHEUSRULE_CRD) or {}).get(FIXTURE_LABEL) == "true":
            cluster.kubectl("delete", "crd", PROMETHEUSRULE_CRD, "--wait=true")
        if labels is not None:
            cluster.wait("the ServiceMonitor API to go",
                         lambda: "monitoring.coreos.com/v1" not in cluster.api_versions())
        # Also the release without the aggregated ClusterRoles, and without the uninstall hook.
        nosm = deep_merge(features, {"rbac": {"aggregateToDefaultRoles": False},
                                     "uninstallHook": {"enabled": False}})
        e = Expect("ce-nosm", args.no_servicemonitor_namespace, nosm, servicemonitor=False,
                   pdb_version=pdb_version)
        summary["no_servicemonitor"] = check_install(
            checks, cluster, e, nosm,
            ["no ServiceMonitor was created", "no PrometheusRule was created", "FOR TRIALS ONLY"])

    cluster.kubectl("create", "-f", "-", stdin=servicemonitor_crd())
    if cluster.crd_labels(PROMETHEUSRULE_CRD) is None:
        cluster.kubectl("create", "-f", "-", stdin=servicemonitor_crd("PrometheusRule"))
    cluster.wait("the ServiceMonitor and PrometheusRule APIs", lambda: {SERVICEMONITOR_CRD, PROMETHEUSRULE_CRD} <= set(
        cluster.kubectl("api-resources", "--api-group=monitoring.coreos.com", "-o", "name").stdout.split()))

    e = Expect("ce-default", args.default_namespace, {}, servicemonitor=False, pdb_version=pdb_version)
    summary["default"] = check_install(checks, cluster, e, {}, ["consul.address is not set"])
    e = Expect("ce-all", args.features_namespace, features, servicemonitor=True, pdb_version=pdb_version)
    summary["all_features"] = check_install(checks, cluster, e, features, ["FOR TRIALS ONLY"])
    check_openshift(checks, cluster, args.default_namespace, pdb_version)

    if args.summary_out:
        Path(args.summary_out).write_text(json.dumps(summary, indent=2))
    return checks.finish("cluster")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("lint", help="helm lint, no cluster")
    c = sub.add_parser("cluster", help="install into a cluster and check the objects")
    c.add_argument("--kubeconfig", required=True)
    c.add_argument("--default-namespace", required=True, help="release ce-default (default values)")
    c.add_argument("--features-namespace", required=True, help="release ce-all (every feature on)")
    c.add_argument("--no-servicemonitor-namespace", required=True,
                   help="release ce-nosm (every feature on, before the ServiceMonitor CRD exists)")
    c.add_argument("--watch-namespaces", required=True, help="watchNamespaces of the feature releases")
    c.add_argument("--summary-out", help="write the installed releases as JSON here")
    i = sub.add_parser("install", help="helm install --create-namespace with a values file")
    i.add_argument("--kubeconfig", required=True)
    i.add_argument("--namespace", required=True)
    i.add_argument("--release", required=True)
    i.add_argument("--values", required=True, help="a YAML (or JSON) values file")
    i.add_argument("--chart", default=str(CHART), help="a chart directory or archive (default: this chart)")
    i.add_argument("--take-ownership", action="store_true", help="adopt existing objects (Helm 3.17+)")
    g = sub.add_parser("upgrade", help="helm upgrade --reset-then-reuse-values to this chart")
    g.add_argument("--kubeconfig", required=True)
    g.add_argument("--namespace", required=True)
    g.add_argument("--release", required=True)
    g.add_argument("--values", help="a YAML (or JSON) values file set over the release's values")
    g.add_argument("--take-ownership", action="store_true", help="adopt existing objects (Helm 3.17+)")
    d = sub.add_parser("edges", help="install each edge value set, print the operator's args and env")
    d.add_argument("--kubeconfig", required=True)
    d.add_argument("--namespace", required=True)
    u = sub.add_parser("uninstall", help="helm uninstall (hooks included), waiting for the deletions")
    u.add_argument("--kubeconfig", required=True)
    u.add_argument("--namespace", required=True)
    u.add_argument("--release", required=True)
    u.add_argument("--timeout", type=int, default=300, help="seconds, hooks included")
    args = parser.parse_args()
    if args.command == "uninstall":
        return run_uninstall(args)
    if args.command == "upgrade":
        return run_upgrade(args)
    if args.command == "lint":
        return run_lint()
    if args.command == "install":
        return run_install(args)
    if args.command == "edges":
        return run_edges(args)
    return run_cluster(args)


# Values at the edges of what the schema admits. Each must install, and the operator must
# accept the command line and environment the chart gives it (tests/it/chart_install.rs parses
# them with the operator's own parsers); WRONG_VALUES and REFUSED_AT_RENDER hold the values
# just past these edges.
EDGE_VALUES = [
    {"lockWatchWait": "1s", "livenessTimeout": "1s"},
    {"lockWatchWait": "600s", "livenessTimeout": "1h"},
    {"lockWatchWait": "10m"},
    {"lockWatchWait": "9m59s"},
    {"leaderElection": {"leaseDuration": "3s", "renewDeadline": "2s"}},
    {"leaderElection": {"leaseDuration": "1h", "renewDeadline": "59m59s"}},
    {"consul": {"address": "unix:///run/consul/agent.sock"}},
    {"consul": {"address": "https://consul.example:8501/"}},
    {"consul": {"address": "consul.example:8500"}},
    {"consul": {"address": "http://[::1]:8500"}},
    {"consul": {"namespace": "team-a", "partition": "p" * 63}},
    {"clusterName": "c" * 63},
]


def run_edges(args: argparse.Namespace) -> int:
    """Installs each of EDGE_VALUES (no replicas, no hook), reads the operator container's args
    and env back from the API server, uninstalls, and prints them as one JSON list."""
    cluster = Cluster(args.kubeconfig)
    found = []
    for i, values in enumerate(EDGE_VALUES):
        release = f"ce-edge-{i}"
        install = deep_merge(values, {"replicaCount": 0, "uninstallHook": {"enabled": False}})
        try:
            cluster.install(args.namespace, release, install)
        except helm.HelmError as error:
            print(f"helm install with {values} failed: {error}", file=sys.stderr)
            return 1
        deployment = cluster.get("Deployment", "apps/v1", f"{release}-consul-elector", args.namespace)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        found.append({"values": values, "args": container["args"], "env": env})
        config = helm.Configuration(namespace=args.namespace, kubeconfig=args.kubeconfig)
        asyncio.run(helm.Uninstall(config).run(release, wait=True, timeout=120))
    print(json.dumps(found))
    return 0


def run_install(args: argparse.Namespace) -> int:
    cluster = Cluster(args.kubeconfig)
    if cluster.get("Namespace", "v1", args.namespace, None) is None:
        cluster.kubectl("create", "namespace", args.namespace)
    values = yaml.safe_load(Path(args.values).read_text()) or {}
    try:
        result = cluster.install(args.namespace, args.release, values, Path(args.chart), args.take_ownership)
    except helm.HelmError as error:
        print(f"helm install {args.release} failed: {error}", file=sys.stderr)
        return 1
    print(f"installed {args.release} into {args.namespace}: {result.get('info', {}).get('status', result)}",
          flush=True)
    return 0


def run_upgrade(args: argparse.Namespace) -> int:
    """`helm upgrade --reset-then-reuse-values [-f values]`, which helm-sdkpy lacks: the new
    chart's defaults (reset_values) with the values the user set on the release, and over them
    the values file's."""
    config = helm.Configuration(namespace=args.namespace, kubeconfig=args.kubeconfig)
    values = (yaml.safe_load(Path(args.values).read_text()) or {}) if args.values else {}
    try:
        user_values = asyncio.run(helm.GetValues(config).run(args.release)) or {}
        result = asyncio.run(helm.Upgrade(config).run(args.release, str(CHART),
                                                      values=deep_merge(user_values, values),
                                                      reset_values=True, wait=False,
                                                      take_ownership=args.take_ownership))
    except helm.HelmError as error:
        print(f"helm upgrade {args.release} failed: {error}", file=sys.stderr)
        return 1
    hooks = sorted(f"{hook.get('kind')}/{hook.get('name')}" for hook in result.get("hooks") or [])
    print(f"upgraded {args.release} in {args.namespace} to revision {result.get('version')}: "
          f"{result.get('info', {}).get('status')}; hooks {hooks}", flush=True)
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    config = helm.Configuration(namespace=args.namespace, kubeconfig=args.kubeconfig)
    try:
        asyncio.run(helm.Uninstall(config).run(args.release, wait=True, timeout=args.timeout))
    except helm.HelmError as error:
        print(f"helm uninstall {args.release} failed: {error}", file=sys.stderr)
        return 1
    print(f"uninstalled {args.release} from {args.namespace}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
