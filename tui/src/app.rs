//! The event loop: keys, the terminal size, watch actions and the clock go into `update` (here
//! and nowhere else); every effect it returns is carried out; the screen is redrawn only when
//! something on it changed (see [`Stamp`]), at most ~30 times a second, and drawing only reads
//! the state.

use std::{
    collections::VecDeque,
    future::Future,
    io::{BufWriter, Stdout, Write},
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crossterm::event::{Event as TermEvent, EventStream};
use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use ratatui::{
    Terminal,
    backend::{Backend, CrosstermBackend},
    layout::Size,
};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{self, UnboundedReceiver, UnboundedSender},
    time::{Instant, MissedTickBehavior},
};

use crate::{
    error::Result,
    keys,
    kube::{self as cluster, Cluster, ConnectOptions, access, actions, children, podlogs, watch},
    state::{Action, ClusterId, ClusterView, Effect, Popup, Scope, Screen, Stamp, State, update},
    ui::{self, Options, Theme},
};

/// Shortest time between two frames.
pub const FRAME: Duration = Duration::from_millis(33);

/// Most queued actions applied before a frame: a storm is drawn in frames of this many.
const BATCH: usize = 4096;

/// What `ferry` (the cockpit) was started with.
#[derive(Clone, Debug, Default)]
pub struct AppOptions {
    /// How to reach the clusters.
    pub connect: ConnectOptions,
    /// `-n` / `-A`; `None` means each context's namespace.
    pub scope: Option<Scope>,
    /// `--wave`.
    pub wave: Option<String>,
    /// `--readonly`.
    pub readonly: bool,
    /// `--welcome[=NOTE]`: a first screen that says which keys to try.
    pub welcome: Option<String>,
    /// `FERRY_FRAME_LOG`: one JSON line per frame, for the benchmark.
    pub frame_log: Option<PathBuf>,
}

/// One frame drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Frames drawn so far, this one included.
    pub n: u64,
    /// Actions applied since the previous frame.
    pub actions: usize,
    /// Of those, what the watches delivered.
    pub watch_actions: usize,
    /// How long applying them took (wall time, all batches since the previous frame).
    pub update: Duration,
    /// How long drawing and writing the frame to the terminal took.
    pub draw: Duration,
    /// Of `draw`, turning the state into cells (the rest is the terminal's diff and write).
    pub render: Duration,
    /// Of `draw`, what the kernel says about this thread meanwhile (Linux only): time on a CPU
    /// and time runnable but waiting for one. What is left of `draw` was spent blocked (in
    /// the terminal write).
    pub sched: Option<Sched>,
    /// Board rows drawing read (see [`crate::state::Index::rows_read`]).
    pub rows_read: u64,
    /// The migration changes applied since the previous frame and when the loop received
    /// each, if the observer asked for them ([`FrameObserver::arrivals`]).
    pub arrived: Vec<Arrival>,
}

/// A thread's scheduling during a frame: its CPU time from `CLOCK_THREAD_CPUTIME_ID`, and its
/// wait for a CPU from `/proc/thread-self/schedstat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sched {
    /// On a CPU.
    pub cpu: Duration,
    /// Runnable, waiting for a CPU.
    pub waiting: Duration,
}

/// This thread's CPU time so far. The thread clock is exact to the nanosecond, where the
/// scheduler's statistics of a running thread may lag by up to a tick (4 ms at `HZ=250`, the
/// size of the frame budget itself).
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl Sched {
    /// Runs `f` and times it: its wall time, and (when `details`) this thread's scheduling
    /// during it. The readings nest so the CPU time is measured inside the wall time (the
    /// thread clock is read right after the wall clock starts and right before it stops) and
    /// the cost of reading `/proc` falls outside both: a thread cannot spend more CPU on `f`
    /// than the wall time `f` took.
    pub fn around<R>(details: bool, f: impl FnOnce() -> R) -> (R, Duration, Option<Sched>) {
        if !details {
            let started = Instant::now();
            let r = f();
            return (r, started.elapsed(), None);
        }
        let waited_before = waited();
        let started = Instant::now();
        let cpu_before = thread_cpu();
        let r = f();
        let cpu_after = thread_cpu();
        let wall = started.elapsed();
        let sched = waited_before.zip(waited()).map(|(a, b)| Sched {
            cpu: cpu_after.saturating_sub(cpu_before),
            waiting: b.saturating_sub(a),
        });
        (r, wall, sched)
    }
}

