//! virt-launcher's part with a real hypervisor (`--guests qemu`): each VMI this node runs is a
//! `qemu-system-x86_64` process (TCG) built from its spec (`domain.rs`), its serial port kept as
//! the launcher pod's `guest-console-log` container keeps it (a log the kubelet serves through
//! `pods/log`), its guest agent asked over the virtio-serial channel as virt-launcher asks it
//! (`guest-sync`, then `guest-info`, `guest-get-osinfo` and `guest-network-get-interfaces`; the
//! interfaces again 10 s later, then at intervals doubling up to 120 s: the agent poller's
//! `pollInitialInterval` and `--qemu-agent-sys-interval`, `pkg/virt-launcher/virtwrap/agent-poller/`
//! and `cmd/virt-launcher/virt-launcher.go` in KubeVirt v1.8.3; libvirt syncs before each
//! command), and ACPI's power button pressed through QMP when the guest is asked to stop
//! (virt-launcher's `Shutdown` is libvirt's ACPI shutdown).
//!
//! What is known of each instance (`View`) is what the node's decisions read; the processes,
//! sockets and files are here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tracing::{info, warn};

use crate::domain::{self, Firmware, Machine, Nic};
use crate::netstat::{self, GuestInterface};

/// What the node knows of one instance's guest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    /// qemu was started for it.
    pub started: bool,
    /// qemu could not be started: why.
    pub failed_to_start: Option<String>,
    /// qemu exited, with this code (0: the guest powered off).
    pub exited: Option<i32>,
    /// The guest agent answered: its `guest-get-osinfo`, as `status.guestOSInfo` carries it.
    pub agent: Option<Value>,
    /// The domain's interfaces, as qemu was started with them.
    pub nics: Vec<Nic>,
    /// The pod network's name in the VMI's spec.
    pub pod_network: Option<String>,
    /// The guest's interfaces in the agent's last answer (none before one).
    pub interfaces: Vec<GuestInterface>,
    /// The power button was pressed.
    pub powerdown_sent: bool,
}

#[derive(Debug)]
struct Instance {
    view: Mutex<View>,
    pid: Mutex<Option<u32>>,
    dir: PathBuf,
}

impl Instance {
    /// What is known of it (a poisoned lock still holds the last view).
    fn known(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn exited(&self) -> bool {
        self.known().exited.is_some()
    }
}

/// What runs a VMI's guest on this node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GuestMode {
    /// Nothing: the sim pretends (Running after a delay, an agent that connects after another).
    #[default]
    Simulated,
    /// qemu, from the VMI's spec and its volumes' files.
    Qemu,
}

/// The instances this node runs, by VMI uid.
#[derive(Debug, Default)]
pub struct Instances {
    map: Mutex<HashMap<String, Arc<Instance>>>,
}

/// Where an instance's sockets live: short, for a Unix socket's path limit.
fn socket_dir(uid: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferry-qemu-{uid}"))
}

/// The serial console's log of an instance, under the node's volume directory.
pub fn console_log(volumes_root: &Path, namespace: &str, uid: &str) -> PathBuf {
    volumes_root
        .join("_guests")
        .join(namespace)
        .join(uid)
        .join("console.log")
}

impl Instances {
    /// What is known of instance `uid` (default: never started here).
    pub fn view(&self, uid: &str) -> View {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(uid).map(|i| i.known().clone()).unwrap_or_default()
    }

    /// Starts qemu for instance `uid` running `m` on `disks` (unless started already); its
    /// serial port goes to `console`. A start that fails is remembered in its view.
    pub fn start(&self, uid: &str, m: &Machine, disks: Vec<PathBuf>, console: &Path) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(uid) {
            return;
        }
        let dir = socket_dir(uid);
        let inst = Arc::new(Instance {
            view: Mutex::new(View {
                started: true,
                nics: m.nics.clone(),
                pod_network: m.pod_network.clone(),
                ..View::default()
            }),
            pid: Mutex::new(None),
            dir: dir.clone(),
        });
        map.insert(uid.to_owned(), inst.clone());
        drop(map);
        if let Err(e) = spawn(uid, &inst, m, disks, console) {
            warn!(vmi_uid = %uid, error = %e, "qemu not started");
            inst.known().failed_to_start = Some(e);
        }
    }

    /// Remembers that instance `uid` cannot run here, and why.
    pub fn refuse(&self, uid: &str, why: String) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(uid.to_owned()).or_insert_with(|| {
            Arc::new(Instance {
                view: Mutex::new(View {
                    started: true,
                    failed_to_start: Some(why),
                    ..View::default()
                }),
                pid: Mutex::new(None),
                dir: socket_dir(uid),
            })
        });
    }

    /// Presses the guest's power button (once).
    pub fn power_down(&self, uid: &str) {
        let Some(inst) = self.get(uid) else { return };
        {
            let mut v = inst.known();
            if v.powerdown_sent || v.exited.is_some() {
                return;
            }
            v.powerdown_sent = true;
        }
        let qmp = inst.dir.join("qmp.sock");
        tokio::spawn(async move {
            if let Err(e) = press_power_button(&qmp).await {
                warn!(error = %e, "QMP system_powerdown");
            }
        });
    }

    /// Kills instance `uid`'s qemu and forgets it.
    pub fn kill(&self, uid: &str) {
        let inst = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        if let Some(inst) = inst {
            kill_pid(&inst);
            let _ = std::fs::remove_dir_all(&inst.dir);
        }
    }

    /// Kills every instance (the node stops).
    pub fn kill_all(&self) {
        let uids: Vec<String> = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for uid in uids {
            self.kill(&uid);
        }
    }

    fn get(&self, uid: &str) -> Option<Arc<Instance>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }
}

