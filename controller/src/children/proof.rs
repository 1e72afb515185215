//! How ferry knows an object is one it created: the uid its create returned, recorded in the
//! migration's `status.children`, and — for the moment between a create and that record — a
//! creation stamp only ferry can make.
//!
//! Labels and owner references prove nothing: anyone who may create a DataVolume or a Job in the
//! namespace may give it ferry's labels and an owner reference to the migration (its uid is
//! readable by everyone who can read the migration). So:
//!
//! * Every child ferry creates carries [`STAMP_ANNOTATION`]: an HMAC-SHA256, under a key only
//!   the controller holds (a Secret in its own namespace, see [`load_or_create`]), of the
//!   migration's uid, the attempt, the child's kind and its name. Nobody without the key can
//!   make one; a stamp copied from one of ferry's objects is valid only for that very migration,
//!   attempt, kind and name — whose name ferry's object holds.
//! * The uid the create answered is recorded in `status.children` in the same reconcile's status
//!   write, before any decision relies on the child.
//! * An object under a child's name is ferry's when its uid is the recorded one; when no record
//!   of this attempt exists yet (a controller killed between the create and the status write),
//!   when its stamp is valid for this migration and attempt — it is then recorded. Anything else
//!   is a conflict, whatever its labels, owner references or annotations say, and so is an
//!   object whose uid differs from this attempt's record (someone deleted ferry's object and put
//!   another in its place, even one with a copied stamp).
//!
//! Why this resumes after a SIGKILL with no duplicate: a create that succeeded left a stamped
//! object under a deterministic name; the next reconcile finds it (the name is fixed), verifies
//! the stamp, records it and does not create again. A create that never reached the API server
//! left nothing, and the next reconcile creates it. The one gap is a replacement of ferry's
//! object by someone who copied its stamp in the milliseconds between its create and the status
//! write of the same reconcile, while the controller dies in that window: it needs the key's
//! owner's object to be deleted by someone with delete rights in the namespace, and the result
//! is an object that claims this migration's name with a stamp for it, which then still has to
//! pass the verification Job (checksums from ferry's own program) before anything is booted.

use std::collections::BTreeMap;

use ferry_crds::ChildRecord;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use ring::hmac;
use tracing::info;

use crate::error::is_already_exists;
use crate::{Error, Result};

/// The annotation carrying a child's creation stamp.
pub const STAMP_ANNOTATION: &str = "migration.platform.example/created-by-ferry";
/// The key in the proof key's Secret.
pub const KEY_FIELD: &str = "key";
/// The Secret holding the key when `--proof-key-secret` does not name one.
pub const DEFAULT_SECRET_NAME: &str = "ferry-controller-proof-key";

/// The controller's namespace when nothing names it: what `deploy/` installs it in (and where
/// the key's Secret lives).
pub const CONTROLLER_NAMESPACE: &str = "ferry-system";
/// Bytes of key made for a new Secret (and the fewest a Secret's key may have).
pub const KEY_BYTES: usize = 32;
/// The stamp format's version, first in every stamp.
const VERSION: &str = "v1";

/// The controller's key for creation stamps.
#[derive(Clone)]
pub struct ProofKey(hmac::Key);

impl std::fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProofKey(..)")
    }
}

/// What a stamp is about: one child of one attempt of one migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subject<'a> {
    /// The migration's uid.
    pub migration_uid: &'a str,
    /// `status.attempts` when the child was made.
    pub attempt: i32,
    /// The child's kind.
    pub kind: &'a str,
    /// Its name.
    pub name: &'a str,
}

impl Subject<'_> {
    fn message(&self) -> String {
        // NUL cannot occur in a uid, a kind or an object name: the fields cannot run together.
        format!(
            "{VERSION}\0{}\0{}\0{}\0{}",
            self.migration_uid, self.attempt, self.kind, self.name
        )
    }

    /// The record of this child with the uid its create answered.
    pub fn record(&self, uid: &str) -> ChildRecord {
        ChildRecord {
            kind: self.kind.to_owned(),
            name: self.name.to_owned(),
            uid: uid.to_owned(),
            attempt: self.attempt,
            released: false,
        }
    }
}

