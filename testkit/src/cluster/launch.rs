//! Launching a cluster: the command lines of etcd, kube-apiserver and kube-controller-manager,
//! started in that order, each waited for before the next.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::binaries::Binaries;
use super::credentials::Credentials;
use super::error::ClusterError;
use super::options::ClusterOptions;
use super::processes::ManagedProcess;
use super::test_cluster::TestCluster;
use super::workdir::ClusterDir;
use super::{kubeconfig, ports, readiness};

/// The ClusterIP range of Services.
pub(crate) const SERVICE_CIDR: &str = "10.0.0.0/24";
/// Start attempts when a picked port was taken by someone else in the meantime.
const START_ATTEMPTS: usize = 3;
/// Controllers run by kube-controller-manager: what the operator's tests rely on
/// (clusterrole-aggregation: the chart's ClusterRoles aggregated into view, edit and admin).
const CONTROLLERS: &str = "deployment,replicaset,endpointslice,garbagecollector,namespace,\
     serviceaccount-token,clusterrole-aggregation";
/// What a real node adds: every namespace's `default` ServiceAccount (pods mount its token);
/// Endpoints (and their mirrors) beside the slices, for kube-proxy and
/// the `kubernetes` Service; deleting the pods of a node that stopped reporting; collecting
/// terminated pods; Jobs (the chart's pre-delete hook is one).
const NODE_CONTROLLERS: &str =
    "endpoint,endpointslicemirroring,nodelifecycle,podgc,serviceaccount,job";

impl ClusterError {
    /// Whether a process failed because a port picked for it was taken meanwhile.
    fn is_port_conflict(&self) -> bool {
        matches!(self, Self::NotReady { log_tail, .. } if log_tail.contains("address already in use"))
    }
}

