//! The cockpit end to end, side by side with kubectl, against the lab: N migrations (10,000 by
//! default, `FERRY_BENCH_N`) with realistic status over 20 waves, a writer patching 100 statuses
//! a second. Prints a table with the target beside each figure and writes it to
//! `target/bench/cockpit-e2e.{txt,json}`.
//!
//! The cockpit runs in tmux at 200×60 with `FERRY_FRAME_LOG`: one line per frame with its draw
//! time and the resourceVersion of each row shown, which is how a status patch's response is
//! matched with the first frame that shows it. Its API requests over five minutes are read from
//! the apiserver's metrics: the cockpit runs as `--as ferry-bench-cockpit`, which a FlowSchema of
//! its own classifies, so `apiserver_flowcontrol_dispatched_requests_total` counts it alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use ferry_crds::VirtualMachineMigration;
use ferry_harness::{Lab, repo_root};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

const SESSION: &str = "ferry-bench-e2e";
const USER: &str = "ferry-bench-cockpit";

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn kubectl(kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut c = Command::new(repo_root().join("target/lab/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kc)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let Some(s) = stdin {
        c.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cockpit in tmux; returns its pid.
fn start_cockpit(kc: &Path, log: &Path) -> u32 {
    let _ = tmux(&["kill-session", "-t", SESSION]);
    let _ = std::fs::remove_file(log);
    let cmd = format!(
        "FERRY_FRAME_LOG={} exec {} --kubeconfig {} -A --as {USER}",
        log.display(),
        env!("CARGO_BIN_EXE_ferry"),
        kc.display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        SESSION,
        "-x",
        "200",
        "-y",
        "60",
        &cmd,
    ]);
    tmux(&["display", "-p", "-t", SESSION, "#{pane_pid}"])
        .trim()
        .parse()
        .expect("pane pid")
}

fn frames(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The last frame logged (read from the end of the file).
fn last_frame(log: &Path) -> Option<Value> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(256 << 10)))
        .ok()?;
    let mut buf = String::new();
    f.read_to_string(&mut buf).ok()?;
    buf.lines().rev().find_map(|l| serde_json::from_str(l).ok())
}

/// Microseconds since the epoch of the first frame showing all `n` migrations live.
fn wait_full_board(log: &Path, n: usize, timeout: Duration) -> u128 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(f) = frames(log)
            .into_iter()
            .find(|f| f["migrations"].as_u64() == Some(n as u64) && f["live"] == true)
        {
            return f["at_us"].as_u64().unwrap_or(0).into();
        }
        assert!(
            Instant::now() < deadline,
            "no full board within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Microseconds since the epoch of the first frame showing a migration's row (the list may be
/// under way).
fn first_rows_at(log: &Path) -> u128 {
    frames(log)
        .into_iter()
        .find(|f| f["migrations"].as_u64().is_some_and(|m| m > 0))
        .and_then(|f| f["at_us"].as_u64())
        .unwrap_or(0)
        .into()
}

/// utime + stime of a process, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Summed over a process's threads, from their `schedstat`: (ns on a CPU, ns runnable but
/// waiting for one, times run).
fn sched(pid: u32) -> (f64, f64, f64) {
    let mut out = (0.0, 0.0, 0.0);
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        let f: Vec<f64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [cpu, wait, n] = f[..] {
            out = (out.0 + cpu, out.1 + wait, out.2 + n);
        }
    }
    out
}

