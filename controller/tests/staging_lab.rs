//! S3 staging against the lab's S3 server (ferry-lab-s3 on loopback: s3s's protocol, files behind).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_harness::lab;
use ferry_staging::{Error, Staging, StagingConfig, sha256_file};

fn config(prefix: &str) -> StagingConfig {
    let s3 = &lab().info.s3;
    StagingConfig {
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        region: s3.region.clone(),
        access_key: s3.access_key.clone(),
        secret_key: s3.secret_key.clone().into(),
        // Every test in its own prefix, every run too: the lab's bucket outlives test runs.
        prefix: format!("tests/{prefix}-{}", std::process::id()),
        ca_bundle: None,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = ferry_harness::repo_root()
        .join("target/test-scratch")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Deterministic non-repeating bytes.
fn write_pattern(path: &std::path::Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut buf = Vec::with_capacity(len + 8);
    while buf.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf.extend_from_slice(&x.to_le_bytes());
    }
    buf.truncate(len);
    std::fs::write(path, buf).unwrap();
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn put_head_get_list_delete_round_trip_with_metadata() {
    let st = Staging::new(config("roundtrip")).unwrap();
    assert!(st.bucket_exists().await.unwrap());
    let dir = scratch("staging-roundtrip");
    let src = dir.join("disk.raw");
    write_pattern(&src, 3 * 1024 * 1024 + 17, 1);
    let sha = sha256_file(&src).await.unwrap();
    let m = meta(&[
        ("sha256", &sha),
        ("source-path", "[LocalDS_0] vm/disk1.vmdk"),
        ("format", "raw"),
    ]);

    let key = "ns/vm/disk-2000.raw";
    assert_eq!(st.head(key).await.unwrap(), None);
    let put = st.put_file(key, &src, &m).await.unwrap();
    assert_eq!(put.size, 3 * 1024 * 1024 + 17);

    let head = st.head(key).await.unwrap().expect("staged object");
    assert_eq!(head.size, put.size);
    assert_eq!(head.sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(head.metadata, m);

    let back = dir.join("back.raw");
    assert_eq!(st.get_to_file(key, &back).await.unwrap(), put.size);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&src).unwrap());

    let listed = st.list("ns/vm").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key);
    assert_eq!(listed[0].size, put.size);

    st.delete(key).await.unwrap();
    assert_eq!(st.head(key).await.unwrap(), None);
    st.delete(key).await.unwrap();
    assert!(matches!(
        st.get_to_file(key, &back).await,
        Err(Error::NotFound { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_file_goes_up_in_parts_and_keeps_its_metadata() {
    let st = Staging::new(config("multipart")).unwrap();
    let dir = scratch("staging-multipart");
    let src = dir.join("big.raw");
    write_pattern(&src, 40 * 1024 * 1024 + 5, 2);
    let sha = sha256_file(&src).await.unwrap();
    let key = "big.raw";
    st.put_file(key, &src, &meta(&[("sha256", &sha)]))
        .await
        .unwrap();
    let head = st.head(key).await.unwrap().unwrap();
    assert_eq!(head.size, 40 * 1024 * 1024 + 5);
    assert_eq!(head.sha256.as_deref(), Some(sha.as_str()));
    let back = dir.join("back.raw");
    st.get_to_file(key, &back).await.unwrap();
    assert_eq!(sha256_file(&back).await.unwrap(), sha);
    st.delete(key).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_prefix_removes_everything_below_it_and_nothing_else() {
    let st = Staging::new(config("prefix")).unwrap();
    let dir = scratch("staging-prefix");
    let src = dir.join("f");
    std::fs::write(&src, b"x").unwrap();
    for k in ["a/1", "a/2", "a/b/3", "ab/4"] {
        st.put_file(k, &src, &BTreeMap::new()).await.unwrap();
    }
    assert_eq!(st.delete_prefix("a").await.unwrap(), 3);
    let left: Vec<_> = st
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, vec!["ab/4".to_string()]);
    assert_eq!(st.delete_prefix("a").await.unwrap(), 0);
    assert!(matches!(st.delete_prefix("").await, Err(Error::Invalid(_))));
    st.delete_prefix("ab").await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bucket_is_reported_as_such_and_permanent() {
    let cfg = StagingConfig {
        bucket: "no-such-bucket".into(),
        ..config("nobucket")
    };
    let st = Staging::new(cfg).unwrap();
    assert!(!st.bucket_exists().await.unwrap());
    // A PUT and a multipart upload into it fail as on S3, and create nothing.
    let err = st
        .put_bytes("k", bytes::Bytes::from_static(b"x"), &BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoSuchBucket { .. }), "{err:?}");
    let err = st
        .create_multipart("k", &BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoSuchBucket { .. }), "{err:?}");
    assert!(!lab().info.s3.data_dir.join("no-such-bucket").exists());
    let err = st.head("k").await.unwrap_err();
    assert!(
        matches!(&err, Error::NoSuchBucket { bucket, .. } if bucket == "no-such-bucket"),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let err = st.list("").await.unwrap_err();
    assert!(matches!(err, Error::NoSuchBucket { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_keys_are_access_denied() {
    let cfg = StagingConfig {
        secret_key: "wrong-secret".into(),
        ..config("badkeys")
    };
    let err = Staging::new(cfg)
        .unwrap()
        .bucket_exists()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AccessDenied { .. }), "{err:?}");
    assert!(!err.is_transient());
    let cfg = StagingConfig {
        access_key: "NOSUCHKEY".into(),
        ..config("badkeys")
    };
    let err = Staging::new(cfg).unwrap().head("k").await.unwrap_err();
    assert!(matches!(err, Error::AccessDenied { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_port_is_unreachable_and_transient() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = StagingConfig {
        endpoint: format!("http://127.0.0.1:{port}"),
        ..config("closed")
    };
    let err = Staging::new(cfg)
        .unwrap()
        .bucket_exists()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(err.is_transient());
}

#[tokio::test(flavor = "multi_thread")]
async fn https_staging_with_a_private_ca_is_trusted_with_its_bundle_only() {
    ferry_vsphere::tls::install_default_provider();
    let tls = &lab().info.s3_tls;
    let ca = std::fs::read_to_string(&tls.ca_file).unwrap();
    let https = |ca_bundle: Option<String>| StagingConfig {
        endpoint: tls.endpoint.clone(),
        ca_bundle,
        ..config("https")
    };
    // With the CA bundle: the bucket is there, an object goes up and comes back.
    let st = Staging::new(https(Some(ca.clone()))).unwrap();
    assert!(st.bucket_exists().await.unwrap());
    let dir = scratch("https");
    let file = dir.join("f");
    write_pattern(&file, 4096, 9);
    st.put_file("k", &file, &BTreeMap::new()).await.unwrap();
    assert_eq!(st.head("k").await.unwrap().unwrap().size, 4096);
    st.delete("k").await.unwrap();
    // Without it the certificate is untrusted; with another CA too.
    let err = Staging::new(https(None)).unwrap().bucket_exists().await;
    assert!(
        err.is_err(),
        "a private CA's certificate is not trusted by default"
    );
    let other = include_str!("../../vsphere/src/testdata/test-ca.pem").to_owned();
    let err = Staging::new(https(Some(other)))
        .unwrap()
        .bucket_exists()
        .await;
    assert!(err.is_err(), "only the named CA is trusted");
    assert!(matches!(
        Staging::new(https(Some("not a certificate".into()))),
        Err(Error::Invalid(_))
    ));
    let _ = std::fs::remove_dir_all(dir);
}
