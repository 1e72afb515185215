//! The guest's network cards keep the names its network configuration uses.
//!
//! On ESXi a Linux guest names a card after the PCI slot ESXi gave it (systemd's `ens192` for
//! slot 192), and its static addresses are configured under that name (`ifcfg-ens192`,
//! `ens192.network`, a netplan or NetworkManager entry). On KubeVirt the same card, now virtio,
//! sits elsewhere on the bus and comes up as `enp1s0`: the configuration no longer applies and
//! the guest loses its address. Forklift keeps the name with udev rules keyed by the card's MAC;
//! ferry does the same with a systemd `.link` file (`/etc/systemd/network/10-ferry-NAME.link`,
//! read by systemd-udevd, which every systemd distribution runs), written into the overlay
//! before virt-v2v runs, so that the initramfs virt-v2v rebuilds carries it too, and landing
//! with the rest of the conversion, all or nothing. The MAC must be the target's: ferry keeps
//! the source's MACs unless `devices.preserveMacAddresses` is off, and then asks for no names.
//!
//! A name is kept only where the guest's own configuration names it: a guest that uses `eth0`
//! (`net.ifnames=0`) or matches by MAC is left as it is.

use std::path::Path;

use crate::Error;
use crate::libguestfs;

/// One card whose name is kept: `MAC=NAME` on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicName {
    /// Lowercase, colon-separated.
    pub mac: String,
    /// A Linux interface name (at most 15 of `[a-z0-9]`).
    pub name: String,
}

impl NicName {
    /// Parses `MAC=NAME`; only a MAC's and a plain interface name's characters pass (both go
    /// into a script run in the guest).
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<NicName, String> {
        let (mac, name) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: want MAC=NAME"))?;
        let mac = mac.to_ascii_lowercase();
        let octets: Vec<&str> = mac.split(':').collect();
        if octets.len() != 6
            || octets
                .iter()
                .any(|o| o.len() != 2 || !o.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(format!("{mac:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"));
        }
        if name.is_empty()
            || name.len() > 15
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(format!(
                "{name:?} is not an interface name ferry keeps (1 to 15 of a-z, 0-9)"
            ));
        }
        Ok(NicName {
            mac,
            name: name.to_owned(),
        })
    }
}

/// Where the guest's network configuration lives, per family: systemd-networkd, Debian's
/// ifupdown, RHEL's network-scripts, NetworkManager's keyfiles, netplan.
const CONFIG: &str = "/etc/systemd/network /etc/network/interfaces /etc/network/interfaces.d /etc/sysconfig/network-scripts /etc/NetworkManager/system-connections /etc/netplan";

/// The script run inside the guest (its root as `/`): a `.link` file for each card whose name
/// the configuration uses, and one line a card saying what it did. Pure.
fn script(names: &[NicName]) -> String {
    let mut s = format!(
        "#!/bin/sh\n# ferry: the names of the guest's network cards that its configuration uses.\nset -u\ncfg=\"{CONFIG}\"\n\
keep() {{\n\
  if grep -rqsw -- \"$2\" $cfg; then\n\
    mkdir -p /etc/systemd/network\n\
    printf '# Written by ferry: the name this card had on VMware, which the network configuration uses.\\n[Match]\\nMACAddress=%s\\n\\n[Link]\\nName=%s\\n' \"$1\" \"$2\" >\"/etc/systemd/network/10-ferry-$2.link\"\n\
    echo \"ferry-nic: kept $2 for $1\"\n\
  else\n\
    echo \"ferry-nic: left $1 to the guest: no network configuration names $2\"\n\
  fi\n\
}}\n"
    );
    for n in names {
        s.push_str(&format!("keep {} {}\n", n.mac, n.name));
    }
    s
}

/// The lines the script printed, without their prefix. Pure.
fn said(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ferry-nic: "))
        .map(str::to_owned)
        .collect()
}

/// Runs the script in the guest on `overlays` with guestfish (libguestfs' inspection finds and
/// mounts its root): what it did, one line a card. A guest guestfish cannot open (no operating
/// system it knows, or not Linux) keeps its names as they are, and the line says why.
///
/// # Errors
/// guestfish missing, or the script's file not written (the Job's work volume).
pub async fn keep(
    guestfish: &Path,
    kvm: bool,
    work: &Path,
    overlays: &[std::path::PathBuf],
    names: &[NicName],
) -> Result<Vec<String>, Error> {
    if names.is_empty() {
        return Ok(vec![]);
    }
    let local = work.join("ferry-nic-names.sh");
    tokio::fs::write(&local, script(names))
        .await
        .map_err(|source| Error::Io {
            path: local.clone(),
            source,
        })?;
    let mut cmd = libguestfs::command(guestfish, work, kvm).await?;
    cmd.arg("--rw").arg("--format=qcow2");
    for ov in overlays {
        cmd.arg("-a").arg(ov);
    }
    cmd.arg("-i");
    let commands = format!(
        "upload {} /tmp/ferry-nic-names.sh\nsh \"/bin/sh /tmp/ferry-nic-names.sh\"\nrm /tmp/ferry-nic-names.sh\n",
        local.display()
    );
    let out = libguestfs::run(cmd, "guestfish", Some(commands)).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The pod's log keeps what guestfish said, and what became of each name.
    eprint!("{stderr}");
    let lines = said_by(
        out.status.success(),
        &String::from_utf8_lossy(&out.stdout),
        &stderr,
        names,
    )
    .map_err(|detail| Error::Qemu {
        what: "guestfish".into(),
        detail,
        missing: false,
    })?;
    for l in &lines {
        println!("network: {l}");
    }
    Ok(lines)
}

