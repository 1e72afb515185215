//! The knobs of the decisions: defaults suit production, tests shorten them, the binary's flags
//! set them.

use std::time::Duration;

/// Decision knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// First delay of an in-phase retry.
    pub backoff_base: Duration,
    /// Longest delay of an in-phase retry.
    pub backoff_cap: Duration,
    /// Transient failures tolerated in one phase before the migration fails.
    pub max_transient_retries: u32,
    /// Importer restarts (CDI `restartCount`) tolerated per disk before the import is failed.
    pub max_import_restarts: i32,
    /// How long `Starting` may wait for the VMI to run.
    pub start_timeout: Duration,
    /// How long `Validating` may wait for the guest agent.
    pub agent_timeout: Duration,
    /// Safety-net requeue while waiting on children (watch events normally come first).
    pub wait_requeue: Duration,
    /// How often a preflight held or paused in Pending is checked again (a spec change checks
    /// at once): bounded, so that a held wave is not a vCenter round trip per reconcile.
    pub preflight_recheck: Duration,
    /// How often a running conversion's progress is read from staging (no watch event says it
    /// moved).
    pub progress_requeue: Duration,
    /// Fewest time between two status writes of a migration that only carry details or
    /// progress (a DataVolume's phase, a condition's message, a percentage): every write costs
    /// the shared API server and wakes every watcher of the migration.
    pub status_interval: Duration,
    /// Cap on each converter's datastore read rate, bytes per second (protects the source's
    /// storage); `None`: no cap.
    pub converter_read_limit: Option<u64>,
    /// How often the source is looked at while its guest shuts down (vSphere sends no events
    /// ferry watches).
    pub source_poll: Duration,
    /// How long a KubeVirt error state (printableStatus ErrorUnschedulable, ErrorPvcNotFound,
    /// DataVolumeError, CrashLoopBackOff, ErrImagePull, ImagePullBackOff) may last in Starting or
    /// Validating before the migration fails with it (a node may free up meanwhile).
    pub kubevirt_error_grace: Duration,
    /// How long past the target instance's own `terminationGracePeriodSeconds` ferry waits for
    /// the instance to be gone, once it stopped the target, before it gives up powering the
    /// source back on (`TargetStillRunning`). KubeVirt pads the grace twice by 15 s (the
    /// virt-launcher pod's grace, then its kill) and removes the instance once its pod is gone.
    pub target_stop_margin: Duration,
    /// The converter image a conversion Job runs when the migration names none: the
    /// controller's own image, pinned by digest (the Deployment passes it). None by default:
    /// empty, no conversion Job is made.
    pub converter_image: String,
    /// Other converter images a migration may name in `spec.conversion.image` (exact
    /// references). The converter receives the credentials, so only images the platform team
    /// trusts may run it.
    pub allowed_converter_images: Vec<String>,
    /// Whether a migration may attach its VM to a NetworkAttachmentDefinition of another
    /// namespace (`namespace/name`): a platform decision, off by default — a migration's
    /// author could otherwise put a VM on any team's network.
    pub cross_namespace_networks: bool,
    /// Most VMs a wave's `spec.selector` may choose (never more than
    /// [`ferry_crds::wave::MAX_WAVE_VMS`], what `status.selectedVms` holds); a selector choosing
    /// more fails the wave with `SelectorTooBroad`. Lower it to bound what one selector can start.
    pub wave_selector_limit: usize,
    /// Most migrations copying at once from one ESXi host and from one datastore, across every
    /// wave and lone migration (0: no limit); see [`crate::copy_slots`].
    pub copy_limits: crate::copy_slots::Limits,
    /// How often a migration waiting for a copy slot looks again (from what the controller
    /// holds in memory: nothing is read from vSphere or written while it waits).
    pub copy_slot_recheck: Duration,
}

/// Whether `reference` names one image for good: a registry host (a short name like
/// `ferry/controller` resolves to whichever registry the node is configured to search, e.g. a
/// public account ferry does not own) and a `@sha256:` digest (a tag can be moved to other
/// bytes). The converter receives the vCenter password and the S3 keys, so ferry runs only an
/// image chosen this precisely. Pure.
///
/// # Errors
/// What is missing, with an example of a pinned reference.
pub fn check_pinned_image(reference: &str) -> Result<(), String> {
    const EXAMPLE: &str = "e.g. registry.example.com/ferry/controller@sha256:<64 hex digits> (`make image` prints it)";
    let r = reference.trim();
    if r.is_empty() {
        return Err(format!("no image given: {EXAMPLE}"));
    }
    if r.chars().any(char::is_whitespace) {
        return Err(format!("image {r:?} contains white space"));
    }
    let (name, digest) = match r.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (r, None),
    };
    let host = name.split_once('/').map(|(h, _)| h);
    let qualified = host.is_some_and(|h| h.contains('.') || h.contains(':') || h == "localhost");
    if !qualified {
        return Err(format!(
            "image {r:?} is a short name (no registry host): a node resolves it against whatever registries it searches; {EXAMPLE}"
        ));
    }
    let pinned = digest
        .and_then(|d| d.strip_prefix("sha256:"))
        .is_some_and(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        });
    if !pinned {
        return Err(format!(
            "image {r:?} is not pinned by digest (a tag can be moved to other bytes); {EXAMPLE}"
        ));
    }
    Ok(())
}