fn kill_pid(inst: &Instance) {
    if let Some(pid) = inst.pid.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn spawn(
    uid: &str,
    inst: &Arc<Instance>,
    m: &Machine,
    disks: Vec<PathBuf>,
    console: &Path,
) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(&inst.dir);
    std::fs::create_dir_all(&inst.dir).map_err(|e| format!("{}: {e}", inst.dir.display()))?;
    for d in &disks {
        if !d.is_file() {
            return Err(format!("volume file {} is missing", d.display()));
        }
    }
    let files = domain::Files {
        disks,
        agent: inst.dir.join("qga.sock"),
        qmp: inst.dir.join("qmp.sock"),
        vars: inst.dir.join("vars.fd"),
    };
    if let Firmware::Efi { secure_boot } = m.firmware {
        let vars = if secure_boot {
            domain::OVMF_VARS_MS
        } else {
            domain::OVMF_VARS
        };
        std::fs::copy(vars, &files.vars).map_err(|e| format!("{vars}: {e}"))?;
    }
    if let Some(dir) = console.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let writer = crate::logs::Writer::open(console).map_err(|e| format!("console log: {e}"))?;
    let args = domain::argv(m, &files);
    // qemu dies with the sim even when the sim is SIGKILLed (as the tests' guards stop it):
    // util-linux's setpriv sets the parent-death signal, then becomes qemu (same pid).
    let mut child = tokio::process::Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "qemu-system-x86_64"])
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("qemu-system-x86_64: {e}"))?;
    info!(vmi_uid = %uid, args = %args.join(" "), "qemu started");
    *inst.pid.lock().unwrap_or_else(|e| e.into_inner()) = child.id();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    tokio::spawn(crate::logs::pump(
        stdout,
        None::<tokio::process::ChildStderr>,
        writer,
    ));
    let (inst_exit, uid_exit) = (inst.clone(), uid.to_owned());
    tokio::spawn(async move {
        let mut err = String::new();
        if let Some(mut e) = stderr {
            use tokio::io::AsyncReadExt;
            let _ = e.read_to_string(&mut err).await;
        }
        let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(-1);
        info!(vmi_uid = %uid_exit, code, stderr = %err.trim(), "qemu exited");
        inst_exit
            .pid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        inst_exit.known().exited = Some(code);
    });
    let inst_agent = inst.clone();
    tokio::spawn(async move { poll_agent(inst_agent).await });
    Ok(())
}

/// The agent poller's first interval after the first round, doubled after each round
/// (`pollInitialInterval`).
const POLL_FIRST: Duration = Duration::from_secs(10);
/// Its longest (`--qemu-agent-sys-interval`'s default).
const POLL_MAX: Duration = Duration::from_secs(120);