/// This thread's time runnable but waiting for a CPU so far, from
/// `/proc/thread-self/schedstat`; `None` where the kernel does not tell.
fn waited() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut f = s.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(_)), Some(Ok(waiting))) = (f.next(), f.next()) else {
        return None;
    };
    Some(Duration::from_nanos(waiting))
}

/// A migration change as the event loop received it from the watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// `namespace/name`.
    pub key: String,
    /// Its resourceVersion.
    pub resource_version: String,
    /// When the loop took it off the watches' channel, µs since the epoch.
    pub at_us: u128,
}

fn epoch_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

/// Told about every frame drawn.
pub trait FrameObserver {
    /// A frame of `state` was drawn.
    fn frame(&mut self, state: &State, info: &FrameInfo);

    /// Whether [`FrameInfo::arrived`] and [`FrameInfo::sched`] should be filled in (they cost
    /// a little per event and per frame).
    fn details(&self) -> bool {
        false
    }
}

/// No one listens.
#[derive(Debug)]
pub struct NoObserver;

impl FrameObserver for NoObserver {
    fn frame(&mut self, _: &State, _: &FrameInfo) {}
}

impl<F: FnMut(&State, &FrameInfo)> FrameObserver for F {
    fn frame(&mut self, state: &State, info: &FrameInfo) {
        self(state, info);
    }
}

/// `FERRY_FRAME_LOG`: per frame, when it was on screen (µs since the epoch), its draw time,
/// the filter, how many migrations the board holds, and the resourceVersion of each row shown,
/// so a benchmark can tell when a status change reached the screen.
#[derive(Debug)]
pub struct FrameLog {
    out: std::io::BufWriter<std::fs::File>,
}

impl FrameLog {
    /// Appends to `path`.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &std::path::Path) -> Result<FrameLog> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(FrameLog {
            out: std::io::BufWriter::new(f),
        })
    }
}

impl FrameObserver for FrameLog {
    fn details(&self) -> bool {
        true
    }

    fn frame(&mut self, state: &State, info: &FrameInfo) {
        let at = epoch_us();
        let rows: Vec<(String, &str)> = if state.views.is_empty() {
            state
                .index
                .visible_range(state.offset, state.page)
                .map(|r| {
                    let rv = r.resource_version.as_str();
                    (format!("{}/{}", r.key.namespace, r.key.name), rv)
                })
                .collect()
        } else {
            vec![]
        };
        let line = serde_json::json!({
            "at_us": at,
            "draw_us": info.draw.as_micros(),
            "update_us": info.update.as_micros(),
            "render_us": info.render.as_micros(),
            "cpu_us": info.sched.map(|s| s.cpu.as_micros()),
            "runq_us": info.sched.map(|s| s.waiting.as_micros()),
            "arrived": info.arrived.iter().map(|a| (&a.key, &a.resource_version, a.at_us)).collect::<Vec<_>>(),
            "n": info.n,
            "actions": info.actions,
            "watch_actions": info.watch_actions,
            "migrations": state.index.len(),
            "live": state.clusters.iter().all(|c| c.conn.migrations.is_live()),
            "filter": state.index.filter().raw,
            "rows": rows,
        });
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }
}

/// The clusters' clients and watches, and the channels effects answer on.
pub struct Runtime {
    clusters: Vec<Cluster>,
    watches: Vec<watch::Watches>,
    data_tx: UnboundedSender<Action>,
    data_rx: UnboundedReceiver<Action>,
    ui_tx: UnboundedSender<Action>,
    ui_rx: UnboundedReceiver<Action>,
    connect: ConnectOptions,
    clipboard: Box<dyn Write + Send>,
    /// The pod log being followed: one at a time, aborted when another is asked for or the
    /// view is left, so no stream outlives what it was opened for.
    log_task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_log();
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("clusters", &self.clusters)
            .finish_non_exhaustive()
    }
}

