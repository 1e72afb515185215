//! The event loop: keys, the terminal size, watch actions and the clock go into `update` (here
//! and nowhere else); every effect it returns is carried out; the screen is redrawn only when
//! something changed, at most ~30 times a second, and drawing only reads the state.

use std::{
    collections::VecDeque,
    future::Future,
    io::Write,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crossterm::event::{Event as TermEvent, EventStream};
use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use ratatui::{Terminal, backend::Backend, layout::Size};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{self, UnboundedReceiver, UnboundedSender},
    time::{Instant, MissedTickBehavior},
};

use crate::{
    error::Result,
    keys,
    kube::{self as cluster, Cluster, ConnectOptions, actions, children, watch},
    state::{Action, ClusterId, ClusterView, Effect, Popup, Scope, Screen, State, update},
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
    /// How long drawing and writing the frame to the terminal took.
    pub draw: Duration,
    /// Board rows drawing read (see [`crate::state::Index::rows_read`]).
    pub rows_read: u64,
}

/// Told about every frame drawn.
pub trait FrameObserver {
    /// A frame of `state` was drawn.
    fn frame(&mut self, state: &State, info: &FrameInfo);
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
    fn frame(&mut self, state: &State, info: &FrameInfo) {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        let rows: Vec<(String, &str)> = if state.views.is_empty() {
            state
                .index
                .visible_range(state.offset, state.page)
                .map(|r| {
                    let rv = r.obj.metadata.resource_version.as_deref().unwrap_or("");
                    (format!("{}/{}", r.key.namespace, r.key.name), rv)
                })
                .collect()
        } else {
            vec![]
        };
        let line = serde_json::json!({
            "at_us": at,
            "draw_us": info.draw.as_micros(),
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
        }
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
                let Some(client) = self.client_of(target.key.cluster) else {
                    return After::Continue;
                };
                let tx = self.ui_tx.clone();
                tokio::spawn(async move {
                    if let Some(a) = actions::run(client, e).await {
                        let _ = tx.send(a);
                    }
                });
            }
            Effect::FetchChildren { key, obj } => {
                let Some(client) = self.client_of(key.cluster) else {
                    return After::Continue;
                };
                let tx = self.ui_tx.clone();
                tokio::spawn(async move {
                    let (_, result) = children::read(client, &obj).await;
                    let _ = tx.send(Action::Children { key, result });
                });
            }
            Effect::Rewatch(_) => self.watch(state),
            Effect::SwitchContexts(contexts) => {
                let opts = ConnectOptions {
                    contexts,
                    ..self.connect.clone()
                };
                return match cluster::connect_all(&opts).await {
                    Ok(clusters) => {
                        let views = clusters
                            .iter()
                            .map(|c| {
                                ClusterView::new(&c.context, Scope::Namespace(c.namespace.clone()))
                            })
                            .collect();
                        self.clusters = clusters;
                        self.connect = opts;
                        // The watches start once the state knows the new clusters.
                        self.watches.clear();
                        After::Feed(Action::ContextSwitched(views))
                    }
                    Err(e) => After::Feed(Action::ContextFailed(e.to_string())),
                };
            }
        }
        After::Continue
    }
}

fn screen(size: Size) -> Action {
    Action::Resize(Screen {
        width: size.width,
        height: size.height,
    })
}

/// Runs the loop on `terminal` until the state quits, `keys` ends or `stop` resolves: applies
/// `first`, then keys, the clock, watch actions and effects' answers, drawing after each batch
/// (at most every [`FRAME`]) and telling `observer` about every frame.
///
/// # Errors
/// The terminal failed.
#[allow(clippy::too_many_arguments)]
pub async fn drive<B, K>(
    terminal: &mut Terminal<B>,
    state: &mut State,
    rt: &mut Runtime,
    first: Vec<Action>,
    mut keys_in: K,
    stop: impl Future<Output = ()>,
    theme: Theme,
    observer: &mut dyn FrameObserver,
) -> Result<()>
where
    B: Backend,
    B::Error: Into<crate::Error>,
    K: Stream<Item = std::io::Result<TermEvent>> + Unpin,
{
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    let mut frames: u64 = 0;
    let (mut applied, mut from_watches) = (0usize, 0usize);
    // Actions waiting for `update`: from the terminal, the watches, the clock, and what
    // effects answer at once. This loop is the only caller of `update`.
    let mut queue: VecDeque<Action> = first.into();
    tokio::pin!(stop);
    loop {
        let mut quit = false;
        while let Some(a) = queue.pop_front() {
            dirty = true;
            applied += 1;
            let contexts_switched = matches!(a, Action::ContextSwitched(_));
            for fx in update(state, a) {
                match rt.run(fx, state).await {
                    After::Continue => {}
                    After::Feed(a) => queue.push_back(a),
                    After::Quit => quit = true,
                }
            }
            if contexts_switched {
                rt.watch(state);
            }
        }
        if quit || state.quit {
            return Ok(());
        }
        if dirty && last_draw.elapsed() >= FRAME {
            let read_before = state.index.rows_read();
            let started = Instant::now();
            terminal
                .draw(|f| ui::draw(f, state, Options { theme, logs: true }))
                .map_err(Into::into)?;
            frames += 1;
            let info = FrameInfo {
                n: frames,
                actions: applied,
                watch_actions: from_watches,
                draw: started.elapsed(),
                rows_read: state.index.rows_read() - read_before,
            };
            observer.frame(state, &info);
            (applied, from_watches) = (0, 0);
            last_draw = Instant::now();
            dirty = false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(last_draw + FRAME), if dirty => {}
            _ = tick.tick() => queue.push_back(Action::Tick(Timestamp::now())),
            ev = keys_in.next() => match ev {
                Some(Ok(TermEvent::Key(k))) => {
                    if let Some(a) = keys::action_for(state, k) { queue.push_back(a) }
                }
                Some(Ok(TermEvent::Resize(width, height))) => {
                    queue.push_back(Action::Resize(Screen { width, height }));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
            Some(a) = rt.data_rx.recv() => {
                queue.push_back(Action::Tick(Timestamp::now()));
                queue.push_back(a);
                from_watches += 1;
                // Drain what else is queued: one frame for a burst of watch events.
                while queue.len() < BATCH {
                    match rt.data_rx.try_recv() {
                        Ok(a) => {
                            queue.push_back(a);
                            from_watches += 1;
                        }
                        Err(_) => break,
                    }
                }
            }
            Some(a) = rt.ui_rx.recv() => queue.push_back(a),
            () = &mut stop => return Ok(()),
        }
    }
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
    // ratatui::init restores the terminal from its panic hook too.
    let mut terminal = ratatui::init();
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
    let result = drive(
        &mut terminal,
        &mut state,
        &mut rt,
        first,
        EventStream::new(),
        stop,
        Theme::from_env(),
        observer.as_mut(),
    )
    .await;
    drop(rt);
    ratatui::restore();
    result
}