/// Asks the guest agent while qemu runs: until it answers `guest-info` and the OS info (the
/// channel connected), then the guest's interfaces on the agent poller's schedule.
async fn poll_agent(inst: Arc<Instance>) {
    let sock = inst.dir.join("qga.sock");
    let mut id: u64 = 1;
    let mut every = POLL_FIRST;
    loop {
        if inst.exited() {
            return;
        }
        if let Ok(stream) = UnixStream::connect(&sock).await {
            let mut agent = Agent::new(stream);
            while agent.sync(&inst, &mut id).await {
                let answered = inst.known().agent.is_some();
                if !answered {
                    if !first_answers(&mut agent, &inst).await {
                        break;
                    }
                } else if !ask_interfaces(&mut agent, &inst).await {
                    break;
                }
                tokio::time::sleep(every).await;
                every = (every * 2).min(POLL_MAX);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `guest-info`, the OS info and the interfaces, the first time: false when the agent did not
/// answer the first two.
async fn first_answers(agent: &mut Agent, inst: &Instance) -> bool {
    let answered = |r: &Value| r.get("return").is_some();
    let info = agent.ask(&json!({"execute": "guest-info"}), answered).await;
    let os = agent
        .ask(&json!({"execute": "guest-get-osinfo"}), answered)
        .await;
    let (Ok(Some(info)), Ok(Some(os))) = (info, os) else {
        return false;
    };
    let interfaces = interfaces(agent).await.ok().flatten();
    let version = info["return"]["version"].as_str().unwrap_or_default();
    let os_info = guest_os_info(&os["return"]);
    info!(agent_version = %version, os = %os_info, interfaces = ?interfaces, "guest agent answered");
    let mut v = inst.known();
    v.agent = Some(os_info);
    v.interfaces = interfaces.unwrap_or_default();
    true
}

/// The interfaces again: false when the channel closed.
async fn ask_interfaces(agent: &mut Agent, inst: &Instance) -> bool {
    match interfaces(agent).await {
        Ok(Some(now)) => {
            let mut v = inst.known();
            if v.interfaces != now {
                info!(interfaces = ?now, "guest agent: the guest's interfaces");
                v.interfaces = now;
            }
            true
        }
        // No answer, or one libvirt would not take: the last answer stands.
        Ok(None) => true,
        Err(_) => false,
    }
}

/// `guest-network-get-interfaces`, read as virt-launcher stores it (`None`: no answer, or an
/// error).
async fn interfaces(agent: &mut Agent) -> std::io::Result<Option<Vec<GuestInterface>>> {
    let answer = agent
        .ask(&json!({"execute": "guest-network-get-interfaces"}), |r| {
            r.get("return").is_some() || r.get("error").is_some()
        })
        .await?;
    Ok(answer.as_ref().and_then(netstat::guest_interfaces))
}

/// `guest-get-osinfo`'s answer as virt-handler writes `status.guestOSInfo`
/// (`VirtualMachineInstanceGuestOSInfo`). Pure.
pub fn guest_os_info(os: &Value) -> Value {
    let s = |k: &str| os.get(k).and_then(Value::as_str).unwrap_or_default();
    json!({
        "name": s("name"),
        "kernelRelease": s("kernel-release"),
        "version": s("version"),
        "prettyName": s("pretty-name"),
        "versionId": s("version-id"),
        "kernelVersion": s("kernel-version"),
        "machine": s("machine"),
        "id": s("id"),
    })
}

/// One connection to the guest agent: a JSON request per line, answers per line.
struct Agent {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    buf: Vec<u8>,
}

impl Agent {
    fn new(stream: UnixStream) -> Agent {
        let (r, w) = stream.into_split();
        Agent {
            reader: BufReader::new(r),
            writer: w,
            buf: Vec::new(),
        }
    }

    /// `guest-sync` until the agent answers it (a guest whose agent is not up yet swallows the
    /// request): false when the channel closed or qemu exited.
    async fn sync(&mut self, inst: &Instance, id: &mut u64) -> bool {
        loop {
            *id += 1;
            let want = *id;
            let synced = self
                .ask(
                    &json!({"execute": "guest-sync", "arguments": {"id": want}}),
                    |r| r.get("return").and_then(Value::as_u64) == Some(want),
                )
                .await;
            match synced {
                Ok(Some(_)) => return true,
                Ok(None) if !inst.exited() => {}
                _ => return false,
            }
        }
    }

    /// Sends `req` and reads answers for 2 s until one that `wanted` accepts; `None` when none
    /// came (a guest whose agent is not up yet swallows the request).
    async fn ask(
        &mut self,
        req: &Value,
        wanted: impl Fn(&Value) -> bool,
    ) -> std::io::Result<Option<Value>> {
        let mut line = serde_json::to_vec(req).unwrap_or_default();
        line.push(b'\n');
        self.writer.write_all(&line).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            // `read_until` keeps what it read in `buf` when the timeout drops it.
            let read =
                tokio::time::timeout_at(deadline, self.reader.read_until(b'\n', &mut self.buf))
                    .await;
            match read {
                Err(_) => return Ok(None),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(0)) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "agent channel closed",
                    ));
                }
                Ok(Ok(_)) => {
                    let text = std::mem::take(&mut self.buf);
                    // A guest-sync-delimited 0xff, or noise before the agent started: skipped.
                    let text: Vec<u8> = text.into_iter().filter(|b| *b != 0xff).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&text)
                        && wanted(&v)
                    {
                        return Ok(Some(v));
                    }
                }
            }
        }
    }
}

/// QMP: the greeting, capabilities, then `system_powerdown` (the ACPI power button).
async fn press_power_button(qmp: &Path) -> std::io::Result<()> {
    let stream = UnixStream::connect(qmp).await?;
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let _greeting = lines.next_line().await?;
    w.write_all(b"{\"execute\":\"qmp_capabilities\"}\n").await?;
    let _ = lines.next_line().await?;
    w.write_all(b"{\"execute\":\"system_powerdown\"}\n").await?;
    let _ = lines.next_line().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_agents_os_info_is_written_as_virt_handler_writes_it() {
        let os = json!({"id": "debian", "name": "Debian GNU/Linux", "pretty-name": "Debian GNU/Linux 12 (bookworm)",
                        "version": "12 (bookworm)", "version-id": "12", "kernel-release": "6.1.0-28-cloud-amd64",
                        "kernel-version": "#1 SMP", "machine": "x86_64"});
        let v = guest_os_info(&os);
        assert_eq!(v["prettyName"], "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(v["kernelRelease"], "6.1.0-28-cloud-amd64");
        assert_eq!(v["versionId"], "12");
        assert_eq!(v["id"], "debian");
    }
}
