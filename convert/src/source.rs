//! The source as the converter sees it: a vSphere session, the VM's datacenter and disks (or
//! its snapshot's), and the check that what is read cannot change under the copy.

use std::sync::Arc;

use crate::Error;
use crate::args::ConvertArgs;
use crate::job_contract::{env, extra_env};
use ferry_vsphere::{self as vsphere, Endpoint, Session, VmInfo};

/// A logged-in source and what it said about the VM.
pub(crate) struct Source {
    pub session: Arc<Session>,
    pub datacenter: String,
    pub vm: Option<VmInfo>,
    /// The snapshot read instead of the VM's disks, and its disks (a warm first round).
    pub snapshot: Option<(String, Vec<vsphere::SnapshotDisk>)>,
}

/// Fails unless the disks read cannot change: the source VM powered off, or — reading a
/// snapshot — that snapshot still there (a snapshot removed hands its file back to the running
/// VM, which writes it). Checked before each disk is read and after it was uploaded, so that a
/// VM someone powers on, or a snapshot someone removes, during the copy never yields a staged
/// image.
pub(crate) async fn ensure_off(src: &Source, disk: &str) -> Result<(), Error> {
    let Some(vm) = src.vm.as_ref() else {
        return Ok(());
    };
    let vs = |source| Error::Vsphere {
        disk: disk.to_owned(),
        source,
    };
    if let Some((snapshot, _)) = &src.snapshot {
        let all = src.session.snapshots(&vm.moref).await.map_err(vs)?;
        return if all.iter().any(|s| &s.moref == snapshot) {
            Ok(())
        } else {
            Err(Error::SnapshotGone {
                moref: vm.moref.clone(),
                snapshot: snapshot.clone(),
            })
        };
    }
    let state = src
        .session
        .power_state(&vm.moref)
        .await
        .map_err(|source| Error::Vsphere {
            disk: disk.to_owned(),
            source,
        })?;
    match state {
        vsphere::PowerState::PoweredOff => Ok(()),
        other => Err(Error::SourcePoweredOn {
            moref: vm.moref.clone(),
            state: other.as_str(),
        }),
    }
}

pub(crate) async fn open_source(args: &ConvertArgs, endpoint: &Endpoint) -> Result<Source, Error> {
    let login = |source| Error::Vsphere {
        disk: "login".into(),
        source,
    };
    let session = Session::connect(endpoint).await.map_err(login)?;
    let vm = match args.vm_moref.as_deref().filter(|m| !m.is_empty()) {
        Some(moref) => match session.vm_info(moref).await {
            Ok(Some(vm)) => Some(vm),
            Ok(None) => {
                let _ = session.logout().await;
                return Err(login(vsphere::Error::NotFound(format!("VM {moref}"))));
            }
            Err(e) => {
                let _ = session.logout().await;
                return Err(login(e));
            }
        },
        None => None,
    };
    let datacenter = match (args.datacenter.as_deref().filter(|d| !d.is_empty()), &vm) {
        (Some(dc), _) => dc.to_owned(),
        (None, Some(vm)) => vm.datacenter.clone(),
        (None, None) => {
            let _ = session.logout().await;
            return Err(Error::Usage(format!(
                "no datacenter: set --datacenter ({}) or --vm-moref ({})",
                extra_env::DATACENTER,
                env::VM_MOREF
            )));
        }
    };
    let snapshot = match (args.snapshot.as_deref().filter(|s| !s.is_empty()), &vm) {
        (None, _) => None,
        (Some(snap), Some(vm)) => match session.snapshot_disks(snap).await {
            Ok(disks) => Some((snap.to_owned(), disks)),
            Err(e) => {
                let _ = session.logout().await;
                return Err(match e {
                    vsphere::Error::NotFound(_) => Error::SnapshotGone {
                        moref: vm.moref.clone(),
                        snapshot: snap.to_owned(),
                    },
                    other => login(other),
                });
            }
        },
        (Some(_), None) => {
            let _ = session.logout().await;
            return Err(Error::Usage(format!(
                "--snapshot ({}) needs --vm-moref ({})",
                extra_env::SNAPSHOT,
                env::VM_MOREF
            )));
        }
    };
    Ok(Source {
        session: Arc::new(session),
        datacenter,
        vm,
        snapshot,
    })
}
