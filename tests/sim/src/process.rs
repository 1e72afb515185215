//! Running a Job's container on the host, as a kubelet would run it in a pod: the container's
//! `command` + `args` with its environment (`value`, `valueFrom` Secret/ConfigMap keys and
//! pod fields, `envFrom`), `$(VAR)` references expanded the Kubernetes way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use k8s_openapi::api::core::v1::Container;

use crate::{Error, Result};

/// What the downward API can tell a container about its (simulated) pod.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub node_name: String,
    pub service_account: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// The Secrets and ConfigMaps a container's environment names: `(secrets, config maps)`.
pub fn references(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut secrets = BTreeSet::new();
    let mut maps = BTreeSet::new();
    for e in c.env.iter().flatten() {
        if let Some(from) = &e.value_from {
            if let Some(s) = &from.secret_key_ref {
                secrets.insert(s.name.clone());
            }
            if let Some(m) = &from.config_map_key_ref {
                maps.insert(m.name.clone());
            }
        }
    }
    for f in c.env_from.iter().flatten() {
        if let Some(s) = &f.secret_ref {
            secrets.insert(s.name.clone());
        }
        if let Some(m) = &f.config_map_ref {
            maps.insert(m.name.clone());
        }
    }
    (secrets, maps)
}

/// The Secrets and ConfigMaps that were looked up; an absent entry was not found.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, an undefined reference is
/// left as written, `$$` is an escaped `$`.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

pub fn field(path: &str, pod: &PodFacts) -> std::result::Result<String, String> {
    let bracket = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|s| s.strip_prefix("['"))
            .and_then(|s| s.strip_suffix("']"))
    };
    if let Some(k) = bracket("metadata.labels") {
        return Ok(pod.labels.get(k).cloned().unwrap_or_default());
    }
    if let Some(k) = bracket("metadata.annotations") {
        return Ok(pod.annotations.get(k).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => pod.name.clone(),
        "metadata.namespace" => pod.namespace.clone(),
        "metadata.uid" => pod.uid.clone(),
        "spec.nodeName" => pod.node_name.clone(),
        "spec.serviceAccountName" => pod.service_account.clone(),
        "status.podIP" | "status.hostIP" => "127.0.0.1".to_string(),
        "status.podIPs" | "status.hostIPs" => "127.0.0.1".to_string(),
        other => return Err(format!("unsupported fieldRef {other:?}")),
    })
}

/// The container's environment, in order (`envFrom` first, then `env`), with references
/// resolved and `$(VAR)` expanded against the variables defined before.
///
/// Errors: the message a kubelet gives for `CreateContainerConfigError` (a missing Secret,
/// ConfigMap or key that is not optional, an unsupported field).
pub fn resolve_env(
    c: &Container,
    pod: &PodFacts,
    src: &Sources,
) -> std::result::Result<Vec<(String, String)>, String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for f in c.env_from.iter().flatten() {
        let prefix = f.prefix.clone().unwrap_or_default();
        let (data, what, name, optional) = if let Some(s) = &f.secret_ref {
            (
                src.secrets.get(&s.name),
                "secret",
                &s.name,
                s.optional.unwrap_or(false),
            )
        } else if let Some(m) = &f.config_map_ref {
            (
                src.config_maps.get(&m.name),
                "configmap",
                &m.name,
                m.optional.unwrap_or(false),
            )
        } else {
            continue;
        };
        match data {
            Some(d) => {
                for (k, v) in d {
                    set(&mut vars, format!("{prefix}{k}"), v.clone());
                }
            }
            None if optional => {}
            None => return Err(format!("{what} \"{name}\" not found")),
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(s) = &from.secret_key_ref {
                match src.secrets.get(&s.name).map(|d| d.get(&s.key)) {
                    Some(Some(v)) => v.clone(),
                    _ if s.optional.unwrap_or(false) => continue,
                    Some(None) => {
                        return Err(format!(
                            "couldn't find key {} in Secret {}/{}",
                            s.key, pod.namespace, s.name
                        ));
                    }
                    None => return Err(format!("secret \"{}\" not found", s.name)),
                }
            } else if let Some(m) = &from.config_map_key_ref {
                match src.config_maps.get(&m.name).map(|d| d.get(&m.key)) {
                    Some(Some(v)) => v.clone(),
                    _ if m.optional.unwrap_or(false) => continue,
                    Some(None) => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {}/{}",
                            m.key, pod.namespace, m.name
                        ));
                    }
                    None => return Err(format!("configmap \"{}\" not found", m.name)),
                }
            } else if let Some(f) = &from.field_ref {
                field(&f.field_path, pod)?
            } else {
                return Err(format!(
                    "env {}: resourceFieldRef is not supported by ferry-sim",
                    e.name
                ));
            }
        } else {
            expand(e.value.as_deref().unwrap_or(""), &vars)
        };
        set(&mut vars, e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .filter_map(|k| vars.get(&k).map(|v| (k.clone(), v.clone())))
        .collect())
}

