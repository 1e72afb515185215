//! Well-known names (finalizer, labels, annotations, field managers) and the deterministic names
//! of everything ferry creates, so that every step can create-if-absent.

use kube::ResourceExt;

use crate::VirtualMachineMigration;

/// Finalizer that lets the controller clean up staging objects, Jobs and DataVolumes before a
/// migration disappears.
pub const FINALIZER: &str = "migration.platform.example/cleanup";

/// What every label, annotation and finalizer name of ferry's begins with.
pub const PREFIX: &str = "migration.platform.example/";
/// Label on a VirtualMachineMigration naming the MigrationWave it belongs to.
pub const WAVE_LABEL: &str = "migration.platform.example/wave";
/// Label on every child (Job, DataVolume, VirtualMachine) naming its VirtualMachineMigration.
pub const MIGRATION_LABEL: &str = "migration.platform.example/migration";
/// Label on every child carrying the uid of the VirtualMachineMigration that made it: a child of
/// the right name but another uid (a leftover of an earlier migration of the same name, or
/// someone else's object) is a conflict, never progress. It stays on released children.
pub const MIGRATION_UID_LABEL: &str = "migration.platform.example/migration-uid";
/// Label ferry puts on a child it released (the migrated VM and its DataVolumes, value
/// [`RELEASED_VALUE`]) with the removal of its owner reference: the controller's child watches
/// select it out (memory follows what is in flight, not the migrated fleet).
pub const RELEASED_LABEL: &str = "migration.platform.example/released";
/// Value of [`RELEASED_LABEL`].
pub const RELEASED_VALUE: &str = "true";
/// Label by which the owner of a Secret allows ferry to use it as migration credentials (value
/// [`CREDENTIALS_LABEL_VALUE`]); ferry reads no other Secret.
pub const CREDENTIALS_LABEL: &str = "migration.platform.example/credentials";
/// Value of [`CREDENTIALS_LABEL`] that opts a Secret in.
pub const CREDENTIALS_LABEL_VALUE: &str = "true";
/// Annotation on a VirtualMachineMigration created by a wave: while present, the migration stays
/// `Queued`; the wave removes it when its in-flight budget allows.
pub const HOLD_ANNOTATION: &str = "migration.platform.example/hold";
/// Value of [`HOLD_ANNOTATION`] as the wave writes it.
pub const HOLD_VALUE: &str = "wave";
/// Value of [`HOLD_ANNOTATION`] on the migrations a paused wave creates: held, and preflighted
/// meanwhile (a wave is paused to be planned).
pub const HOLD_PREFLIGHT_VALUE: &str = "preflight";

/// Annotation by which the owner of a VirtualMachineMigration being deleted lets its cleanup go
/// (value [`ABANDON_CLEANUP_VALUE`]): what cleanup cannot remove (staging unreachable) is left
/// behind, listed in an Event, and the finalizer released.
pub const ABANDON_CLEANUP_ANNOTATION: &str = "migration.platform.example/abandon-cleanup";
/// Value of [`ABANDON_CLEANUP_ANNOTATION`] that abandons the cleanup.
pub const ABANDON_CLEANUP_VALUE: &str = "true";

/// Field manager of the migration controller (status, finalizer, children).
pub const CONTROLLER_FIELD_MANAGER: &str = "ferry-controller";
/// Field manager of the wave controller (child migrations, hold annotation, wave status).
pub const WAVE_FIELD_MANAGER: &str = "ferry-wave-controller";
/// Field manager of the cockpit's actions (cancel, pause, retry patches).
pub const COCKPIT_FIELD_MANAGER: &str = "ferry-cockpit";

/// Longest DNS-1123 label, and so the longest name ferry derives.
pub const MAX_NAME_LEN: usize = 63;
const HASH_LEN: usize = 8;