fn status_kib(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The apiserver's counters we read: requests the cockpit's FlowSchema dispatched, and every
/// request to our group and to Events by verb.
fn metrics(kc: &Path) -> HashMap<String, f64> {
    let text = kubectl(kc, &["get", "--raw", "/metrics"], None);
    let mut out = HashMap::new();
    for l in text.lines() {
        let Some((k, v)) = l.rsplit_once(' ') else {
            continue;
        };
        let v: f64 = v.parse().unwrap_or(0.0);
        if k.starts_with("apiserver_flowcontrol_dispatched_requests_total")
            && k.contains(&format!("flow_schema=\"{USER}\""))
        {
            *out.entry("cockpit".into()).or_default() += v;
        }
        if k.starts_with("apiserver_request_total{")
            && (k.contains("group=\"migration.platform.example\"")
                || k.contains("group=\"events.k8s.io\""))
        {
            let verb = k
                .split("verb=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or("?");
            let sub = k.contains("subresource=\"status\"");
            *out.entry(format!("{verb}{}", if sub { "/status" } else { "" }))
                .or_default() += v;
        }
    }
    out
}

/// (response time µs, namespace/name, resourceVersion) of patches whose row is on screen.
type Samples = Arc<Mutex<Vec<(u128, String, u64)>>>;

/// (namespace/name, resourceVersion) → when a plain watch in this process received it, µs.
type Seen = Arc<Mutex<HashMap<(String, u64), u128>>>;
/// Every status patch's round trip in ms (request sent → response read): how busy the
/// apiserver is, which bounds how soon any watch can show a change.
type RoundTrips = Arc<Mutex<Vec<f64>>>;

/// A second client of the same apiserver: a bare kube-runtime watcher of every migration in
/// this process, no cockpit. When it receives a change is what the apiserver and this
/// machine's scheduling give any watch, the floor under the cockpit's own delivery.
/// `lists` counts its lists: the first, then every re-list after the apiserver ended its watch
/// (a re-list of every migration is a long gap in delivery).
fn reference_watch(
    client: kube::Client,
    seen: Seen,
    lists: Arc<std::sync::atomic::AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    tokio::spawn(async move {
        let api = Api::<VirtualMachineMigration>::all(client);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Init) = ev {
                lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev {
                let at = now_us();
                let key = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
                let rv = o
                    .resource_version()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0);
                seen.lock().unwrap().insert((key, rv), at);
            }
        }
    })
}

/// 100 status patches a second on random migrations, one in ten on a row on screen; returns
/// [`Samples`] of the ones on screen.
async fn writer(
    api_of: impl Fn(&str) -> Api<VirtualMachineMigration>,
    all: &[(String, String)],
    log: &Path,
    secs: u64,
    samples: &Samples,
    round_trips: &RoundTrips,
) -> usize {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut seed: u64 = 7;
    let mut sent = 0;
    let mut tasks = vec![];
    let mut on_screen: Vec<String> = vec![];
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        if sent % 100 == 0 {
            on_screen = last_frame(log)
                .and_then(|f| f["rows"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|r| r[0].as_str().map(str::to_owned))
                .collect();
        }
        let visible = sent % 10 == 0 && !on_screen.is_empty();
        let (ns, name) = if visible {
            let k = &on_screen[(seed >> 33) as usize % on_screen.len()];
            let (ns, name) = k.split_once('/').unwrap();
            (ns.to_owned(), name.to_owned())
        } else {
            all[(seed >> 33) as usize % all.len()].clone()
        };
        let api = api_of(&ns);
        let samples = samples.clone();
        let round_trips = round_trips.clone();
        let pct = (seed >> 40) % 100;
        tasks.push(tokio::spawn(async move {
            let body = json!({"status": {"progress": {"percent": pct as f64}, "message": format!("bench {pct}")}});
            let asked = now_us();
            let answer = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
                .await;
            round_trips
                .lock()
                .unwrap()
                .push((now_us() - asked) as f64 / 1000.0);
            if let Ok(o) = answer
                && visible
            {
                let rv: u64 = o.resource_version().and_then(|r| r.parse().ok()).unwrap_or(0);
                samples
                    .lock()
                    .unwrap()
                    .push((now_us(), format!("{ns}/{name}"), rv));
            }
        }));
        sent += 1;
    }
    for t in tasks {
        let _ = t.await;
    }
    sent
}

