//! The volumes that hold the copy, as Importing, CuttingOver and ConvertingGuest share them:
//! what the verification Job checks of each, and where a migration goes once its copy is in
//! them. Pure.

use ferry_crds::{Phase, VirtualMachineMigration, names};

use super::world::staged_keys;
use crate::children::verify_job::VerifyVolume;

/// What the verification Job checks: per disk its claim and the uid of the DataVolume now under
/// that name (`uids`), the staged image's virtual size and raw-contents checksum (recorded in
/// Converting). Pure.
///
/// # Errors
/// The disks whose size or checksum is not recorded (staged by an older ferry).
pub fn verify_volumes(
    vmm: &VirtualMachineMigration,
    block: &[bool],
    uids: &[Option<String>],
) -> std::result::Result<Vec<VerifyVolume>, String> {
    let disks = vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let mut out = vec![];
    let mut missing = vec![];
    for i in 0..staged_keys(vmm).len() {
        let d = disks.get(i);
        match (
            d.and_then(|d| d.virtual_size_bytes),
            d.and_then(|d| d.raw_checksum.clone()),
        ) {
            (Some(size), Some(sha256)) => out.push(VerifyVolume {
                index: i,
                claim: names::datavolume_name(vmm, i),
                data_volume_uid: uids.get(i).cloned().flatten().unwrap_or_default(),
                block: block.get(i).copied().unwrap_or(false),
                size,
                sha256,
            }),
            _ => missing.push(format!("disk {i}")),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing.join(", "))
    }
}

/// Where a migration goes once its copy is in the volumes (after Importing, or CuttingOver's
/// cutover): ConvertingGuest when its guest is to be converted, else CreatingVM. Pure.
pub fn after_the_copy(vmm: &VirtualMachineMigration) -> Phase {
    if vmm.spec.conversion.guest.converts() {
        Phase::ConvertingGuest
    } else {
        Phase::CreatingVM
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    #[test]
    fn each_volume_is_checked_against_its_staged_image() {
        let mut vmm = migration("m").with_disks(2).with_phase(Phase::Importing);
        if let Some(s) = vmm.status.as_mut() {
            for (i, d) in s.disks.iter_mut().enumerate() {
                d.virtual_size_bytes = Some(64 << 20);
                d.raw_checksum = Some(format!("{i:064x}"));
            }
        }
        let uids = [Some("dv-uid-0".to_owned()), Some("dv-uid-1".to_owned())];
        let vols = verify_volumes(&vmm, &[false, true], &uids).unwrap();
        assert_eq!(
            vols[1],
            VerifyVolume {
                index: 1,
                claim: "m-disk-1".into(),
                data_volume_uid: "dv-uid-1".into(),
                block: true,
                size: 64 << 20,
                sha256: format!("{:064x}", 1)
            }
        );
    }
}