/// [`launch`], again with new ports when one was taken meanwhile.
pub(super) async fn launch_with_retries(
    options: &ClusterOptions,
    binaries: &Binaries,
) -> Result<TestCluster, ClusterError> {
    let mut attempt = 1;
    loop {
        match launch(options, binaries).await {
            Err(error) if attempt < START_ATTEMPTS && error.is_port_conflict() => {
                eprintln!("testkit: a cluster port was taken meanwhile, retrying: {error}");
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Starts etcd, the apiserver and (optionally) the controller-manager in a new directory, each
/// waited for before the next; on failure the directory is kept for its logs.
async fn launch(
    options: &ClusterOptions,
    binaries: &Binaries,
) -> Result<TestCluster, ClusterError> {
    let dir = ClusterDir::create()?;
    let credentials = Credentials::generate(dir.path())?;
    let ports = Ports::pick()?;
    let host = options
        .node_address
        .map_or_else(|| "127.0.0.1".to_owned(), |address| address.to_string());
    let server_url = format!("https://{host}:{}", ports.apiserver);
    let server_uri = server_url
        .parse()
        .map_err(|e| ClusterError::io("parsing the server URL")(std::io::Error::other(e)))?;
    let log_dir = dir.log_dir(options.log_dir.as_deref())?;
    let mut cluster = TestCluster {
        processes: Mutex::new(Vec::new()),
        server_url,
        server_uri,
        server_ca: Vec::new(),
        admin_token: credentials.admin_token.clone(),
        kubeconfig: dir.path().join("kubeconfig"),
        controller_manager: options.controller_manager,
        node_address: options.node_address,
        version: binaries.version,
        dir,
    };
    let plan = Plan {
        dir: cluster.dir.path().to_path_buf(),
        log_dir,
        binaries,
        credentials: &credentials,
        ports,
        node_address: options.node_address,
    };
    match plan.boot(&mut cluster).await {
        Ok(started) => {
            cluster.processes = Mutex::new(started);
            Ok(cluster)
        }
        Err(error) => {
            cluster.dir.keep();
            Err(error)
        }
    }
}

/// The loopback ports of one cluster.
struct Ports {
    etcd: u16,
    etcd_peer: u16,
    apiserver: u16,
    controller_manager: u16,
}

impl Ports {
    /// Free ports for every process.
    fn pick() -> Result<Self, ClusterError> {
        let [etcd, etcd_peer, apiserver, controller_manager] = ports::free_ports()?;
        Ok(Self {
            etcd,
            etcd_peer,
            apiserver,
            controller_manager,
        })
    }
}

/// Everything the command lines of one cluster are made of.
struct Plan<'a> {
    dir: PathBuf,
    log_dir: PathBuf,
    binaries: &'a Binaries,
    credentials: &'a Credentials,
    ports: Ports,
    node_address: Option<std::net::Ipv4Addr>,
}

impl Plan<'_> {
    /// Starts the processes of `cluster`, each waited for before the next, and returns them in
    /// start order; they are killed again (dropped) if a later step fails. Sets the cluster's
    /// CA and writes its kubeconfig once the apiserver has made its certificate.
    async fn boot(&self, cluster: &mut TestCluster) -> Result<Vec<ManagedProcess>, ClusterError> {
        let mut started = vec![self.etcd().await?];
        let mut apiserver = self.apiserver().await?;
        // The apiserver wrote its self-signed serving certificate (and its CA) before serving.
        let ca_file = self.dir.join("certs").join("apiserver.crt");
        let ca_pem = std::fs::read(&ca_file)
            .map_err(ClusterError::io(format!("reading {}", ca_file.display())))?;
        cluster.server_ca = CertificateDer::pem_slice_iter(&ca_pem)
            .map(|cert| cert.map(|der| der.to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| apiserver.not_ready(format!("unreadable {}: {e}", ca_file.display())))?;
        kubeconfig::write(
            &cluster.kubeconfig,
            &cluster.server_url,
            &ca_pem,
            &cluster.admin_token,
            None,
        )?;
        // The admin client proves that the token, the certificate and storage all work.
        let admin = cluster.client().await;
        readiness::wait_until(&mut apiserver, "a namespace list as admin", || {
            list_namespaces(&admin)
        })
        .await?;
        started.push(apiserver);
        if cluster.controller_manager {
            started.push(
                self.controller_manager(&cluster.kubeconfig, &ca_file)
                    .await?,
            );
        }
        Ok(started)
    }

    /// etcd, serving `/health`.
    async fn etcd(&self) -> Result<ManagedProcess, ClusterError> {
        let peer_url = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        let url = self.etcd_url();
        let args = [
            "--name=default".into(),
            format!("--data-dir={}", self.path("etcd")),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--logger=zap".into(),
        ];
        self.start("etcd", &self.binaries.etcd, &args, &url, "/health")
            .await
    }

    /// kube-apiserver, serving `/readyz`.
    async fn apiserver(&self) -> Result<ManagedProcess, ClusterError> {
        let credentials = self.credentials;
        let policy = self.dir.join(super::audit::POLICY_FILE);
        std::fs::write(&policy, super::audit::POLICY)
            .map_err(ClusterError::io(format!("writing {}", policy.display())))?;
        // Pods reach the apiserver at the node address through the `kubernetes` Service; its
        // self-signed certificate names the advertised address and the Service's ClusterIP.
        let (bind, advertise, admission) = match self.node_address {
            Some(address) => (
                "0.0.0.0".to_owned(),
                address.to_string(),
                "--disable-admission-plugins=",
            ),
            None => (
                "127.0.0.1".to_owned(),
                "127.0.0.1".to_owned(),
                "--disable-admission-plugins=ServiceAccount",
            ),
        };
        let args = [
            format!("--etcd-servers={}", self.etcd_url()),
            format!("--cert-dir={}", self.path("certs")),
            format!("--secure-port={}", self.ports.apiserver),
            format!("--bind-address={bind}"),
            format!("--advertise-address={advertise}"),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=RBAC".into(),
            format!("--token-auth-file={}", credentials.token_file.display()),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!(
                "--service-account-key-file={}",
                credentials.sa_pub.display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                credentials.sa_key.display()
            ),
            admission.into(),
            // Logs and exec reach the kubelet at the node's address: the test host's name
            // need not resolve.
            "--kubelet-preferred-address-types=InternalIP".into(),
            // Every write, written before its response is sent: tests tell who wrote what,
            // and when, from the API server's own record.
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", self.path(super::audit::LOG_FILE)),
            "--audit-log-mode=blocking".into(),
        ];
        let url = format!("https://127.0.0.1:{}", self.ports.apiserver);
        self.start(
            "kube-apiserver",
            &self.binaries.apiserver,
            &args,
            &url,
            "/readyz",
        )
        .await
    }

    /// kube-controller-manager (as admin through `kubeconfig`), serving `/healthz`.
    async fn controller_manager(
        &self,
        kubeconfig: &Path,
        ca_file: &Path,
    ) -> Result<ManagedProcess, ClusterError> {
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            match self.node_address {
                Some(_) => format!("--controllers={CONTROLLERS},{NODE_CONTROLLERS}"),
                None => format!("--controllers={CONTROLLERS}"),
            },
            format!(
                "--service-account-private-key-file={}",
                self.credentials.sa_key.display()
            ),
            format!("--root-ca-file={}", ca_file.display()),
            "--use-service-account-credentials=false".into(),
            "--leader-elect=false".into(),
            format!("--secure-port={}", self.ports.controller_manager),
            "--bind-address=127.0.0.1".into(),
            format!("--cert-dir={}", self.path("kcm-certs")),
            // Parallel tests create many objects; the defaults (20/30) throttle.
            "--kube-api-qps=200".into(),
            "--kube-api-burst=400".into(),
        ];
        // No insecure port; the flag is gone since 1.24, which serves none.
        if !self.binaries.version.at_least(1, 24) {
            args.push("--port=0".into());
        }
        let url = format!("https://127.0.0.1:{}", self.ports.controller_manager);
        let program = &self.binaries.controller_manager;
        self.start("kube-controller-manager", program, &args, &url, "/healthz")
            .await
    }

    /// Spawns `program` (log `<log_dir>/<name>.log`) and waits until `GET <url><health_path>`
    /// answers 2xx.
    async fn start(
        &self,
        name: &'static str,
        program: &Path,
        args: &[String],
        url: &str,
        health_path: &str,
    ) -> Result<ManagedProcess, ClusterError> {
        let log = self.log_dir.join(format!("{name}.log"));
        readiness::spawn_serving(name, program, args, log, url, health_path).await
    }

    /// The client URL of etcd.
    fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.etcd)
    }

    /// `name` in the cluster directory, as a flag value.
    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// Lists namespaces (one is enough) with `client`.
async fn list_namespaces(client: &kube::Client) -> Result<(), String> {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    namespaces
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .map(drop)
        .map_err(|e| format!("listing namespaces: {e}"))
}