/// What the loop does after an effect.
enum After {
    /// Go on.
    Continue,
    /// Feed this action to `update` next.
    Feed(Action),
    /// Leave.
    Quit,
}

fn id_of(i: usize) -> ClusterId {
    ClusterId(u16::try_from(i).unwrap_or(u16::MAX))
}

impl Runtime {
    /// Clients of `clusters`, no watch started yet.
    pub fn new(clusters: Vec<Cluster>, connect: ConnectOptions) -> Runtime {
        let (data_tx, data_rx) = mpsc::unbounded_channel();
        let (ui_tx, ui_rx) = mpsc::unbounded_channel();
        Runtime {
            clusters,
            watches: vec![],
            data_tx,
            data_rx,
            ui_tx,
            ui_rx,
            connect,
            clipboard: Box::new(std::io::stdout()),
            log_task: None,
        }
    }

    fn stop_log(&mut self) {
        if let Some(t) = self.log_task.take() {
            t.abort();
        }
    }

    /// Where [`Effect::Copy`] writes its OSC 52 sequence: the terminal's stdout unless a test
    /// listens instead.
    pub fn set_clipboard(&mut self, out: Box<dyn Write + Send>) {
        self.clipboard = out;
    }

    /// Where watch actions go (tests feed the loop through it).
    pub fn data_sender(&self) -> UnboundedSender<Action> {
        self.data_tx.clone()
    }

    /// Starts the watches of every cluster, each on its scope in `state`.
    pub fn watch(&mut self, state: &State) {
        // A new channel: actions of the old watches still queued are dropped with it.
        let (tx, rx) = mpsc::unbounded_channel();
        self.watches = self
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let scope = state.cluster(id_of(i)).map_or_else(
                    || Scope::Namespace(c.namespace.clone()),
                    |v| v.scope.clone(),
                );
                watch::start(&c.client, id_of(i), &scope, tx.clone())
            })
            .collect();
        self.data_tx = tx;
        self.data_rx = rx;
    }

    fn client_of(&self, c: ClusterId) -> Option<::kube::Client> {
        self.clusters
            .get(usize::from(c.0))
            .map(|c| c.client.clone())
    }

    /// Carries out one effect. What it learns at once comes back as an action to feed to
    /// `update`; what takes longer comes back later on the ui channel.
    async fn run(&mut self, effect: Effect, state: &State) -> After {
        match effect {
            Effect::Quit => return After::Quit,
            e @ (Effect::Patch { .. } | Effect::Delete { .. }) => {
                let (Effect::Patch { target, .. } | Effect::Delete { target, .. }) = &e else {
                    return After::Continue;
                };
                let cluster = target.key.cluster;
                self.answer_later(cluster, |client| actions::run(client, e));
            }
            Effect::ReviewAccess {
                cluster,
                namespace,
                generation,
            } => self.answer_later(cluster, move |client| async move {
                Some(access::review(client, cluster, namespace, generation).await)
            }),
            Effect::FetchChildren { key, obj } => {
                self.answer_later(key.cluster, |client| async move {
                    let (_, result) = children::read(client, &obj).await;
                    Some(Action::Children { key, result })
                });
            }
            Effect::FetchWhole { key } => self.answer_later(key.cluster, |client| async move {
                let result = crate::kube::watch::whole_yaml(client, &key).await;
                Some(Action::Whole { key, result })
            }),
            Effect::FetchMigration { key } => {
                self.answer_later(key.cluster, |client| async move {
                    let result = crate::kube::watch::read_migration(client, &key).await;
                    Some(Action::MigrationRead { key, result })
                });
            }
            Effect::FetchPods { key } => self.answer_later(key.cluster, |client| async move {
                let result = podlogs::find(client, &key).await;
                Some(Action::PodsFound { key, result })
            }),
            Effect::FollowLog {
                key,
                session,
                pod,
                container,
            } => {
                self.stop_log();
                let Some(client) = self.client_of(key.cluster) else {
                    return After::Continue;
                };
                let tx = self.ui_tx.clone();
                self.log_task = Some(tokio::spawn(podlogs::follow(
                    client, key, pod, container, session, tx,
                )));
            }
            Effect::StopLog => self.stop_log(),
            Effect::Rewatch(_) => {
                self.stop_log();
                self.watch(state);
            }
            Effect::Copy(text) => self.copy(text),
            Effect::SwitchContexts(contexts) => return self.switch_contexts(contexts).await,
        }
        After::Continue
    }

    /// Runs `task` on cluster `c`'s client in the background (nothing without one); the
    /// action it answers comes back on the ui channel.
    fn answer_later<T, F>(&self, c: ClusterId, task: T)
    where
        T: FnOnce(::kube::Client) -> F,
        F: Future<Output = Option<Action>> + Send + 'static,
    {
        let Some(client) = self.client_of(c) else {
            return;
        };
        let tx = self.ui_tx.clone();
        let answer = task(client);
        tokio::spawn(async move {
            if let Some(a) = answer.await {
                let _ = tx.send(a);
            }
        });
    }

    /// Puts `text` on the clipboard (OSC 52). Written between frames: the terminal's own
    /// buffer was flushed with the last frame, so the sequence never lands inside one. A failed
    /// write loses the copy, never the screen.
    fn copy(&mut self, text: String) {
        let copy = crossterm::clipboard::CopyToClipboard::to_clipboard_from(text);
        if let Err(e) = crossterm::execute!(self.clipboard, copy) {
            tracing::warn!(error = %e, "copying to the clipboard (OSC 52) failed");
        }
    }

    /// Connects to `contexts` instead of the clusters so far; the state learns of them (or of
    /// the failure) from the action it answers.
    async fn switch_contexts(&mut self, contexts: Vec<String>) -> After {
        self.stop_log();
        let opts = ConnectOptions {
            contexts,
            ..self.connect.clone()
        };
        match cluster::connect_all(&opts).await {
            Ok(clusters) => {
                let views = clusters
                    .iter()
                    .map(|c| ClusterView::new(&c.context, Scope::Namespace(c.namespace.clone())))
                    .collect();
                self.clusters = clusters;
                self.connect = opts;
                // The watches start once the state knows the new clusters.
                self.watches.clear();
                After::Feed(Action::ContextSwitched(views))
            }
            Err(e) => After::Feed(Action::ContextFailed(e.to_string())),
        }
    }
}

