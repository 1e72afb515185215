//! How disks are converted before staging.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format of the converted disk images: raw or qcow2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DiskFormat {
    /// Raw image: imports fastest, as large as the disk.
    #[default]
    Raw,
    /// qcow2 image: sparse, smaller to stage.
    Qcow2,
}

impl DiskFormat {
    /// The format's name, also the staged objects' file extension.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
        }
    }
}

/// The conversion Job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversionSpec {
    /// Container image of the converter the conversion Job runs. Left out, the controller's own
    /// image runs (its --converter-image); another image only when the controller's
    /// --allowed-converter-images lists it, since the converter receives the credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), pattern(crate::rules::IMAGE))]
    pub image: Option<String>,

    /// Format of the converted images: raw (default) or qcow2.
    #[serde(default)]
    pub format: DiskFormat,
}