/// Event → screen: for each patch of a row on screen, the first frame after which shows that
/// row at (or past) the patched resourceVersion; and when the cockpit's loop received that
/// change from its watch (a frame's `arrived`), which splits the time into the apiserver's
/// delivery and the cockpit's own share, which splits again at the start of the frame's draw
/// (before it: the queue, `update` and the frame pacing).
struct Latencies {
    total: Vec<f64>,
    delivery: Vec<f64>,
    cockpit: Vec<f64>,
    before_draw: Vec<f64>,
    draw: Vec<f64>,
}

/// [`Latencies`] of `samples`, in ms.
fn latencies(log: &Path, samples: &[(u128, String, u64)]) -> Latencies {
    let fs = frames(log);
    let rv_of = |v: &Value| v.as_str().and_then(|v| v.parse::<u64>().ok());
    // key → (rv, received µs), in order of arrival.
    let mut arrivals: HashMap<String, Vec<(u64, u128)>> = HashMap::new();
    for f in &fs {
        for a in f["arrived"].as_array().into_iter().flatten() {
            if let (Some(k), Some(rv), Some(at)) = (a[0].as_str(), rv_of(&a[1]), a[2].as_u64()) {
                arrivals
                    .entry(k.to_owned())
                    .or_default()
                    .push((rv, at.into()));
            }
        }
    }
    let (mut total, mut delivery, mut cockpit) = (vec![], vec![], vec![]);
    let (mut before_draw, mut draw) = (vec![], vec![]);
    for (at, key, rv) in samples {
        let shown = fs.iter().find(|f| {
            f["rows"].as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r[0].as_str() == Some(key) && rv_of(&r[1]) >= Some(*rv))
            })
        });
        let Some(f) = shown else { continue };
        let t: u128 = f["at_us"].as_u64().unwrap_or(0).into();
        total.push((t as f64 - *at as f64) / 1000.0);
        if let Some((_, got)) = arrivals
            .get(key)
            .and_then(|v| v.iter().find(|(r, _)| *r >= *rv))
        {
            delivery.push((*got as f64 - *at as f64) / 1000.0);
            cockpit.push((t as f64 - *got as f64) / 1000.0);
            let d = f["draw_us"].as_f64().unwrap_or(0.0);
            before_draw.push((t as f64 - d - *got as f64) / 1000.0);
            draw.push(d / 1000.0);
        }
    }
    Latencies {
        total: sorted(total),
        delivery: sorted(delivery),
        cockpit: sorted(cockpit),
        before_draw: sorted(before_draw),
        draw: sorted(draw),
    }
}

/// One field (µs in the log) of the frames drawn between `from_us` and `to_us`, in ms.
fn frame_ms(log: &Path, field: &str, filtered: bool, from_us: u128, to_us: u128) -> Vec<f64> {
    frames(log)
        .iter()
        .filter(|f| {
            let at: u128 = f["at_us"].as_u64().unwrap_or(0).into();
            at >= from_us && at <= to_us && (f["filter"].as_str() != Some("")) == filtered
        })
        .filter_map(|f| f[field].as_f64())
        .map(|us| us / 1000.0)
        .collect()
}

/// Frames drawn in the window that took over 4 ms, and of their summed draw time the share
/// on a CPU and the share waiting for one (the rest: blocked, writing to the terminal).
fn slow_frames(log: &Path, filtered: bool, from_us: u128, to_us: u128) -> (usize, f64, f64) {
    let (mut n, mut draw, mut cpu, mut runq) = (0, 0.0, 0.0, 0.0);
    for f in frames(log) {
        let at: u128 = f["at_us"].as_u64().unwrap_or(0).into();
        let d = f["draw_us"].as_f64().unwrap_or(0.0);
        if at >= from_us
            && at <= to_us
            && (f["filter"].as_str() != Some("")) == filtered
            && d > 4000.0
        {
            n += 1;
            draw += d;
            cpu += f["cpu_us"].as_f64().unwrap_or(0.0);
            runq += f["runq_us"].as_f64().unwrap_or(0.0);
        }
    }
    let share = |x: f64| if draw > 0.0 { x * 100.0 / draw } else { 0.0 };
    (n, share(cpu), share(runq))
}