fn screen(size: Size) -> Action {
    Action::Resize(Screen {
        width: size.width,
        height: size.height,
    })
}

/// What the loop runs on: the terminal and the state it draws, the runtime that carries out
/// effects, what it applies first, where keys come from, what stops it, and who sees frames.
pub struct Drive<'a, B: Backend, K, S> {
    /// The terminal drawn on.
    pub terminal: &'a mut Terminal<B>,
    /// The state updated and drawn.
    pub state: &'a mut State,
    /// Watches, patches and the other effects.
    pub rt: &'a mut Runtime,
    /// Actions applied before anything else (the screen's size, a wave to open, ...).
    pub first: Vec<Action>,
    /// The terminal's events.
    pub keys: K,
    /// Resolves when the loop must end (a signal, a test's end).
    pub stop: S,
    /// Colours.
    pub theme: Theme,
    /// Told about every frame.
    pub observer: &'a mut dyn FrameObserver,
}

/// Runs the loop on `terminal` until the state quits, `keys` ends or `stop` resolves: applies
/// `first`, then keys, the clock, watch actions and effects' answers, drawing after each batch
/// (at most every [`FRAME`]) and telling `observer` about every frame.
///
/// # Errors
/// The terminal failed.
pub async fn drive<B, K, S>(d: Drive<'_, B, K, S>) -> Result<()>
where
    B: Backend,
    B::Error: Into<crate::Error>,
    K: Stream<Item = std::io::Result<TermEvent>> + Unpin,
    S: Future<Output = ()>,
{
    let Drive {
        terminal,
        state,
        rt,
        first,
        keys: mut keys_in,
        stop,
        theme,
        observer,
    } = d;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut turns = Turns::new(first, observer.details());
    tokio::pin!(stop);
    loop {
        if turns.apply(state, rt).await {
            return Ok(());
        }
        if turns.dirty && turns.last_draw.elapsed() >= FRAME {
            turns.draw(terminal, state, theme, observer)?;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(turns.last_draw + FRAME), if turns.dirty => {}
            _ = tick.tick() => turns.queue.push_back(Action::Tick(Timestamp::now())),
            ev = keys_in.next() => match ev {
                Some(Ok(TermEvent::Key(k))) => {
                    if let Some(a) = keys::action_for(state, k) { turns.queue.push_back(a) }
                }
                Some(Ok(TermEvent::Resize(width, height))) => {
                    turns.queue.push_back(Action::Resize(Screen { width, height }));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
            Some(a) = rt.data_rx.recv() => turns.take_watch_actions(a, rt),
            Some(a) = rt.ui_rx.recv() => turns.queue.push_back(a),
            () = &mut stop => return Ok(()),
        }
    }
}

/// What the loop keeps from one turn to the next: the actions waiting, whether the screen
/// needs a frame, and what the next frame's [`FrameInfo`] will say.
struct Turns {
    /// Actions waiting for `update`: from the terminal, the watches, the clock, and what
    /// effects answer at once. This loop is the only caller of `update`.
    queue: VecDeque<Action>,
    dirty: bool,
    /// What the last frame showed of the plain board.
    drawn: Option<Stamp>,
    last_draw: Instant,
    frames: u64,
    applied: usize,
    from_watches: usize,
    updating: Duration,
    /// Whether the observer asked for arrivals and scheduling.
    details: bool,
    arrived: Vec<Arrival>,
}

impl Turns {
    fn new(first: Vec<Action>, details: bool) -> Turns {
        Turns {
            queue: first.into(),
            dirty: true,
            drawn: None,
            last_draw: Instant::now() - FRAME,
            frames: 0,
            applied: 0,
            from_watches: 0,
            updating: Duration::ZERO,
            details,
            arrived: vec![],
        }
    }

    /// Applies every queued action to `state`, carrying out the effects `update` returns;
    /// whether the loop ends.
    async fn apply(&mut self, state: &mut State, rt: &mut Runtime) -> bool {
        let mut quit = false;
        let batch = !self.queue.is_empty();
        let mut only_changes = true;
        let applying = Instant::now();
        while let Some(a) = self.queue.pop_front() {
            only_changes &= matches!(a, Action::MigrationApplied(..) | Action::Tick(_));
            self.applied += 1;
            let contexts_switched = matches!(a, Action::ContextSwitched(_));
            for fx in update(state, a) {
                match rt.run(fx, state).await {
                    After::Continue => {}
                    After::Feed(a) => self.queue.push_back(a),
                    After::Quit => quit = true,
                }
            }
            if contexts_switched {
                rt.watch(state);
            }
        }
        if batch {
            self.updating += applying.elapsed();
        }
        if quit || state.quit {
            return true;
        }
        // Migration changes and ticks that leave the plain board as it was drawn (rows off
        // screen, the same second) need no frame; anything else is drawn.
        if batch && (!only_changes || self.drawn.is_none() || Stamp::of(state) != self.drawn) {
            self.dirty = true;
        }
        false
    }

    /// Draws a frame of `state` and tells `observer` about it.
    fn draw<B>(
        &mut self,
        terminal: &mut Terminal<B>,
        state: &State,
        theme: Theme,
        observer: &mut dyn FrameObserver,
    ) -> Result<()>
    where
        B: Backend,
        B::Error: Into<crate::Error>,
    {
        let read_before = state.index.rows_read();
        // The log pane's new lines, moved from the logger's buffer (it keeps the last
        // thousand; a frame comes at least once a second with the clock).
        tui_logger::move_events();
        let mut render = Duration::ZERO;
        let (drawn_ok, draw, sched) = Sched::around(self.details, || {
            terminal.draw(|f| {
                let t = Instant::now();
                ui::draw(f, state, Options { theme, logs: true });
                render = t.elapsed();
            })
        });
        drawn_ok.map_err(Into::into)?;
        self.frames += 1;
        let info = FrameInfo {
            n: self.frames,
            actions: self.applied,
            watch_actions: self.from_watches,
            update: self.updating,
            draw,
            render,
            sched,
            rows_read: state.index.rows_read() - read_before,
            arrived: std::mem::take(&mut self.arrived),
        };
        observer.frame(state, &info);
        self.drawn = Stamp::of(state);
        (self.applied, self.from_watches, self.updating) = (0, 0, Duration::ZERO);
        self.last_draw = Instant::now();
        self.dirty = false;
        Ok(())
    }

    /// Queues `a` from the watches, with the clock, and what else they have queued too: one
    /// frame for a burst of watch events.
    fn take_watch_actions(&mut self, a: Action, rt: &mut Runtime) {
        self.queue.push_back(Action::Tick(Timestamp::now()));
        let mut next = Some(a);
        while let Some(a) = next {
            if self.details
                && let Action::MigrationApplied(_, o) = &a
            {
                self.arrived.push(Arrival {
                    key: format!(
                        "{}/{}",
                        o.metadata.namespace.as_deref().unwrap_or(""),
                        o.metadata.name.as_deref().unwrap_or("")
                    ),
                    resource_version: o.metadata.resource_version.clone().unwrap_or_default(),
                    at_us: epoch_us(),
                });
            }
            self.queue.push_back(a);
            self.from_watches += 1;
            next = if self.queue.len() < BATCH {
                rt.data_rx.try_recv().ok()
            } else {
                None
            };
        }
    }
}

/// Bytes of terminal output a frame collects before writing: a whole 200×60 frame in colour.
const TERMINAL_BUFFER: usize = 256 << 10;

/// The terminal as `ratatui::init` sets it up (raw mode, alternate screen, restored from a
/// panic), but writing through one buffer flushed once a frame: stdout is line-buffered, which
/// sends a frame to the terminal (tmux, over ssh) in many small writes.
fn init_terminal() -> std::io::Result<Terminal<CrosstermBackend<BufWriter<Stdout>>>> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        ratatui::restore();
        hook(info);
    }));
    crossterm::terminal::enable_raw_mode()?;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen)?;
    Terminal::new(CrosstermBackend::new(BufWriter::with_capacity(
        TERMINAL_BUFFER,
        std::io::stdout(),
    )))
}

