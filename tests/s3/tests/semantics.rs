//! The lab's S3 server answers as AWS S3 does where ferry depends on it, through the same client
//! ferry uses (object_store, SigV4, path-style): the binary is started on a free port with a
//! fresh data directory, and every answer below is AWS's documented one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, GetRange, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload,
};

const AK: &str = "lab-access";
const SK: &str = "lab-secret";

struct Server {
    child: Child,
    root: PathBuf,
    endpoint: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn start() -> Server {
    let root = std::env::temp_dir().join(format!("ferry-lab-s3-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(root.join("bkt")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_ferry-lab-s3"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", AK, "--secret-key", SK])
        .arg(&root)
        .spawn()
        .unwrap();
    // Ready when it accepts connections (bounded: a server that never listens fails the test).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "ferry-lab-s3 did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Server {
        child,
        root,
        endpoint: format!("http://127.0.0.1:{port}"),
    }
}

fn client(s: &Server, bucket: &str, ak: &str) -> Arc<AmazonS3> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(&s.endpoint)
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id(ak)
            .with_secret_access_key(SK)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_unsigned_payload(true)
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            .build()
            .unwrap(),
    )
}

/// The whole error chain (object_store puts S3's XML body in it).
fn chain(e: &object_store::Error) -> String {
    let mut s = String::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = next {
        s.push_str(&e.to_string());
        s.push_str(" | ");
        next = e.source();
    }
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_are_aws_s_codes_and_create_nothing() {
    let s = start();
    let e = client(&s, "bkt", "nobody")
        .list_with_delimiter(None)
        .await
        .unwrap_err();
    assert!(chain(&e).contains("InvalidAccessKeyId"), "{}", chain(&e));
    assert!(chain(&e).contains("403"), "{}", chain(&e));

    let missing = client(&s, "missing", AK);
    let e = missing
        .put(&Path::from("k"), PutPayload::from_static(b"x"))
        .await
        .unwrap_err();
    assert!(chain(&e).contains("NoSuchBucket"), "{}", chain(&e));
    let e = missing
        .create_multipart(&Path::from("k"))
        .await
        .unwrap_err();
    assert!(chain(&e).contains("NoSuchBucket"), "{}", chain(&e));
    assert!(
        !s.root.join("missing").exists(),
        "no bucket appears from a PUT"
    );

    let c = client(&s, "bkt", AK);
    let e = c
        .abort_multipart(&Path::from("k"), &uuid::Uuid::new_v4().to_string())
        .await
        .unwrap_err();
    assert!(chain(&e).contains("NoSuchUpload"), "{}", chain(&e));
    let e = c.get(&Path::from("nope")).await.unwrap_err();
    assert!(matches!(e, object_store::Error::NotFound { .. }), "{e:?}");
    c.delete(&Path::from("nope")).await.unwrap(); // absent: still 204
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_keep_their_bytes_metadata_and_ranges_and_list_by_prefix() {
    let s = start();
    let c = client(&s, "bkt", AK);
    let mut attrs = Attributes::new();
    attrs.insert(
        Attribute::Metadata("ferry-sha256".into()),
        AttributeValue::from("abc"),
    );
    let put = c
        .put_opts(
            &Path::from("a/b/one"),
            PutPayload::from_static(b"0123456789"),
            PutOptions {
                attributes: attrs,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // A single PUT's ETag is the MD5 of its bytes (md5("0123456789")).
    assert_eq!(
        put.e_tag.as_deref(),
        Some("\"781e5e245d69b566979b86e28d23f2c7\"")
    );
    c.put(&Path::from("a/two"), PutPayload::from_static(b"2"))
        .await
        .unwrap();
    c.put(&Path::from("b"), PutPayload::from_static(b"3"))
        .await
        .unwrap();

    let head = c
        .get_opts(
            &Path::from("a/b/one"),
            GetOptions {
                head: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(head.meta.size, 10);
    let meta: Vec<(String, String)> = head
        .attributes
        .iter()
        .filter_map(|(k, v)| match k {
            Attribute::Metadata(n) => Some((n.to_string(), v.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(meta, [("ferry-sha256".to_owned(), "abc".to_owned())]);
    let part = c
        .get_opts(
            &Path::from("a/b/one"),
            GetOptions {
                range: Some(GetRange::Bounded(2..5)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(part.bytes().await.unwrap().as_ref(), b"234");

    let l = c.list_with_delimiter(Some(&Path::from("a"))).await.unwrap();
    let keys: Vec<String> = l.objects.iter().map(|o| o.location.to_string()).collect();
    let dirs: Vec<String> = l.common_prefixes.iter().map(|p| p.to_string()).collect();
    assert_eq!(keys, ["a/two"]);
    assert_eq!(dirs, ["a/b"]);

    c.delete(&Path::from("a/b/one")).await.unwrap();
    c.delete(&Path::from("a/b/one")).await.unwrap();
    assert!(!s.root.join("bkt/a/b").exists(), "no empty folder is left");
    assert_eq!(
        std::fs::read(s.root.join("bkt/b")).unwrap(),
        b"3",
        "objects are plain files"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_multipart_upload_appears_whole_at_completion_and_leaves_nothing_behind() {
    let s = start();
    let c = client(&s, "bkt", AK);
    let key = Path::from("disk/disk-0.raw");
    let id = c
        .create_multipart_opts(&key, PutMultipartOptions::default())
        .await
        .unwrap();
    let p1: Vec<u8> = (0..5 << 20).map(|i: u32| (i % 251) as u8).collect();
    let p2 = b"the tail".to_vec();
    // The last part first, as parallel uploads may arrive.
    let e2 = c
        .put_part(&key, &id, 1, PutPayload::from(p2.clone()))
        .await
        .unwrap();
    let e1 = c
        .put_part(&key, &id, 0, PutPayload::from(p1.clone()))
        .await
        .unwrap();
    let e = c.head(&key).await.unwrap_err();
    assert!(
        matches!(e, object_store::Error::NotFound { .. }),
        "no object while the upload is open"
    );
    let done = c
        .complete_multipart(&key, &id, vec![e1.clone(), e2.clone()])
        .await
        .unwrap();
    assert!(
        done.e_tag.unwrap().ends_with("-2\""),
        "a multipart ETag names its parts"
    );
    let got = c.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), [p1.clone(), p2.clone()].concat());
    let uploads = s.root.join(".ferry-s3/uploads");
    assert_eq!(
        std::fs::read_dir(&uploads).unwrap().count(),
        0,
        "the upload's parts are gone"
    );
    let e = c
        .complete_multipart(&key, &id, vec![e1, e2])
        .await
        .unwrap_err();
    assert!(
        chain(&e).contains("NoSuchUpload"),
        "a finished upload: {}",
        chain(&e)
    );

    // An aborted upload leaves nothing; a part for it afterwards is refused.
    let id = c.create_multipart(&key).await.unwrap();
    c.put_part(&key, &id, 0, PutPayload::from(p1.clone()))
        .await
        .unwrap();
    c.abort_multipart(&key, &id).await.unwrap();
    assert_eq!(std::fs::read_dir(&uploads).unwrap().count(), 0);
    let e = c
        .put_part(&key, &id, 1, PutPayload::from(p2))
        .await
        .unwrap_err();
    assert!(chain(&e).contains("NoSuchUpload"), "{}", chain(&e));
    let e = c.abort_multipart(&key, &id).await.unwrap_err();
    assert!(chain(&e).contains("NoSuchUpload"), "{}", chain(&e));
    // The completed object is untouched by the aborted one.
    assert_eq!(c.head(&key).await.unwrap().size, (5 << 20) + 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_object_overwritten_while_it_is_read_is_read_whole() {
    // S3 serves one version of an object or the other, never the old one's length of the new
    // one's bytes: the converter rewrites its disk record while the controller reads it.
    let s = start();
    let c = client(&s, "bkt", AK);
    let key = Path::from("r/disk-0.raw.state.json");
    let short = bytes::Bytes::from_static(b"{\"state\":\"Copying\"}");
    let long = bytes::Bytes::from(format!(
        "{{\"state\":\"Staged\",\"pad\":\"{}\"}}",
        "x".repeat(400)
    ));
    c.put(&key, short.clone().into()).await.unwrap();
    let writer = {
        let (c, key, short, long) = (c.clone(), key.clone(), short.clone(), long.clone());
        tokio::spawn(async move {
            for i in 0..400 {
                let v = if i % 2 == 0 {
                    long.clone()
                } else {
                    short.clone()
                };
                c.put(&key, v.into()).await.unwrap();
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() {
        let got = c.get(&key).await.unwrap().bytes().await.unwrap();
        assert!(
            got == short || got == long,
            "a torn read: {} bytes {:?}",
            got.len(),
            String::from_utf8_lossy(&got)
        );
        reads += 1;
    }
    writer.await.unwrap();
    assert!(reads > 0, "read while it was overwritten");
}