impl ProofKey {
    /// A key of these bytes.
    ///
    /// # Errors
    /// [`Error::ProofKey`] when fewer than [`KEY_BYTES`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < KEY_BYTES {
            return Err(Error::ProofKey(format!(
                "the key has {} bytes, fewer than {KEY_BYTES}",
                bytes.len()
            )));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, bytes)))
    }

    /// The stamp of `subject`. Pure.
    pub fn stamp(&self, subject: &Subject<'_>) -> String {
        let tag = hmac::sign(&self.0, subject.message().as_bytes());
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("{VERSION}.{hex}")
    }

    /// Whether `meta` carries the stamp of `subject` (compared in constant time). Pure.
    pub fn verifies(&self, meta: &ObjectMeta, subject: &Subject<'_>) -> bool {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(STAMP_ANNOTATION))
            .is_some_and(|stamp| self.verifies_stamp(stamp, subject))
    }

    /// Whether `stamp` is the stamp of `subject` (compared in constant time), wherever it was
    /// carried: an annotation, or the description of a vSphere snapshot. Pure.
    pub fn verifies_stamp(&self, stamp: &str, subject: &Subject<'_>) -> bool {
        let Some(hex) = stamp.strip_prefix(&format!("{VERSION}.")) else {
            return false;
        };
        let Some(tag) = decode_hex(hex) else {
            return false;
        };
        hmac::verify(&self.0, subject.message().as_bytes(), &tag).is_ok()
    }

    /// Puts the stamp of `subject` on `meta`.
    pub fn stamp_onto(&self, meta: &mut ObjectMeta, subject: &Subject<'_>) {
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(STAMP_ANNOTATION.to_owned(), self.stamp(subject));
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads the key from the Secret `namespace`/`name`, or makes one (random, [`KEY_BYTES`]) and
/// creates the Secret when there is none. Replicas and restarts share it through the Secret;
/// two that start at once both try to create it and the loser reads the winner's.
///
/// # Errors
/// Kubernetes API errors; [`Error::ProofKey`] when the Secret exists without a usable key.
pub async fn load_or_create(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<ProofKey> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..2 {
        if let Some(s) = api.get_opt(name).await? {
            let bytes = s
                .data
                .as_ref()
                .and_then(|d| d.get(KEY_FIELD))
                .map(|b| b.0.clone())
                .unwrap_or_default();
            return ProofKey::from_bytes(&bytes).map_err(|_| {
                Error::ProofKey(format!(
                    "Secret {namespace}/{name} has no key {KEY_FIELD:?} of at least {KEY_BYTES} bytes"
                ))
            });
        }
        let mut bytes = [0u8; KEY_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| Error::ProofKey("the system's random source failed".into()))?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "ferry-controller".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([(
                KEY_FIELD.to_owned(),
                ByteString(bytes.to_vec()),
            )])),
            ..Secret::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                info!(%namespace, %name, "made the creation-proof key");
                return ProofKey::from_bytes(&bytes);
            }
            // Another replica made it a moment ago: read theirs.
            Err(e) if is_already_exists(&e) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(Error::ProofKey(format!(
                    "the controller's namespace {namespace} does not exist (deploy/ makes it): create it, or name the key's Secret with --proof-key-secret NAMESPACE/NAME"
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::ProofKey(format!(
        "Secret {namespace}/{name} was neither readable nor creatable"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> ProofKey {
        ProofKey::from_bytes(&[b; KEY_BYTES]).unwrap()
    }

    fn subject<'a>(uid: &'a str, attempt: i32, kind: &'a str, name: &'a str) -> Subject<'a> {
        Subject {
            migration_uid: uid,
            attempt,
            kind,
            name,
        }
    }

    #[test]
    fn a_stamp_verifies_only_for_its_own_migration_attempt_kind_and_name() {
        let k = key(7);
        let s = subject("u-1", 1, "Job", "m-verify");
        let mut meta = ObjectMeta::default();
        k.stamp_onto(&mut meta, &s);
        assert!(k.verifies(&meta, &s));
        for other in [
            subject("u-2", 1, "Job", "m-verify"),
            subject("u-1", 2, "Job", "m-verify"),
            subject("u-1", 1, "DataVolume", "m-verify"),
            subject("u-1", 1, "Job", "m-convert"),
        ] {
            assert!(!k.verifies(&meta, &other), "{other:?}");
        }
        assert!(!key(8).verifies(&meta, &s), "another key's stamp");
    }

    #[test]
    fn a_missing_or_malformed_stamp_does_not_verify() {
        let k = key(1);
        let s = subject("u", 1, "Job", "j");
        assert!(!k.verifies(&ObjectMeta::default(), &s));
        for bad in [
            "",
            "v1.",
            "v1.zz",
            "v2.00",
            "v1.0",
            &k.stamp(&s).replace("v1.", "v2."),
        ] {
            let meta = ObjectMeta {
                annotations: Some(BTreeMap::from([(STAMP_ANNOTATION.into(), bad.to_owned())])),
                ..ObjectMeta::default()
            };
            assert!(!k.verifies(&meta, &s), "{bad:?}");
        }
    }

    #[test]
    fn a_short_key_is_refused_and_debug_shows_nothing() {
        assert!(ProofKey::from_bytes(&[0; KEY_BYTES - 1]).is_err());
        assert_eq!(format!("{:?}", key(3)), "ProofKey(..)");
    }
}
