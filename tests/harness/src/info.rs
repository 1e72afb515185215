//! The lab's own description of itself: `STATE/lab.json` and `STATE/inventory.json`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{Error, Result};

/// `STATE/lab.json`, written by `ferry-lab` once every part answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabInfo {
    pub state_dir: PathBuf,
    pub pid: u32,
    pub kubeconfig: PathBuf,
    pub apiserver: ApiServerInfo,
    pub vcenter: VCenterInfo,
    pub s3: S3Info,
    /// The second vCenter, whose certificate the lab's endpoint CA signed.
    pub vcenter_ca: VCenterCaInfo,
    /// The https front of S3, with a certificate of the same CA.
    pub s3_tls: S3TlsInfo,
    /// KubeVirt's own virt-api and virt-controller: only in a lab started with `--kubevirt`
    /// ([`crate::Lab::start_with_kubevirt`]).
    #[serde(default)]
    pub kubevirt: Option<KubeVirtInfo>,
}

impl LabInfo {
    /// The arguments `ferry-sim` needs on this lab: none on a lab without KubeVirt (the sim
    /// plays KubeVirt whole); on a lab with KubeVirt's own virt-controller, the node only
    /// (`--kubevirt real`), writing what virt-handler writes as its ServiceAccount.
    pub fn sim_kubevirt_args(&self) -> Vec<std::ffi::OsString> {
        let Some(kv) = &self.kubevirt else {
            return vec![];
        };
        let mut args = vec!["--kubevirt".into(), "real".into()];
        if let Some(handler) = &kv.handler_kubeconfig {
            args.push("--virt-handler-kubeconfig".into());
            args.push(handler.into());
        }
        args
    }
}

/// `lab.json` `kubevirt`: KubeVirt's virt-api (serving its webhooks) and virt-controller.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeVirtInfo {
    /// The KubeVirt release they were built from, e.g. `v1.8.3`.
    pub version: String,
    /// Their namespace, where the `KubeVirt` CR `kubevirt` lives.
    pub namespace: String,
    /// `https://127.0.0.1:PORT`, where the webhook configurations point.
    pub virt_api: String,
    /// virt-controller's health and metrics endpoint (TLS).
    pub virt_controller: String,
    /// PEM of the CA of their serving certificates.
    pub ca_file: PathBuf,
    /// A kubeconfig with a token of ServiceAccount `kubevirt/kubevirt-handler`, for whoever
    /// plays virt-handler (`ferry-sim --kubevirt real --virt-handler-kubeconfig`); absent from
    /// the `lab.json` of an older lab.
    #[serde(default)]
    pub handler_kubeconfig: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiServerInfo {
    pub url: String,
    pub version: String,
    pub ca_file: PathBuf,
    /// The audit log: every request made with a ServiceAccount token, and every write.
    pub audit_log: PathBuf,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VCenterInfo {
    pub url: String,
    pub username: String,
    pub password: String,
    pub thumbprint_sha1: String,
    pub thumbprint_sha256: String,
    pub datacenter: String,
    pub datastore: String,
    pub datastore_dir: PathBuf,
    pub inventory: PathBuf,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VCenterCaInfo {
    pub url: String,
    pub username: String,
    pub password: String,
    /// PEM of the CA that signed its certificate.
    pub ca_file: PathBuf,
    pub thumbprint_sha256: String,
    pub datastore_dir: PathBuf,
    pub inventory: PathBuf,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct S3TlsInfo {
    /// `https://127.0.0.1:PORT`, the same buckets and keys as [`S3Info`].
    pub endpoint: String,
    /// PEM of the CA that signed its certificate.
    pub ca_file: PathBuf,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct S3Info {
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub data_dir: PathBuf,
}

/// One VM of the simulated vCenter, as the lab found it after start.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryVm {
    pub name: String,
    pub moref: String,
    pub uuid: String,
    #[serde(default)]
    pub instance_uuid: String,
    pub power_state: String,
    #[serde(default)]
    pub guest_id: String,
    #[serde(default)]
    pub num_cpu: i64,
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: i64,
    #[serde(default)]
    pub firmware: String,
    /// The ESXi host it is registered on, by name.
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub disks: Vec<InventoryDisk>,
    #[serde(default)]
    pub nics: Vec<InventoryNic>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryDisk {
    pub key: i64,
    pub datastore_path: String,
    pub local_path: PathBuf,
    pub capacity_bytes: i64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryNic {
    #[serde(default)]
    pub mac: String,
    #[serde(default)]
    pub network: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Inventory {
    pub vms: Vec<InventoryVm>,
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| Error::Parse {
        path: path.to_owned(),
        source,
    })
}

impl LabInfo {
    /// Reads `lab.json` from a state directory.
    pub fn load(state_dir: &Path) -> Result<Self> {
        read_json(&state_dir.join("lab.json"))
    }

    /// Every VM of the simulated vCenter.
    pub fn inventory(&self) -> Result<Vec<InventoryVm>> {
        let inv: Inventory = read_json(&self.vcenter.inventory)?;
        Ok(inv.vms)
    }

    /// Every VM of the CA-signed simulated vCenter.
    pub fn inventory_ca(&self) -> Result<Vec<InventoryVm>> {
        let inv: Inventory = read_json(&self.vcenter_ca.inventory)?;
        Ok(inv.vms)
    }
}
