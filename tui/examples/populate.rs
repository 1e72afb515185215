//! `cargo run -p ferry --example populate -- CONTEXT NAMESPACE [N]`: the sample wave of the
//! snapshots (N > 0: N migrations over 20 waves instead), with realistic status, in the
//! cluster of CONTEXT (kubeconfig from `KUBECONFIG`). For captured screens and trying the board.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [context, ns, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: populate CONTEXT NAMESPACE [N]");
    };
    let n: usize = rest.first().map_or(Ok(0), |s| s.parse())?;
    let cluster = ferry::kube::connect(&ferry::kube::ConnectOptions {
        contexts: vec![context.clone()],
        ..Default::default()
    })
    .await?;
    let (vmms, waves) = if n == 0 {
        (support::sample_migrations(ns), support::sample_waves(ns))
    } else {
        (support::many(n, 20), vec![])
    };
    // The fixtures' "now" becomes now.
    let shift = k8s_openapi::jiff::Timestamp::now().as_second() - support::now().as_second();
    let written = support::populate::populate(&cluster.client, vmms, waves, 16, shift).await?;
    println!("{written} migrations in {context}");
    Ok(())
}
