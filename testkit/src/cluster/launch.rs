//! Launching a cluster: the command lines of etcd, kube-apiserver and kube-controller-manager,
//! started in that order, each waited for before the next.

use std::path::Path;
use std::sync::Mutex;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::binaries::Binaries;
use super::credentials::Credentials;
use super::processes::ManagedProcess;
use super::workdir::ClusterDir;
use super::{ClusterError, ClusterOptions, TestCluster, kubeconfig, ports, readiness};

/// Start attempts when a picked port was taken by someone else in the meantime.
const START_ATTEMPTS: usize = 3;
/// Controllers run by kube-controller-manager: what the operator's tests rely on.
const CONTROLLERS: &str =
    "deployment,replicaset,endpointslice,garbagecollector,namespace,serviceaccount-token";

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
    let [
        etcd_port,
        etcd_peer_port,
        apiserver_port,
        controller_manager_port,
    ] = ports::free_ports()?;
    let server_url = format!("https://127.0.0.1:{apiserver_port}");
    let server_uri = server_url
        .parse()
        .map_err(|e| ClusterError::io("parsing the server URL")(std::io::Error::other(e)))?;
    let mut cluster = TestCluster {
        processes: Mutex::new(Vec::new()),
        server_url,
        server_uri,
        server_ca: Vec::new(),
        admin_token: credentials.admin_token.clone(),
        kubeconfig: dir.path().join("kubeconfig"),
        controller_manager: options.controller_manager,
        dir,
    };
    let log_dir = options
        .log_dir
        .clone()
        .unwrap_or_else(|| cluster.dir.path().to_path_buf());
    std::fs::create_dir_all(&log_dir)
        .map_err(ClusterError::io(format!("creating {}", log_dir.display())))?;
    let ports = Ports {
        etcd: etcd_port,
        etcd_peer: etcd_peer_port,
        apiserver: apiserver_port,
        controller_manager: controller_manager_port,
    };
    match cluster
        .boot(options, binaries, &credentials, &ports, &log_dir)
        .await
    {
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

/// The ports of one cluster.
struct Ports {
    etcd: u16,
    etcd_peer: u16,
    apiserver: u16,
    controller_manager: u16,
}

impl TestCluster {
    /// Starts the processes of a [`launch`], each waited for before the next, and returns them
    /// in start order; they are killed again (dropped) if a later step fails.
    async fn boot(
        &mut self,
        options: &ClusterOptions,
        binaries: &Binaries,
        credentials: &Credentials,
        ports: &Ports,
        log_dir: &Path,
    ) -> Result<Vec<ManagedProcess>, ClusterError> {
        let dir = self.dir.path().to_path_buf();
        let path = |name: &str| dir.join(name).display().to_string();

        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd);
        let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
        let mut etcd = ManagedProcess::spawn(
            "etcd",
            &binaries.etcd,
            &[
                "--name=default".into(),
                format!("--data-dir={}", path("etcd")),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--logger=zap".into(),
            ],
            log_dir.join("etcd.log"),
        )?;
        let probe = readiness::health_client(&etcd_url).map_err(|e| etcd.not_ready(e))?;
        readiness::wait_until(&mut etcd, "/health", || {
            readiness::get_ok(&probe, "/health")
        })
        .await?;
        let mut started = vec![etcd];

        let mut apiserver = ManagedProcess::spawn(
            "kube-apiserver",
            &binaries.apiserver,
            &[
                format!("--etcd-servers={etcd_url}"),
                format!("--cert-dir={}", path("certs")),
                format!("--secure-port={}", ports.apiserver),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
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
                "--disable-admission-plugins=ServiceAccount".into(),
            ],
            log_dir.join("kube-apiserver.log"),
        )?;
        let probe =
            readiness::health_client(&self.server_url).map_err(|e| apiserver.not_ready(e))?;
        readiness::wait_until(&mut apiserver, "/readyz", || {
            readiness::get_ok(&probe, "/readyz")
        })
        .await?;
        // The apiserver writes its self-signed serving certificate (and its CA) before serving.
        let ca_file = dir.join("certs").join("apiserver.crt");
        let ca_pem = std::fs::read(&ca_file)
            .map_err(ClusterError::io(format!("reading {}", ca_file.display())))?;
        self.server_ca = CertificateDer::pem_slice_iter(&ca_pem)
            .map(|cert| cert.map(|der| der.to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| apiserver.not_ready(format!("unreadable {}: {e}", ca_file.display())))?;
        kubeconfig::write(
            &self.kubeconfig,
            &self.server_url,
            &ca_pem,
            &self.admin_token,
        )?;
        // The admin client proves the token, the certificate and the storage path all work.
        let admin = self.client().await;
        readiness::wait_until(&mut apiserver, "namespace list as admin", || {
            list_namespaces(&admin)
        })
        .await?;
        started.push(apiserver);

        if options.controller_manager {
            let mut controller_manager = ManagedProcess::spawn(
                "kube-controller-manager",
                &binaries.controller_manager,
                &[
                    format!("--kubeconfig={}", self.kubeconfig.display()),
                    format!("--controllers={CONTROLLERS}"),
                    format!(
                        "--service-account-private-key-file={}",
                        credentials.sa_key.display()
                    ),
                    format!("--root-ca-file={}", ca_file.display()),
                    "--use-service-account-credentials=false".into(),
                    "--leader-elect=false".into(),
                    "--port=0".into(),
                    format!("--secure-port={}", ports.controller_manager),
                    "--bind-address=127.0.0.1".into(),
                    format!("--cert-dir={}", path("kcm-certs")),
                    // Parallel tests create many objects; the defaults (20/30) throttle.
                    "--kube-api-qps=200".into(),
                    "--kube-api-burst=400".into(),
                ],
                log_dir.join("kube-controller-manager.log"),
            )?;
            let url = format!("https://127.0.0.1:{}", ports.controller_manager);
            let probe =
                readiness::health_client(&url).map_err(|e| controller_manager.not_ready(e))?;
            readiness::wait_until(&mut controller_manager, "/healthz", || {
                readiness::get_ok(&probe, "/healthz")
            })
            .await?;
            started.push(controller_manager);
        }
        Ok(started)
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