/// Runs the cockpit until `q`, `:q`, Ctrl-C, SIGTERM or SIGHUP.
///
/// # Errors
/// The kubeconfig is unusable or the terminal cannot be set up. Losing a cluster later is not
/// an error: its rows stay, marked stale, and its watches retry.
pub async fn run(opts: AppOptions) -> Result<()> {
    let clusters = cluster::connect_all(&opts.connect).await?;
    let views = clusters
        .iter()
        .map(|c| {
            let scope = opts
                .scope
                .clone()
                .unwrap_or_else(|| Scope::Namespace(c.namespace.clone()));
            ClusterView::new(&c.context, scope)
        })
        .collect();
    let mut state = State::with_clusters(views, opts.readonly, Timestamp::now());
    let mut rt = Runtime::new(clusters, opts.connect.clone());
    rt.watch(&state);
    let mut observer: Box<dyn FrameObserver> = match &opts.frame_log {
        Some(p) => Box::new(FrameLog::open(p)?),
        None => Box::new(NoObserver),
    };

    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut terminal = match init_terminal() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            return Err(e.into());
        }
    };
    let mut first = vec![];
    match terminal.size() {
        Ok(size) => first.push(screen(size)),
        Err(e) => {
            ratatui::restore();
            return Err(e.into());
        }
    }
    if let Some(w) = &opts.wave {
        first.push(Action::Command(format!("wave {w}")));
    }
    if let Some(note) = &opts.welcome {
        state.popup = Some(Popup::Welcome { note: note.clone() });
    }
    let stop = async move {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = sighup.recv() => {}
        }
    };
    let result = drive(Drive {
        terminal: &mut terminal,
        state: &mut state,
        rt: &mut rt,
        first,
        keys: EventStream::new(),
        stop,
        theme: Theme::from_env(),
        observer: observer.as_mut(),
    })
    .await;
    drop(rt);
    ratatui::restore();
    result
}
