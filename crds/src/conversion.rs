//! How disks are converted before staging.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The one disk-format type from the API through the converter's `--format` and its report to
// the staged record: each writes it by the same lowercase name.
/// Format of the converted disk images: raw or qcow2.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum DiskFormat {
    /// Raw image: imports fastest, as large as the disk.
    #[default]
    Raw,
    /// qcow2 image: sparse, smaller to stage.
    Qcow2,
}

impl DiskFormat {
    /// Every format's name, in declaration order (derived).
    pub const NAMES: &'static [&'static str] = <Self as strum::VariantNames>::VARIANTS;

    /// The format's name, also the staged objects' file extension.
    pub fn as_str(self) -> &'static str {
        self.into()
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

    /// Limits of copies at once from this VM's ESXi host and from its datastores, lower than
    /// the controller's (`--max-copies-per-host`, `--max-copies-per-datastore`): the migration
    /// starts copying only while fewer than these copy from them (in a wave's template, for
    /// every VM of the wave). A limit above the controller's changes nothing: the platform's
    /// limit protects the host for everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_limits: Option<CopyLimits>,

    /// Whether the imported guest is converted to run on KubeVirt (`virt-v2v-in-place`, in a
    /// Job, after the volumes are verified): Never (default), Auto or Always.
    #[serde(default)]
    pub guest: crate::GuestConversion,
}

impl ConversionSpec {
    /// Whether `other` makes the same staged images: the same converter and format. Its
    /// `copyLimits` only decide when a copy starts, and `guest` what happens after the
    /// import, not what it stages. Pure.
    pub fn makes_the_same_images_as(&self, other: &ConversionSpec) -> bool {
        self.image == other.image && self.format == other.format
    }
}

/// A migration's own limits of copies at once; see [`ConversionSpec::copy_limits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyLimits {
    /// Most migrations copying at once from the VM's ESXi host, this one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub per_host: Option<u32>,
    /// Most migrations copying at once from each datastore of its disks, this one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub per_datastore: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_format_is_written_and_read_by_one_name_everywhere() {
        for (f, name) in [(DiskFormat::Raw, "raw"), (DiskFormat::Qcow2, "qcow2")] {
            assert_eq!(f.as_str(), name);
            assert_eq!(serde_json::to_value(f).unwrap(), name);
            assert_eq!(name.parse::<DiskFormat>().unwrap(), f);
        }
        assert_eq!(DiskFormat::NAMES, ["raw", "qcow2"]);
        assert!("vmdk".parse::<DiskFormat>().is_err());
    }
}