/// measure, ferry, kubectl, target, met, figure ÷ target.
type TableRow = (String, String, String, String, Option<bool>, Option<f64>);

struct Table(Vec<TableRow>);

impl Table {
    fn row(&mut self, what: &str, ferry: String, kubectl: String, target: &str, ok: Option<bool>) {
        self.0
            .push((what.into(), ferry, kubectl, target.into(), ok, None));
    }
    /// A row with a ceiling: met when `value ≤ ceiling`, and the ratio is kept beside it.
    fn ceiling(&mut self, what: &str, value: f64, unit: &str, ceiling: f64) {
        self.0.push((
            what.into(),
            format!("{value:.2} {unit}"),
            "-".into(),
            format!("≤ {ceiling} {unit}"),
            Some(value <= ceiling),
            Some(value / ceiling),
        ));
    }
    fn text(&self) -> String {
        let mut s = format!(
            "{:<56} {:>16} {:>14} {:>22}  {:<3} {}\n",
            "measure", "ferry", "kubectl", "target", "met", "÷ target"
        );
        for (w, f, k, t, ok, ratio) in &self.0 {
            let met = match ok {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            let ratio = ratio.map_or(String::new(), |r| format!("{r:.2}×"));
            s.push_str(&format!(
                "{w:<56} {f:>16} {k:>14} {t:>22}  {met:<3} {ratio}\n"
            ));
        }
        s
    }
    fn json(&self) -> Value {
        json!(self.0.iter().map(|(w, f, k, t, ok, ratio)| json!({"measure": w, "ferry": f, "kubectl": k, "target": t, "met": ok, "ratio_to_target": ratio})).collect::<Vec<_>>())
    }
}

/// The 1-minute load average.
fn load1() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_owned()
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("FERRY_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    // A shorter run (smoke test of the bench itself): FERRY_BENCH_WRITER_SECS, FERRY_BENCH_WINDOW_SECS.
    let env_secs = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let writer_secs = env_secs("FERRY_BENCH_WRITER_SECS", 60);
    let window = env_secs("FERRY_BENCH_WINDOW_SECS", 300);
    let root = repo_root();
    let out_dir = root.join("target/bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    let dir = root.join("target/lab/bench-e2e");
    let _ = std::fs::remove_dir_all(&dir);
    println!("cockpit e2e: starting a lab in {}", dir.display());
    let lab = Lab::start(&dir, 1).expect("lab");
    let kc = lab.info.kubeconfig.clone();
    kubectl(
        &kc,
        &[
            "apply",
            "--server-side",
            "-f",
            &root.join("deploy/crds").to_string_lossy(),
        ],
        None,
    );
    kubectl(
        &kc,
        &["wait", "--for=condition=established", "crd", "--all"],
        None,
    );
    // The cockpit's own identity and FlowSchema, so the apiserver counts its requests apart.
    kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&format!(
            r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {USER}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {USER}}}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {USER}}}
