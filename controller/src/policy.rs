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
    /// How often a running conversion's progress is read from staging (no watch event says it
    /// moved).
    pub progress_requeue: Duration,
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
    /// controller's own image (the Deployment passes it).
    pub converter_image: String,
    /// Other converter images a migration may name in `spec.conversion.image` (exact
    /// references). The converter receives the credentials, so only images the platform team
    /// trusts may run it.
    pub allowed_converter_images: Vec<String>,
    /// Most VMs a wave's `spec.selector` may choose (never more than
    /// [`ferry_crds::wave::MAX_WAVE_VMS`], what `status.selectedVms` holds); a selector choosing
    /// more fails the wave with `SelectorTooBroad`. Lower it to bound what one selector can start.
    pub wave_selector_limit: usize,
}

/// The converter image when none is configured: the image `make image` builds and
/// `deploy/controller` names (kustomize replaces both together).
pub const DEFAULT_CONVERTER_IMAGE: &str = "ferry/controller:latest";

impl Policy {
    /// The image the conversion Job of a migration naming `wanted` runs, or why it may not. Pure.
    ///
    /// # Errors
    /// The message for [`ferry_crds::Reason::ConverterImageNotAllowed`] when `wanted` is neither
    /// the controller's converter image nor in the allow-list.
    pub fn converter_image_for(&self, wanted: Option<&str>) -> Result<String, String> {
        match wanted.map(str::trim).filter(|w| !w.is_empty()) {
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
            progress_requeue: Duration::from_secs(3),
            converter_read_limit: None,
            source_poll: Duration::from_secs(5),
            kubevirt_error_grace: Duration::from_secs(20),
            target_stop_margin: Duration::from_secs(60),
            converter_image: DEFAULT_CONVERTER_IMAGE.to_owned(),
            allowed_converter_images: vec![],
            wave_selector_limit: ferry_crds::wave::MAX_WAVE_VMS,
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
}