/// What guestfish's run says of each card: the script's lines; each card left to the guest when
/// guestfish found no operating system (a disk set virt-v2v will not convert either). `Err`:
/// anything else that stopped it (its appliance failed, the script did not run), in its own
/// words: the attempt fails and the Job's next one tries again, rather than convert a guest
/// that then boots without its addresses. Pure.
fn said_by(ok: bool, stdout: &str, stderr: &str, names: &[NicName]) -> Result<Vec<String>, String> {
    if ok {
        return Ok(said(stdout));
    }
    if stderr.contains("no operating system was found") {
        return Ok(names
            .iter()
            .map(|n| {
                format!(
                    "left {} to the guest: guestfish found no operating system",
                    n.mac
                )
            })
            .collect());
    }
    let why = stderr
        .lines()
        .map(str::trim)
        .find(|l| l.contains("error:"))
        .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("guestfish failed without saying why")
        .chars()
        .take(200)
        .collect::<String>();
    Err(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_operating_system_leaves_the_names_and_any_other_failure_is_the_attempts() {
        let names = [NicName::parse("00:50:56:00:00:01=ens192").unwrap()];
        assert_eq!(
            said_by(
                true,
                "ferry-nic: kept ens192 for 00:50:56:00:00:01\n",
                "",
                &names
            ),
            Ok(vec!["kept ens192 for 00:50:56:00:00:01".to_owned()])
        );
        assert_eq!(
            said_by(
                false,
                "",
                "guestfish: no operating system was found on this disk\n\nIf using guestfish '-i' option, remove this option",
                &names
            ),
            Ok(vec![
                "left 00:50:56:00:00:01 to the guest: guestfish found no operating system"
                    .to_owned()
            ])
        );
        let crashed = "libguestfs: error: appliance closed the connection unexpectedly.\nThis usually means the libguestfs appliance crashed.\n...into a bug report or message to the libguestfs mailing list.";
        assert_eq!(
            said_by(false, "", crashed, &names),
            Err("libguestfs: error: appliance closed the connection unexpectedly.".to_owned())
        );
    }

    #[test]
    fn only_a_mac_and_a_plain_name_pass() {
        assert_eq!(
            NicName::parse("00:50:56:AB:cd:01=ens192"),
            Ok(NicName {
                mac: "00:50:56:ab:cd:01".into(),
                name: "ens192".into()
            })
        );
        for bad in [
            "00:50:56:ab:cd=ens192",
            "00:50:56:ab:cd:0g=ens192",
            "00:50:56:ab:cd:01=",
            "00:50:56:ab:cd:01=ens192;reboot",
            "00:50:56:ab:cd:01=$(id)",
            "00:50:56:ab:cd:01=averyveryverylongname",
            "ens192",
        ] {
            assert!(NicName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_script_keeps_each_name_its_configuration_uses_and_says_so() {
        let names = [
            NicName::parse("00:50:56:00:00:01=ens192").unwrap(),
            NicName::parse("00:50:56:00:00:02=ens224").unwrap(),
        ];
        let s = script(&names);
        assert!(s.contains("keep 00:50:56:00:00:01 ens192\n"), "{s}");
        assert!(s.contains("keep 00:50:56:00:00:02 ens224\n"), "{s}");
        assert!(s.contains("/etc/sysconfig/network-scripts"), "{s}");
        // Run it against a root of our own: the one named keeps its name, the other is left.
        let root = std::env::temp_dir().join(format!("ferry-nic-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let etc = root.join("etc/systemd/network");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("ens192.network"),
            "[Match]\nName=ens192\n[Network]\nAddress=192.0.2.10/24\n",
        )
        .unwrap();
        let rooted = s.replace("/etc/", &format!("{}/etc/", root.display()));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&rooted)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            said(&String::from_utf8_lossy(&out.stdout)),
            [
                "kept ens192 for 00:50:56:00:00:01",
                "left 00:50:56:00:00:02 to the guest: no network configuration names ens224"
            ]
        );
        let link = std::fs::read_to_string(etc.join("10-ferry-ens192.link")).unwrap();
        assert!(
            link.contains("[Match]\nMACAddress=00:50:56:00:00:01\n\n[Link]\nName=ens192\n"),
            "{link}"
        );
        assert!(!etc.join("10-ferry-ens224.link").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
