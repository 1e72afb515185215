//! The sim's "storage": one file per imported volume, `VOLUME_DIR/<namespace>/<claim>.img`,
//! and Job logs under `VOLUME_DIR/_jobs/` (no namespace can start with `_`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Paths under the volume directory.
#[derive(Clone, Debug)]
pub struct Volumes {
    root: PathBuf,
}

impl Volumes {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Volumes { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file holding the contents of claim `name` in `namespace`.
    pub fn image(&self, namespace: &str, name: &str) -> PathBuf {
        self.root.join(namespace).join(format!("{name}.img"))
    }

    /// The directory a Filesystem claim's mount stands for: the claim's own files (CDI's
    /// `disk.img`, a link to [`Volumes::image`], and whatever a pod writes beside it), kept as
    /// long as the volume, as a real volume's file system is.
    pub fn files(&self, namespace: &str, name: &str) -> PathBuf {
        self.root.join(namespace).join(format!("{name}.files"))
    }

    /// Where an import writes before the bytes are verified.
    pub fn partial(&self, namespace: &str, name: &str) -> PathBuf {
        self.root.join(namespace).join(format!("{name}.img.part"))
    }

    /// The log of one attempt of a Job.
    pub fn job_log(&self, namespace: &str, job: &str, attempt: i32) -> PathBuf {
        self.root
            .join("_jobs")
            .join(namespace)
            .join(job)
            .join(format!("attempt-{attempt}.log"))
    }

    /// Whether claim `name` has been imported (its file exists).
    pub fn has_image(&self, namespace: &str, name: &str) -> bool {
        self.image(namespace, name).is_file()
    }

    /// Every volume file (finished or partial) on disk: `(namespace, claim, path)`.
    pub fn list(&self) -> Vec<(String, String, PathBuf)> {
        let mut out = Vec::new();
        let Ok(namespaces) = std::fs::read_dir(&self.root) else {
            return out;
        };
        for ns in namespaces.flatten() {
            let ns_name = ns.file_name().to_string_lossy().into_owned();
            if ns_name.starts_with('_') || !ns.path().is_dir() {
                continue;
            }
            let Ok(files) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for f in files.flatten() {
                let fname = f.file_name().to_string_lossy().into_owned();
                let claim = fname
                    .strip_suffix(".img.part")
                    .or_else(|| fname.strip_suffix(".img"));
                if let Some(claim) = claim {
                    out.push((ns_name.clone(), claim.to_string(), f.path()));
                }
            }
        }
        out
    }
}

/// The directory of files beside the volume file `image` (see [`Volumes::files`]). Pure.
pub fn files_of(image: &Path) -> PathBuf {
    image.with_extension("files")
}

/// The volume files to delete: those whose claim is in none of `live` (`namespace/claim`)
/// and whose namespace is in scope. Pure.
pub fn orphans(
    files: &[(String, String, PathBuf)],
    live: &HashSet<String>,
    scope: Option<&str>,
) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|(ns, _, _)| scope.is_none_or(|s| s == ns))
        .filter(|(ns, claim, _)| !live.contains(&format!("{ns}/{claim}")))
        .map(|(_, _, p)| p.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lists_images_and_partials_and_skips_job_logs() {
        let dir = std::env::temp_dir().join(format!("ferry-sim-vol-{}", std::process::id()));
        let v = Volumes::new(&dir);
        std::fs::create_dir_all(dir.join("ns1")).unwrap();
        std::fs::create_dir_all(v.job_log("ns1", "j", 1).parent().unwrap()).unwrap();
        std::fs::write(v.image("ns1", "a"), b"x").unwrap();
        std::fs::write(v.partial("ns1", "b"), b"x").unwrap();
        std::fs::write(v.job_log("ns1", "j", 1), b"log").unwrap();
        std::fs::write(dir.join("ns1").join("notes.txt"), b"x").unwrap();
        let mut got: Vec<_> = v
            .list()
            .into_iter()
            .map(|(n, c, _)| format!("{n}/{c}"))
            .collect();
        got.sort();
        assert_eq!(got, vec!["ns1/a", "ns1/b"]);
        assert!(v.has_image("ns1", "a") && !v.has_image("ns1", "b"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn orphans_are_files_without_a_claim_in_scope() {
        let files = vec![
            (
                "a".to_string(),
                "x".to_string(),
                PathBuf::from("/v/a/x.img"),
            ),
            (
                "a".to_string(),
                "y".to_string(),
                PathBuf::from("/v/a/y.img"),
            ),
            (
                "b".to_string(),
                "z".to_string(),
                PathBuf::from("/v/b/z.img"),
            ),
        ];
        let live: HashSet<String> = ["a/x".to_string()].into();
        assert_eq!(
            orphans(&files, &live, None),
            vec![PathBuf::from("/v/a/y.img"), PathBuf::from("/v/b/z.img")]
        );
        assert_eq!(
            orphans(&files, &live, Some("a")),
            vec![PathBuf::from("/v/a/y.img")]
        );
    }
}
