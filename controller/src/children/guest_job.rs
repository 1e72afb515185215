//! The guest Job: one pod running `ferry-controller convert-guest` from the converter image,
//! with every imported claim mounted writable, that converts the guest with
//! `virt-v2v-in-place` on overlays and lands the conversion through a journal on each volume,
//! all or nothing (see `ferry_convert::guest`). It runs after the verification, before the
//! VirtualMachine is made.

use ferry_crds::{GuestConversion, VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::verify_job::{Claims, VerifyVolume, volume_arg};
use crate::Result;

/// The container's name.
pub const CONTAINER: &str = "guest";
/// Pod attempts after the first: a conversion killed halfway is finished by the next.
pub const BACKOFF_LIMIT: i32 = 2;
/// virt-v2v converts a guest in minutes even under TCG; past this the Job is stopped (2 h).
pub const ACTIVE_DEADLINE_SECONDS: i64 = 2 * 3600;
/// Where the work volume is mounted: the overlays and libguestfs' appliance.
pub const WORK_MOUNT: &str = "/var/run/ferry/work";
/// The work volume's size: libguestfs' appliance (about 400 MiB) and what the conversion writes
/// (tens of MiB for a Linux guest, up to a GiB for a Windows one).
pub const WORK_BYTES: u64 = 3 << 30;
/// libguestfs' appliance is a small VM: what it and virt-v2v need.
const REQUESTS: [(&str, &str); 2] = [("cpu", "1"), ("memory", "1536Mi")];
const LIMITS: [(&str, &str); 1] = [("memory", "2Gi")];

/// The Job's `--mode` for `conversion`: `None` for `Never` (no Job). Pure.
pub fn mode(conversion: GuestConversion) -> Option<&'static str> {
    match conversion {
        GuestConversion::Never => None,
        GuestConversion::Auto => Some("auto"),
        GuestConversion::Always => Some("always"),
    }
}

/// `MAC=NAME` for each source card ESXi gave a PCI slot, when the target keeps the source's
/// MACs: the name a Linux guest gives the card on ESXi (`ens<slot>`, systemd's name for a card
/// in a slot), which the converted guest keeps where its network configuration uses it. With
/// the MACs not kept no name is asked: the guest would match a MAC the card no longer has. Pure.
pub fn kept_nic_names(vmm: &VirtualMachineMigration) -> Vec<String> {
    if !vmm.spec.target.template.devices.preserve_mac_addresses {
        return vec![];
    }
    let Some(source) = vmm.status.as_ref().and_then(|s| s.source.as_deref()) else {
        return vec![];
    };
    // Interface names by slot are Linux's; a Windows guest keeps its adapters by other means.
    if source.guest_os_family == Some(ferry_crds::GuestOsFamily::Windows) {
        return vec![];
    }
    source
        .nics
        .iter()
        .filter(|n| !n.mac.is_empty())
        .filter_map(|n| Some(format!("{}=ens{}", n.mac, n.pci_slot_number?)))
        .collect()
}

