//! `ferry-lab-s3`: the lab's S3 server.
//!
//! s3s (the S3 protocol: routing, SigV4, XML, errors) over a file system backend whose
//! multipart completion does not copy the object again: issue 13's benchmark measures ferry's
//! data path, and with s3s-fs (which re-reads, re-hashes and rewrites every part to complete) the
//! lab's S3 was the bound on two shared cores. Same command line as s3s-fs:
//!
//! ```text
//! ferry-lab-s3 --host 127.0.0.1 --port PORT --access-key AK --secret-key SK DATA_DIR
//! ```
//!
//! Buckets are the directories of DATA_DIR; see `store.rs` and `multipart.rs` for the layout.

mod multipart;
mod service;
mod store;

use std::path::PathBuf;

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::{S3Auth, SecretKey};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Result, s3_error};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Parser)]
#[command(version, about = "The ferry lab's S3 server")]
struct Opt {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on.
    #[arg(long)]
    port: u16,
    /// The one access key accepted.
    #[arg(long)]
    access_key: String,
    /// Its secret key.
    #[arg(long)]
    secret_key: String,
    /// Data directory: one sub-directory per bucket.
    root: PathBuf,
}

/// One key pair; an unknown access key is AWS's `InvalidAccessKeyId`, and requests without a
/// signature are refused (s3s's default access check).
struct OneKey {
    access: String,
    secret: String,
}

#[async_trait::async_trait]
impl S3Auth for OneKey {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if access_key == self.access {
            Ok(SecretKey::from(self.secret.as_str()))
        } else {
            Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            ))
        }
    }
}

fn main() -> anyhow::Result<()> {
    let opt = Opt::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_ansi(false)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(opt))
}

async fn run(opt: Opt) -> anyhow::Result<()> {
    let store = store::Store::open(opt.root.clone())?;
    let service = {
        let mut b = S3ServiceBuilder::new(service::LabS3::new(store));
        b.set_auth(OneKey {
            access: opt.access_key,
            secret: opt.secret_key,
        });
        b.build()
    };
    let listener = TcpListener::bind((opt.host.as_str(), opt.port)).await?;
    tracing::info!(addr = %listener.local_addr()?, root = %opt.root.display(), "serving S3");
    let http = ConnBuilder::new(TokioExecutor::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    loop {
        let socket = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => { tracing::warn!(error = %e, "accept"); continue; }
            },
            _ = int.recv() => break,
            _ = term.recv() => break,
        };
        let _ = socket.set_nodelay(true);
        let conn = http.serve_connection(TokioIo::new(socket), service.clone());
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    // In-flight requests get a moment; a part cut off here is not recorded, so nothing half
    // written can be completed later.
    tokio::select! {
        () = graceful.shutdown() => {},
        () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {},
    }
    tracing::info!("stopped");
    Ok(())
}