spec:
  priorityLevelConfiguration: {{name: workload-low}}
  matchingPrecedence: 500
  rules:
  - subjects: [{{kind: User, user: {{name: {USER}}}}}]
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
"#
        )),
    );
    let client = lab.client().await.expect("client");

    // --- populate ---
    let objs = support::many(n, 20);
    let keys: Vec<(String, String)> = objs
        .iter()
        .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
        .collect();
    let shift = k8s_openapi::jiff::Timestamp::now().as_second() - support::now().as_second();
    let t = Instant::now();
    support::populate::populate(&client, objs, vec![], 32, shift)
        .await
        .expect("populate");
    println!(
        "populated {n} migrations with status in {:.0} s",
        t.elapsed().as_secs_f64()
    );

    let mut table = Table(vec![]);
    // --- first full board: kubectl vs ferry ---
    let mut kubectl_s = vec![];
    for _ in 0..3 {
        let t = Instant::now();
        let names = kubectl(&kc, &["get", "vmm", "-A", "-o", "name"], None);
        kubectl_s.push(t.elapsed().as_secs_f64());
        assert_eq!(names.lines().count(), n);
    }
    let log = out_dir.join("cockpit-e2e-frames.jsonl");
    let mut ferry_s = vec![];
    let mut first_s = vec![];
    let mut pid = 0;
    let mut m0 = HashMap::new();
    let mut launched = Instant::now();
    for run in 0..3 {
        if run == 2 {
            // The five minutes counted start with the last launch: its lists and watches count.
            m0 = metrics(&kc);
            launched = Instant::now();
        }
        let started = now_us();
        pid = start_cockpit(&kc, &log);
        let full = wait_full_board(&log, n, Duration::from_secs(120));
        ferry_s.push((full - started) as f64 / 1e6);
        first_s.push((first_rows_at(&log).saturating_sub(started)) as f64 / 1e6);
        if run < 2 {
            let _ = tmux(&["kill-session", "-t", SESSION]);
        }
    }
    let (k, f) = (pct(&sorted(kubectl_s), 0.5), pct(&sorted(ferry_s), 0.5));
    let first = pct(&sorted(first_s), 0.5);
    table.row(
        &format!("first rows, {n} migrations (median of 3)"),
        format!("{first:.2} s"),
        format!("{k:.2} s"),
        "≤ 0.5 s",
        Some(first <= 0.5),
    );
    table.row(
        &format!("first full board, {n} migrations (median of 3)"),
        format!("{f:.2} s"),
        format!("{k:.2} s"),
        "≤ 1.3× kubectl's list",
        Some(f <= 1.3 * k),
    );
    let rss_listed = status_kib(pid, "VmRSS");

    // --- writer, no filter ---
    let ns_api = |ns: &str| Api::<VirtualMachineMigration>::namespaced(client.clone(), ns);
    let samples = Arc::new(Mutex::new(vec![]));
    let seen: Seen = Arc::default();
    let lists = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let round_trips: RoundTrips = Arc::default();
    let reference = reference_watch(client.clone(), seen.clone(), lists.clone());
    // Its initial list (every migration, not counted) is done well within this.
    std::thread::sleep(Duration::from_secs(10));
    let mut loads = vec![load1()];
    let (c0, w0, s0) = (cpu_secs(pid), now_us(), sched(pid));
    let sent1 = writer(ns_api, &keys, &log, writer_secs, &samples, &round_trips).await;
    let (c1, w1, s1) = (cpu_secs(pid), now_us(), sched(pid));
    loads.push(load1());
    // Every patch of a row on screen is drawn before the filter hides those rows (or, after
    // a timeout, counted as it is).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let all: Vec<_> = samples.lock().unwrap().clone();
        if latencies(&log, &all).total.len() >= all.len() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // --- writer, filtered ---
    tmux(&["send-keys", "-t", SESSION, "/"]);
    tmux(&["send-keys", "-t", SESSION, "-l", "phase:Importing"]);
    tmux(&["send-keys", "-t", SESSION, "Enter"]);
    std::thread::sleep(Duration::from_secs(1));
    let w2 = now_us();
    let sent2 = writer(ns_api, &keys, &log, writer_secs, &samples, &round_trips).await;
    let w3 = now_us();
    loads.push(load1());
    tmux(&["send-keys", "-t", SESSION, "Escape"]);
    // --- idle ---
    std::thread::sleep(Duration::from_secs(5));
    let c_idle0 = cpu_secs(pid);
    std::thread::sleep(Duration::from_secs(writer_secs));
    let c_idle1 = cpu_secs(pid);
    let load_cpu = (c1 - c0) / ((w1 - w0) as f64 / 1e6) * 100.0;
    let idle_cpu = (c_idle1 - c_idle0) / writer_secs as f64 * 100.0;
    // The rest of five minutes since launch, then the apiserver's count.
    let rest = Duration::from_secs(window).saturating_sub(launched.elapsed());
    std::thread::sleep(rest);
    let m1 = metrics(&kc);
    let peak = status_kib(pid, "VmHWM");
    let rss_end = status_kib(pid, "VmRSS");

    reference.abort();
    let all: Vec<_> = samples.lock().unwrap().clone();
    let l = latencies(&log, &all);
    let reference: Vec<f64> = {
        let seen = seen.lock().unwrap();
        sorted(
            all.iter()
                .filter_map(|(at, key, rv)| {
                    seen.get(&(key.clone(), *rv))
                        .map(|t| (*t as f64 - *at as f64) / 1000.0)
                })
                .collect(),
        )
    };
    // The samples, for a closer look: response µs, key, resourceVersion, the plain watch's µs.
    let lines: Vec<String> = {
        let seen = seen.lock().unwrap();
        all.iter()
            .map(|(at, key, rv)| {
                json!({"at_us": at, "key": key, "rv": rv, "reference_us": seen.get(&(key.clone(), *rv))})
                    .to_string()
            })
            .collect()
    };
    std::fs::write(out_dir.join("cockpit-e2e-samples.jsonl"), lines.join("\n")).unwrap();
    let p50_99 = |v: &[f64]| format!("{:.1}/{:.1} ms", pct(v, 0.5), pct(v, 0.99));
    table.row(
        &format!("event → screen p50 ({} patches shown)", l.total.len()),
        format!("{:.1} ms", pct(&l.total, 0.5)),
        "-".into(),
        "",
        None,
    );
    table.ceiling(
        "event → screen p99 (wall)",
        pct(&l.total, 0.99),
        "ms",
        100.0,
    );
    // Where the time goes: the apiserver delivering the change to the cockpit's watch, then
    // the cockpit's loop: the channel, `update` and the frame pacing before the draw, then
    // the draw.
    let split: [(String, &[f64]); 5] = [
        (
            format!("… patch → in the cockpit p50/p99 ({})", l.delivery.len()),
            &l.delivery,
        ),
        (
            format!(
                "… patch → a plain watch in the bench p50/p99 ({})",
                reference.len()
            ),
            &reference,
        ),
        ("… in the cockpit → on screen p50/p99".into(), &l.cockpit),
        (
            "…… of which before the draw (queue, pacing)".into(),
            &l.before_draw,
        ),
        ("…… of which the draw".into(), &l.draw),
    ];
    for (what, v) in split {
        table.row(&what, p50_99(v), "-".into(), "", None);
    }
    let trips = sorted(round_trips.lock().unwrap().clone());
    table.row(
        &format!(
            "… a status patch's round trip p50/p99 ({}; the apiserver's pace)",
            trips.len()
        ),
        p50_99(&trips),
        "-".into(),
        "",
        None,
    );
    table.row(
        "… re-lists of the plain watch (its first list not counted)",
        format!(
            "{}",
            lists
                .load(std::sync::atomic::Ordering::Relaxed)
                .saturating_sub(1)
        ),
        "-".into(),
        "",
        None,
    );
    table.row(
        "machine load average (1 min) at the stream's start/middle/end",
        loads.join("/"),
        "-".into(),
        "",
        None,
    );
    for (label, filtered, from, to) in [
        ("no filter", false, w0, w1),
        ("filter phase:Importing", true, w2, w3),
    ] {
        let ms = |field| sorted(frame_ms(&log, field, filtered, from, to));
        let v = ms("draw_us");
        table.row(
            &format!("frame 200×60, {label}: wall p50 ({} frames)", v.len()),
            format!("{:.2} ms", pct(&v, 0.5)),
            "-".into(),
            "",
            None,
        );
        table.ceiling(
            &format!("frame 200×60, {label}: wall p99"),
            pct(&v, 0.99),
            "ms",
            4.0,
        );
        // The drawing thread's own CPU time per frame (CLOCK_THREAD_CPUTIME_ID): the cockpit's
        // work, apart from the time other processes held the CPUs.
        let (render, cpu, runq) = (ms("render_us"), ms("cpu_us"), ms("runq_us"));
        table.row(
            &format!("frame 200×60, {label}: thread CPU p50"),
            format!("{:.2} ms", pct(&cpu, 0.5)),
            "-".into(),
            "",
            None,
        );
        table.ceiling(
            &format!("frame 200×60, {label}: thread CPU p99"),
            pct(&cpu, 0.99),
            "ms",
            4.0,
        );
        let (slow, on_cpu, waiting) = slow_frames(&log, filtered, from, to);
        table.row(
            &format!("… frames over 4 ms wall: {slow}; of their time"),
            format!("{on_cpu:.0}% CPU, {waiting:.0}% runq"),
            "-".into(),
            "",
            None,
        );
        table.row(
            "… p99 of: state → cells (wall) / waiting for a CPU",
            format!("{:.2}/{:.2} ms", pct(&render, 0.99), pct(&runq, 0.99)),
            "-".into(),
            "",
            None,
        );
        table.row(
            "… p50/p99 of applying the actions before a frame",
            p50_99(&ms("update_us")),
            "-".into(),
            "",
            None,
        );
    }
    table.row(
        "CPU idle (% of a core)",
        format!("{idle_cpu:.2} %"),
        "-".into(),
        "< 1 %",
        Some(idle_cpu < 1.0),
    );
    table.row(
        &format!(
            "CPU under {:.0} patches/s",
            sent1 as f64 / writer_secs as f64
        ),
        format!("{load_cpu:.1} %"),
        "-".into(),
        "",
        None,
    );
    // How long the cockpit's threads, once woken, waited for a CPU under the stream: the
    // machine's share of any latency.
    let (cpu, wait, runs) = (s1.0 - s0.0, s1.1 - s0.1, s1.2 - s0.2);
    table.row(
        "… its threads' wait for a CPU, per run / total",
        format!(
            "{:.2} ms / {:.0}% of runnable",
            wait / runs.max(1.0) / 1e6,
            wait * 100.0 / (cpu + wait).max(1.0)
        ),
        "-".into(),
        "",
        None,
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    table.row(
        "machine load average (1/5/15 min) at the end",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        "-".into(),
        "",
        None,
    );
    table.row(
        "RSS peak (VmHWM)",
        format!("{:.0} MiB", peak / 1024.0),
        "-".into(),
        "< 150 MB",
        Some(peak * 1024.0 < 150e6),
    );
    table.row(
        "RSS after the list / at the end",
        format!("{:.0}/{:.0} MiB", rss_listed / 1024.0, rss_end / 1024.0),
        "-".into(),
        "",
        None,
    );
    let d = |k: &str| m1.get(k).copied().unwrap_or(0.0) - m0.get(k).copied().unwrap_or(0.0);
    let cockpit = d("cockpit");
    table.row(
        &format!("API requests of the cockpit, {window} s (FlowSchema)"),
        format!("{cockpit:.0}"),
        "-".into(),
        "lists and watches only",
        None,
    );
    let writes = (sent1 + sent2) as f64;
    let by_verb: Vec<String> = ["LIST", "WATCH", "GET", "PATCH", "PATCH/status"]
        .iter()
        .map(|v| format!("{v} {:.0}", d(v)))
        .collect();
    table.row(
        &format!("… all clients by verb ({writes:.0} patches were the writer's)"),
        by_verb.join(", "),
        "-".into(),
        "GET 0 (no polling)",
        Some(d("GET") == 0.0),
    );
    let text = format!(
        "cockpit end to end, {n} migrations, lab apiserver 1.37\n{}",
        table.text()
    );
    print!("{text}");
    std::fs::write(out_dir.join("cockpit-e2e.txt"), &text).unwrap();
    std::fs::write(
        out_dir.join("cockpit-e2e.json"),
        serde_json::to_string_pretty(&json!({"n": n, "rows": table.json()})).unwrap(),
    )
    .unwrap();
    let _ = tmux(&["kill-session", "-t", SESSION]);
    lab.stop().expect("stop the lab");
    let _ = std::fs::remove_dir_all(&dir);
    let _: PathBuf = log;
}
