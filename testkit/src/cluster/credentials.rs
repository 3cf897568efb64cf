//! Credentials of a test cluster: the admin bearer token (static token file, group
//! `system:masters`) and the service-account signing key pair (made with `openssl`).

use std::path::{Path, PathBuf};
use std::process::Command;

use rand::Rng;

use super::error::ClusterError;

/// The files and token a cluster is started with.
#[derive(Debug)]
pub(crate) struct Credentials {
    /// Random bearer token of the `admin` user.
    pub(crate) admin_token: String,
    /// `--token-auth-file` of the apiserver.
    pub(crate) token_file: PathBuf,
    /// RSA private key signing service-account tokens.
    pub(crate) sa_key: PathBuf,
    /// Its public key, verifying them.
    pub(crate) sa_pub: PathBuf,
}

impl Credentials {
    /// Writes a fresh admin token file and service-account key pair into `dir`.
    pub(crate) fn generate(dir: &Path) -> Result<Self, ClusterError> {
        let bytes: [u8; 24] = rand::rng().random();
        let admin_token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let token_file = dir.join("token.csv");
        std::fs::write(
            &token_file,
            format!("{admin_token},admin,admin-uid,\"system:masters\"\n"),
        )
        .map_err(ClusterError::io("writing token.csv"))?;
        let sa_key = dir.join("sa.key");
        let sa_pub = dir.join("sa.pub");
        openssl(&["genrsa", "-out", path_str(&sa_key)?, "2048"])?;
        openssl(&[
            "rsa",
            "-in",
            path_str(&sa_key)?,
            "-pubout",
            "-out",
            path_str(&sa_pub)?,
        ])?;
        Ok(Self {
            admin_token,
            token_file,
            sa_key,
            sa_pub,
        })
    }
}

/// `path` as UTF-8 (the temp dir of a test machine always is).
fn path_str(path: &Path) -> Result<&str, ClusterError> {
    path.to_str().ok_or_else(|| ClusterError::Io {
        context: format!("non-UTF-8 path {}", path.display()),
        source: std::io::ErrorKind::InvalidInput.into(),
    })
}

/// Runs `openssl args…`, failing with its stderr.
fn openssl(args: &[&str]) -> Result<(), ClusterError> {
    let spawn_error = |source| ClusterError::Spawn {
        process: "openssl",
        source,
    };
    let output = Command::new("openssl")
        .args(args)
        .output()
        .map_err(spawn_error)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(spawn_error(std::io::Error::other(format!(
            "openssl {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))))
    }
}