/// `command` + `args`, expanded against the environment.
///
/// Errors: no `command` (the sim cannot read an image's entrypoint).
pub fn argv(c: &Container, env: &[(String, String)]) -> std::result::Result<Vec<String>, String> {
    let vars: BTreeMap<String, String> = env.iter().cloned().collect();
    let command = c.command.clone().unwrap_or_default();
    if command.is_empty() {
        return Err(format!(
            "container {:?} has no command; ferry-sim runs the command itself and cannot read the image's entrypoint",
            c.name
        ));
    }
    Ok(command
        .iter()
        .chain(c.args.iter().flatten())
        .map(|s| expand(s, &vars))
        .collect())
}

/// Finds `command0` on the host: `bin_dir/<basename>` first, then the path itself when it is
/// absolute and exists, then each directory of `path_var`.
pub fn find_executable(command0: &str, bin_dir: &Path, path_var: &str) -> Option<PathBuf> {
    let base = Path::new(command0).file_name()?;
    let in_bin = bin_dir.join(base);
    if in_bin.is_file() {
        return Some(in_bin);
    }
    if command0.contains('/') {
        let p = PathBuf::from(command0);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(path_var)
        .map(|d| d.join(base))
        .find(|p| p.is_file())
}

/// A container process, in its own process group so that everything it starts dies with it,
/// and the copy of its output into its log.
#[derive(Debug)]
pub struct Running {
    child: tokio::process::Child,
    pgid: Option<u32>,
    pump: Option<tokio::task::JoinHandle<()>>,
}

/// Starts `program` with exactly `env` (plus `PATH` and `HOME`), its stdout and stderr copied
/// to `log` with a time and stream per line, as a container runtime does (see `logs`).
///
/// Errors: the log or work directory cannot be created, the program cannot be started.
pub fn spawn(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    workdir: &Path,
    log: &Path,
    bin_dir: &Path,
) -> Result<Running> {
    std::fs::create_dir_all(workdir).map_err(|e| Error::io(workdir, e))?;
    let writer = crate::logs::Writer::open(log).map_err(|e| Error::io(log, e))?;
    let host_path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", format!("{}:{host_path}", bin_dir.display()))
        .env("HOME", workdir)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(workdir)
        .stdin(Stdio::null())
        // Pipes, as a runtime gives a container: the sim reads them and times each line. A
        // process outliving a killed sim gets EPIPE on its next write (its reader is gone);
        // the restarted sim runs the attempt again anyway.
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| Error::io(program, e))?;
    let pgid = child.id();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let pump = tokio::spawn(crate::logs::pump(stdout, stderr, writer));
    Ok(Running {
        child,
        pgid,
        pump: Some(pump),
    })
}

impl Running {
    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Kills what is left of the process group and waits (at most 5 s) until its output is all
    /// in the log: the kubelet reads the log's tail for the termination message, and a reader
    /// of the log who sees the container terminated must find all of it.
    pub async fn finish(mut self) {
        self.kill();
        if let Some(pump) = self.pump.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), pump).await;
        }
    }

    /// SIGKILL to the whole process group.
    pub fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `n` lines of a log file (for messages).