/// FNV-1a, 64 bits: tiny, and stable across Rust releases (unlike `DefaultHasher`), which
/// matters because derived names must never change.
fn fnv1a64(data: &str) -> u64 {
    data.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn short_hash(data: &str) -> String {
    let h = fnv1a64(data);
    format!("{:08x}", (h ^ (h >> 32)) as u32)
}

/// `base` cut to at most `max` characters; when cut, the end is replaced by `-` and an 8-digit
/// hash of `hash_input`, so that different long names stay different.
fn bounded(base: &str, max: usize, hash_input: &str) -> String {
    if base.len() <= max {
        return base.to_owned();
    }
    let keep = max.saturating_sub(HASH_LEN + 1);
    // `base` is ASCII here (callers pass sanitized names), so byte slicing is safe; be careful anyway.
    let mut head: String = base.chars().take(keep).collect();
    while head.ends_with(['-', '.']) {
        head.pop();
    }
    format!("{head}-{}", short_hash(hash_input))
}

/// `name` made a valid DNS-1123 label of at most [`MAX_NAME_LEN`] characters.
///
/// # Guarantees
/// * Deterministic; a valid label is returned unchanged.
/// * Letters are lowercased, every run of other characters becomes one `-`, and leading or
///   trailing `-` are dropped: `DC0_H0_VM0` becomes `dc0-h0-vm0`.
/// * Longer results are cut and end in `-` plus an 8-digit hash of `name`; a name with no letter
///   or digit becomes `vm-` plus that hash.
/// * Different names may map to the same label (`VM_1` and `vm-1`); callers that need uniqueness
///   check for it.
pub fn sanitize_dns1123_label(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        return format!("vm-{}", short_hash(name));
    }
    bounded(&out, MAX_NAME_LEN, name)
}

/// `<prefix>-<suffix>` bounded to [`MAX_NAME_LEN`], the suffix kept whole.
fn derived(prefix: &str, suffix: &str) -> String {
    let full = format!("{prefix}-{suffix}");
    if full.len() <= MAX_NAME_LEN {
        return full;
    }
    let room = MAX_NAME_LEN - suffix.len() - 1;
    format!("{}-{suffix}", bounded(prefix, room, &full))
}

/// Name of the conversion Job of a migration: `<migration>-convert`.
pub fn job_name(vmm: &VirtualMachineMigration) -> String {
    derived(&vmm.name_any(), "convert")
}

/// Name of the Job verifying the imported volumes' checksums: `<migration>-verify`.
pub fn verify_job_name(vmm: &VirtualMachineMigration) -> String {
    derived(&vmm.name_any(), "verify")
}

/// Name of the Job converting the imported guest (`virt-v2v-in-place`): `<migration>-guest`.
pub fn guest_job_name(vmm: &VirtualMachineMigration) -> String {
    derived(&vmm.name_any(), "guest")
}

/// Name of the Job running the hook at `point` (`spec.hooks`): `<migration>-pre-cutover`,
/// `<migration>-post-cutover`.
pub fn hook_job_name(vmm: &VirtualMachineMigration, point: crate::HookPoint) -> String {
    derived(&vmm.name_any(), point.suffix())
}

/// Name of the Job copying a warm migration's last changes into its volumes at the cutover:
/// `<migration>-cutover`.
pub fn cutover_job_name(vmm: &VirtualMachineMigration) -> String {
    derived(&vmm.name_any(), "cutover")
}

/// Name of the Job copying a warm migration's changes into its volumes in a precopy round while
/// the source runs: `<migration>-precopy` (one round at a time; deleted when its round ends).
pub fn precopy_job_name(vmm: &VirtualMachineMigration) -> String {
    derived(&vmm.name_any(), "precopy")
}

/// Name of the DataVolume importing disk `disk_index` (from 0): `<migration>-disk-<index>`.
pub fn datavolume_name(vmm: &VirtualMachineMigration, disk_index: usize) -> String {
    derived(&vmm.name_any(), &format!("disk-{disk_index}"))
}

/// Whether `name` is one ferry gives a child of `vmm`: its Jobs (convert, verify, cutover,
/// precopy), the DataVolume of each disk it knows of, its VirtualMachine (whose instance has the
/// same name). Anyone may label an object with a migration's name and uid; only these names
/// are worth holding whole.
pub fn is_child_name(vmm: &VirtualMachineMigration, name: &str) -> bool {
    let disks = vmm.status.as_ref().map_or(0, |s| {
        s.disks
            .len()
            .max(s.source.as_ref().map_or(0, |d| d.disks.len()))
    });
    [
        job_name(vmm),
        verify_job_name(vmm),
        cutover_job_name(vmm),
        precopy_job_name(vmm),
        vm_name(vmm),
    ]
    .iter()
    .any(|n| n == name)
        || (0..disks).any(|i| datavolume_name(vmm, i) == name)
}