/// The guest Job of `vmm` ([`names::guest_job_name`]) over `volumes` (each with the checksum
/// its verification found).
///
/// # Guarantees
/// Owned by and labelled with the migration; `image`: the converter's (the controller's own or
/// an allowed one, as the conversion Job ran); every claim mounted writable; an `emptyDir` work
/// volume; no service account token, no credentials; Pod Security `restricted`; exit code
/// [`ferry_convert::job_contract::PERMANENT_EXIT_CODE`] fails the Job at once; on success the
/// termination message is the program's result ([`ferry_convert::guest::render_result`]).
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn guest_job(
    vmm: &VirtualMachineMigration,
    volumes: &[VerifyVolume],
    image: &str,
) -> Result<Job> {
    let mut meta = super::child_meta(vmm, names::guest_job_name(vmm))?;
    // The DataVolumes it converts, by uid: one replaced under the same name after the Job was
    // made is not what its report is about (see `converting_guest`).
    let made_for: Vec<&str> = volumes.iter().map(|v| v.data_volume_uid.as_str()).collect();
    meta.annotations = Some(std::collections::BTreeMap::from([(
        super::verify_job::VOLUMES_ANNOTATION.to_owned(),
        made_for.join(","),
    )]));
    let mut args = vec![
        "convert-guest".to_owned(),
        "--mode".to_owned(),
        mode(vmm.spec.conversion.guest).unwrap_or("auto").to_owned(),
        "--result-file".to_owned(),
        super::verify_job::RESULT_PATH.to_owned(),
        "--work-dir".to_owned(),
        WORK_MOUNT.to_owned(),
    ];
    // A warm migration's volumes hold the first copy and its cutover's changes: no checksum
    // covers them.
    if vmm.spec.mode == ferry_crds::MigrationMode::Warm {
        args.push("--unverified".to_owned());
    }
    for n in kept_nic_names(vmm) {
        args.push("--keep-nic-name".to_owned());
        args.push(n);
    }
    let mut claims = Claims::default();
    for v in volumes {
        args.push("--volume".to_owned());
        args.push(volume_arg(v));
        claims.attach(v.index, &v.claim, v.block, false);
    }
    claims.mounts.push(VolumeMount {
        name: "work".to_owned(),
        mount_path: WORK_MOUNT.to_owned(),
        ..VolumeMount::default()
    });
    claims.volumes.push(Volume {
        name: "work".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(WORK_BYTES.to_string())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    });
    let quantities = |q: &[(&str, &str)]| {
        q.iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    };
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        args: Some(args),
        // libguestfs looks for its appliance's cache and temporary files under these.
        env: Some(vec![EnvVar {
            name: "HOME".to_owned(),
            value: Some(WORK_MOUNT.to_owned()),
            value_from: None,
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&REQUESTS)),
            limits: Some(quantities(&LIMITS)),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    Ok(claims.job(vmm, meta, container, BACKOFF_LIMIT, ACTIVE_DEADLINE_SECONDS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    #[test]
    fn the_job_mounts_every_claim_writable_with_no_credentials_and_a_work_volume() {
        let mut vmm = migration("web-1");
        vmm.spec.conversion.guest = GuestConversion::Always;
        let vols = [VerifyVolume {
            index: 0,
            claim: "web-1-disk-0".into(),
            data_volume_uid: "dv-uid-0".into(),
            block: false,
            size: 1 << 30,
            sha256: "ab".repeat(32),
        }];
        let job = guest_job(&vmm, &vols, "img").unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("web-1-guest"));
        assert_eq!(
            super::super::verify_job::made_for(&job),
            Some(vec!["dv-uid-0".to_owned()]),
            "pinned to the DataVolumes it converts"
        );
        let pod = job.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        let args = c.args.clone().unwrap();
        assert_eq!(args[..3], ["convert-guest", "--mode", "always"]);
        assert!(args.contains(&volume_arg(&vols[0])), "{args:?}");
        assert!(
            !args.contains(&"--unverified".to_owned()),
            "a cold one is checked"
        );
        let mounts = c.volume_mounts.clone().unwrap();
        assert!(mounts.iter().all(|m| m.read_only.is_none()), "{mounts:?}");
        assert!(mounts.iter().any(|m| m.mount_path == WORK_MOUNT));
        let env = c.env.clone().unwrap();
        assert!(
            env.iter().all(|e| e.value_from.is_none()),
            "no Secret reaches the guest Job: {env:?}"
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        let claim = pod.volumes.unwrap()[0]
            .persistent_volume_claim
            .clone()
            .unwrap();
        assert_eq!(claim.read_only, None);
        assert_eq!(mode(GuestConversion::Never), None);
    }

    #[test]
    fn a_card_in_a_slot_keeps_its_name_only_with_its_mac() {
        let mut vmm = migration("web-1");
        vmm.spec.conversion.guest = GuestConversion::Auto;
        let mut source = ferry_crds::fixtures::discovered_source();
        source.nics[0].pci_slot_number = Some(192);
        let slotless = source.nics.len() - 1;
        vmm.status.get_or_insert_with(Default::default).source = Some(Box::new(source.clone()));
        let mac = &source.nics[0].mac;
        assert_eq!(
            kept_nic_names(&vmm),
            [format!("{mac}=ens192")],
            "{slotless} left out"
        );
        let args = |vmm: &VirtualMachineMigration| {
            guest_job(vmm, &[], "img")
                .unwrap()
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .containers[0]
                .args
                .clone()
                .unwrap()
        };
        let a = args(&vmm);
        let at = a
            .iter()
            .position(|x| x == "--keep-nic-name")
            .expect("asked");
        assert_eq!(a[at + 1], format!("{mac}=ens192"));
        // A target with MACs of its own: the guest's configuration would not find the card.
        vmm.spec.target.template.devices.preserve_mac_addresses = false;
        assert!(kept_nic_names(&vmm).is_empty());
        assert!(!args(&vmm).contains(&"--keep-nic-name".to_owned()));
        // Nor for a Windows guest.
        vmm.spec.target.template.devices.preserve_mac_addresses = true;
        source.guest_os_family = Some(ferry_crds::GuestOsFamily::Windows);
        vmm.status.get_or_insert_with(Default::default).source = Some(Box::new(source));
        assert!(kept_nic_names(&vmm).is_empty());
    }
}