pub fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::{
        EnvVar, EnvVarSource, ObjectFieldSelector, SecretKeySelector,
    };

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expands_like_kubernetes() {
        let v = vars(&[("A", "1"), ("B", "two")]);
        assert_eq!(expand("$(A)-$(B)", &v), "1-two");
        assert_eq!(expand("$(C) stays", &v), "$(C) stays");
        assert_eq!(expand("$$(A) escaped", &v), "$(A) escaped");
        assert_eq!(expand("cost $5 $", &v), "cost $5 $");
        assert_eq!(expand("$(A", &v), "$(A");
        assert_eq!(expand("", &v), "");
    }

    fn env(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..EnvVar::default()
        }
    }

    fn secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.into(),
                    key: key.into(),
                    optional: Some(optional),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn field_env(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    fn pod() -> PodFacts {
        PodFacts {
            name: "job-a-x1".into(),
            namespace: "ns".into(),
            node_name: "sim-node".into(),
            ..PodFacts::default()
        }
    }

    #[test]
    fn resolves_values_secrets_and_fields_in_order() {
        let c = Container {
            name: "convert".into(),
            env: Some(vec![
                env("BUCKET", "staging"),
                secret_env("KEY", "s3", "accessKeyId", false),
                field_env("NS", "metadata.namespace"),
                field_env("POD", "metadata.name"),
                env("URL", "s3://$(BUCKET)/$(NS)"),
            ]),
            ..Container::default()
        };
        let mut src = Sources::default();
        src.secrets
            .insert("s3".into(), vars(&[("accessKeyId", "AK")]));
        let got = resolve_env(&c, &pod(), &src).unwrap();
        assert_eq!(
            got,
            vec![
                ("BUCKET".into(), "staging".into()),
                ("KEY".into(), "AK".into()),
                ("NS".into(), "ns".into()),
                ("POD".into(), "job-a-x1".into()),
                ("URL".into(), "s3://staging/ns".into()),
            ]
        );
        assert_eq!(references(&c).0, BTreeSet::from(["s3".to_string()]));
    }

    #[test]
    fn missing_references_fail_like_the_kubelet() {
        let c = |e: EnvVar| Container {
            name: "c".into(),
            env: Some(vec![e]),
            ..Container::default()
        };
        let none = Sources::default();
        assert_eq!(
            resolve_env(&c(secret_env("K", "s3", "k", false)), &pod(), &none).unwrap_err(),
            "secret \"s3\" not found"
        );
        assert_eq!(
            resolve_env(&c(secret_env("K", "s3", "k", true)), &pod(), &none).unwrap(),
            vec![]
        );
        let mut src = Sources::default();
        src.secrets.insert("s3".into(), vars(&[("other", "x")]));
        assert_eq!(
            resolve_env(&c(secret_env("K", "s3", "k", false)), &pod(), &src).unwrap_err(),
            "couldn't find key k in Secret ns/s3"
        );
        assert!(
            resolve_env(&c(field_env("X", "status.phase")), &pod(), &none)
                .unwrap_err()
                .contains("unsupported fieldRef")
        );
    }

    #[test]
    fn argv_needs_a_command_and_expands_it() {
        let c = Container {
            name: "c".into(),
            command: Some(vec!["ferry-controller".into(), "convert".into()]),
            args: Some(vec!["--out=$(OUT)".into()]),
            ..Container::default()
        };
        let env = vec![("OUT".to_string(), "s3://b".to_string())];
        assert_eq!(
            argv(&c, &env).unwrap(),
            vec!["ferry-controller", "convert", "--out=s3://b"]
        );
        let bare = Container {
            name: "c".into(),
            args: Some(vec!["x".into()]),
            ..Container::default()
        };
        assert!(argv(&bare, &env).unwrap_err().contains("has no command"));
    }

    #[test]
    fn finds_executables_in_bin_dir_before_path() {
        let dir = std::env::temp_dir().join(format!("ferry-sim-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tool"), b"#!/bin/sh\n").unwrap();
        assert_eq!(
            find_executable("/usr/local/bin/tool", &dir, "/usr/bin"),
            Some(dir.join("tool"))
        );
        assert_eq!(
            find_executable("sh", &dir, "/bin:/usr/bin").map(|p| p.is_file()),
            Some(true)
        );
        assert_eq!(find_executable("/nonexistent/nothing", &dir, "/bin"), None);
        assert_eq!(find_executable("no-such-tool-xyz", &dir, "/bin"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