/// Name of the KubeVirt VirtualMachine: `spec.target.name` when set, otherwise the source VM's
/// name (from the spec, else as discovered) made a DNS-1123 label, otherwise the migration's
/// name made one.
pub fn vm_name(vmm: &VirtualMachineMigration) -> String {
    if let Some(name) = &vmm.spec.target.name {
        return name.clone();
    }
    let source_name = vmm
        .spec
        .source
        .vm
        .name
        .as_deref()
        .or_else(|| vmm.status.as_ref()?.source.as_ref()?.name.as_deref());
    sanitize_dns1123_label(source_name.unwrap_or(&vmm.name_any()))
}

/// Key of disk `disk_index`'s converted image in the staging bucket:
/// `<prefix>/<namespace>/<migration>/<uid>/disk-<index>.<format>`.
///
/// The uid keeps a re-created migration of the same name from reading an older one's objects;
/// segments the object lacks (namespace, uid, prefix) are left out.
pub fn staging_key(vmm: &VirtualMachineMigration, disk_index: usize) -> String {
    let prefix = vmm
        .spec
        .staging
        .prefix
        .as_deref()
        .unwrap_or("")
        .trim_matches('/');
    let file = format!("disk-{disk_index}.{}", vmm.spec.conversion.format.as_str());
    let name = vmm.name_any();
    [
        Some(prefix),
        vmm.metadata.namespace.as_deref(),
        Some(name.as_str()),
        vmm.metadata.uid.as_deref(),
        Some(file.as_str()),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>()
    .join("/")
}

/// Name of the VirtualMachineMigration a wave creates for one VM: `<wave>-<member>`, with
/// `<member>` the entry's targetName, else the VM's name, id or uuid, made a DNS-1123 label;
/// bounded to [`MAX_NAME_LEN`] (cut names end in a hash of `<wave>/<member>`).
///
/// # Guarantees
/// * Deterministic: a function of the two strings only, so a restarted controller finds the
///   names it made (and a wave's existing migrations keep theirs).
/// * Not injective, and cannot be while plain names stay plain: `Web-1` and `web_1` make one
///   label, and wave `a` with VM `b-c` and wave `a-b` with VM `c` both make `a-b-c`. The wave
///   controller therefore never takes a migration by its name alone: one of another VM is a
///   `NameCollision`.
pub fn wave_member_name(wave: &str, vm: &str) -> String {
    let full = format!("{wave}-{}", sanitize_dns1123_label(vm));
    bounded(&full, MAX_NAME_LEN, &format!("{wave}/{vm}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DiskFormat, fixtures::migration};

    #[test]
    fn only_the_names_ferry_gives_a_migrations_children_are_its_childrens() {
        let m = migration("web").with_disks(2);
        for name in [
            job_name(&m),
            verify_job_name(&m),
            cutover_job_name(&m),
            precopy_job_name(&m),
            datavolume_name(&m, 0),
            datavolume_name(&m, 1),
            vm_name(&m),
        ] {
            assert!(is_child_name(&m, &name), "{name}");
        }
        for name in [
            "tenant-1".to_owned(),
            datavolume_name(&m, 2),
            format!("{}-x", job_name(&m)),
        ] {
            assert!(!is_child_name(&m, &name), "{name}");
        }
    }

    fn is_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX_NAME_LEN
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn sanitize_makes_vcsim_and_vsphere_names_valid_labels() {
        let cases = [
            ("DC0_H0_VM0", "dc0-h0-vm0"),
            ("dc0-h0-vm0", "dc0-h0-vm0"),
            ("Web Server (prod)", "web-server-prod"),
            ("--a--b--", "a-b"),
            ("_x_", "x"),
            ("Büro-01", "b-ro-01"),
            ("a.b.c", "a-b-c"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize_dns1123_label(input), want, "{input:?}");
        }
    }

    #[test]
    fn sanitize_always_yields_a_label_and_is_deterministic() {
        let long = "X".repeat(200);
        for input in ["", "___", "日本", long.as_str(), "a", "0"] {
            let got = sanitize_dns1123_label(input);
            assert!(is_label(&got), "{input:?} -> {got:?}");
            assert_eq!(got, sanitize_dns1123_label(input));
        }
        assert!(sanitize_dns1123_label("___").starts_with("vm-"));
        assert_ne!(sanitize_dns1123_label("___"), sanitize_dns1123_label("***"));
    }

    #[test]
    fn long_names_are_cut_with_a_hash_that_keeps_them_apart() {
        let a = sanitize_dns1123_label(&format!("{}a", "v".repeat(80)));
        let b = sanitize_dns1123_label(&format!("{}b", "v".repeat(80)));
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert_ne!(a, b);
        assert!(is_label(&a) && is_label(&b));
    }

    #[test]
    fn hash_is_stable_across_releases() {
        // Pinned: changing it would rename the children of existing migrations.
        assert_eq!(short_hash("DC0_H0_VM0"), short_hash("DC0_H0_VM0"));
        assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn child_names_are_derived_from_the_migration() {
        let vmm = migration("web-1");
        assert_eq!(job_name(&vmm), "web-1-convert");
        assert_eq!(verify_job_name(&vmm), "web-1-verify");
        assert_eq!(datavolume_name(&vmm, 0), "web-1-disk-0");
        assert_eq!(datavolume_name(&vmm, 12), "web-1-disk-12");
    }

    #[test]
    fn child_names_of_a_long_migration_keep_their_suffix_and_fit() {
        let vmm = migration(&"m".repeat(63));
        for name in [job_name(&vmm), datavolume_name(&vmm, 3)] {
            assert!(is_label(&name), "{name}");
        }
        assert!(job_name(&vmm).ends_with("-convert"));
        assert!(datavolume_name(&vmm, 3).ends_with("-disk-3"));
        assert_ne!(datavolume_name(&vmm, 3), datavolume_name(&vmm, 4));
    }

    #[test]
    fn vm_name_prefers_target_then_source_then_discovered_then_migration() {
        let mut vmm = migration("mig");
        vmm.spec.target.name = Some("db".into());
        assert_eq!(vm_name(&vmm), "db");
        vmm.spec.target.name = None;
        vmm.spec.source.vm = crate::VmSelector::by_name("DC0_H0_VM0");
        assert_eq!(vm_name(&vmm), "dc0-h0-vm0");
        vmm.spec.source.vm = crate::VmSelector::by_id("vm-42");
        assert_eq!(vm_name(&vmm), "mig");
        let vmm = vmm.with_discovered_name("DC0_H0_VM1");
        assert_eq!(vm_name(&vmm), "dc0-h0-vm1");
    }

    #[test]
    fn staging_key_is_namespaced_by_migration_uid_and_format() {
        let mut vmm = migration("web-1");
        assert_eq!(
            staging_key(&vmm, 0),
            "ferry/default/web-1/00000000-0000-0000-0000-000000000001/disk-0.raw"
        );
        vmm.spec.staging.prefix = None;
        vmm.spec.conversion.format = DiskFormat::Qcow2;
        vmm.metadata.uid = None;
        assert_eq!(staging_key(&vmm, 2), "default/web-1/disk-2.qcow2");
    }

    #[test]
    fn wave_member_names_are_bounded_labels() {
        assert_eq!(wave_member_name("w1", "DC0_H0_VM0"), "w1-dc0-h0-vm0");
        let long = wave_member_name(&"w".repeat(63), "DC0_H0_VM0");
        assert!(is_label(&long), "{long}");
        assert_ne!(long, wave_member_name(&"w".repeat(63), "DC0_H0_VM1"));
    }

    #[test]
    fn wave_member_names_collide_in_the_shapes_the_wave_controller_must_refuse() {
        // Pinned: these are the collisions `controller/src/wave/members.rs` detects.
        assert_eq!(
            wave_member_name("w", "Web-1"),
            wave_member_name("w", "web_1")
        );
        assert_eq!(wave_member_name("a", "b-c"), wave_member_name("a-b", "c"));
        // Long names cut to the bound keep a hash of the whole, so they stay apart.
        let (x, y) = (
            format!("{}-x", "v".repeat(70)),
            format!("{}-y", "v".repeat(70)),
        );
        assert_ne!(wave_member_name("w", &x), wave_member_name("w", &y));
        assert_eq!(wave_member_name("w", &x).len(), MAX_NAME_LEN);
    }
}