impl Policy {
    /// The image the conversion Job of a migration naming `wanted` runs, or why it may not. Pure.
    ///
    /// # Errors
    /// The message for [`ferry_crds::Reason::ConverterImageNotAllowed`] when `wanted` is neither
    /// the controller's converter image nor in the allow-list.
    pub fn converter_image_for(&self, wanted: Option<&str>) -> Result<String, String> {
        match wanted.map(str::trim).filter(|w| !w.is_empty()) {
            None if self.converter_image.is_empty() => Err(
                "the controller runs without a converter image (--converter-image): it converts nothing until one is configured".to_owned(),
            ),
            None => Ok(self.converter_image.clone()),
            Some(w) if w == self.converter_image => Ok(w.to_owned()),
            Some(w) if self.allowed_converter_images.iter().any(|a| a == w) => Ok(w.to_owned()),
            Some(w) => Err(format!(
                "spec.conversion.image {w:?} is not allowed: the converter receives the vSphere and S3 credentials, so it runs only the controller's image ({}) or one the controller's --allowed-converter-images lists; leave spec.conversion.image out, or ask the platform team to allow the image",
                self.converter_image
            )),
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(2),
            backoff_cap: Duration::from_secs(300),
            max_transient_retries: 8,
            max_import_restarts: 3,
            start_timeout: Duration::from_secs(600),
            agent_timeout: Duration::from_secs(900),
            wait_requeue: Duration::from_secs(60),
            preflight_recheck: Duration::from_secs(600),
            progress_requeue: Duration::from_secs(3),
            status_interval: Duration::from_secs(10),
            converter_read_limit: None,
            source_poll: Duration::from_secs(5),
            kubevirt_error_grace: Duration::from_secs(20),
            target_stop_margin: Duration::from_secs(60),
            converter_image: String::new(),
            allowed_converter_images: vec![],
            cross_namespace_networks: false,
            wave_selector_limit: ferry_crds::wave::MAX_WAVE_VMS,
            copy_limits: crate::copy_slots::Limits::default(),
            copy_slot_recheck: Duration::from_secs(5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_converter_image_is_the_controllers_unless_an_allowed_one_is_named() {
        let p = Policy {
            converter_image: "reg.example/ferry:1".into(),
            allowed_converter_images: vec!["reg.example/ferry-debug:1".into()],
            ..Policy::default()
        };
        assert_eq!(p.converter_image_for(None).unwrap(), "reg.example/ferry:1");
        assert_eq!(
            p.converter_image_for(Some(" ")).unwrap(),
            "reg.example/ferry:1"
        );
        assert_eq!(
            p.converter_image_for(Some("reg.example/ferry:1")).unwrap(),
            "reg.example/ferry:1"
        );
        assert_eq!(
            p.converter_image_for(Some("reg.example/ferry-debug:1"))
                .unwrap(),
            "reg.example/ferry-debug:1"
        );
        let e = p
            .converter_image_for(Some("evil.example/steal:latest"))
            .unwrap_err();
        assert!(
            e.contains("evil.example/steal:latest") && e.contains("--allowed-converter-images"),
            "{e}"
        );
        assert!(
            p.converter_image_for(Some("reg.example/ferry-debug:2"))
                .is_err(),
            "exact references only"
        );
    }

    #[test]
    fn only_an_image_pinned_by_digest_on_a_named_registry_is_chosen_for_good() {
        let digest = "a".repeat(64);
        assert!(
            check_pinned_image(&format!(
                "registry.example.com/ferry/controller@sha256:{digest}"
            ))
            .is_ok()
        );
        assert!(check_pinned_image(&format!("localhost:5000/ferry@sha256:{digest}")).is_ok());
        assert!(check_pinned_image(&format!("localhost/ferry@sha256:{digest}")).is_ok());
        for (bad, why) in [
            ("ferry/controller:latest".to_owned(), "short name"),
            (format!("ferry/controller@sha256:{digest}"), "short name"),
            (
                "registry.example.com/ferry/controller:0.1.0".to_owned(),
                "not pinned",
            ),
            (
                "registry.example.com/ferry/controller@sha256:abc".to_owned(),
                "not pinned",
            ),
            (
                format!("registry.example.com/ferry@sha256:{}", "A".repeat(64)),
                "not pinned",
            ),
            (String::new(), "no image"),
            (
                format!("registry.example.com/f erry@sha256:{digest}"),
                "white space",
            ),
        ] {
            let e = check_pinned_image(&bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn without_a_converter_image_nothing_is_converted() {
        let e = Policy::default().converter_image_for(None).unwrap_err();
        assert!(e.contains("--converter-image"), "{e}");
    }
}
