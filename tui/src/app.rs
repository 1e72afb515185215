//! The event loop: keys, the terminal size, watch actions and the clock go into `update` (here
//! and nowhere else); every effect it returns is carried out; the screen is redrawn only when
//! something changed, at most ~30 times a second, and drawing only reads the state.

use std::{collections::VecDeque, time::Duration};

use crossterm::event::{Event as TermEvent, EventStream};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use ratatui::layout::Size;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{self, UnboundedReceiver, UnboundedSender},
    time::{Instant, MissedTickBehavior},
};

use crate::{
    error::Result,
    keys,
    kube::{self as cluster, Cluster, ConnectOptions, actions, children, watch},
    state::{Action, Effect, Scope, Screen, State, update},
    ui::{self, Options, Theme},
};

/// Shortest time between two frames.
const FRAME: Duration = Duration::from_millis(33);

/// What `ferry` (the cockpit) was started with.
#[derive(Clone, Debug, Default)]
pub struct AppOptions {
    /// How to reach the cluster.
    pub connect: ConnectOptions,
    /// `-n` / `-A`; `None` means the context's namespace.
    pub scope: Option<Scope>,
    /// `--wave`.
    pub wave: Option<String>,
    /// `--readonly`.
    pub readonly: bool,
}

struct Runtime {
    cluster: Cluster,
    data_tx: UnboundedSender<Action>,
    data_rx: UnboundedReceiver<Action>,
    ui_tx: UnboundedSender<Action>,
    watches: watch::Watches,
    connect: ConnectOptions,
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

impl Runtime {
    fn rewatch(&mut self, scope: &Scope) {
        // A new channel: actions of the old watches still queued are dropped with it.
        let (tx, rx) = mpsc::unbounded_channel();
        self.watches = watch::start(&self.cluster.client, scope, tx.clone());
        self.data_tx = tx;
        self.data_rx = rx;
    }

    /// Carries out one effect. What it learns at once comes back as an action to feed to
    /// `update`; what takes longer comes back later on the ui channel.
    async fn run(&mut self, effect: Effect) -> After {
        match effect {
            Effect::Quit => return After::Quit,
            e @ (Effect::Patch { .. } | Effect::Delete { .. }) => {
                let client = self.cluster.client.clone();
                let tx = self.ui_tx.clone();
                tokio::spawn(async move {
                    if let Some(a) = actions::run(client, e).await {
                        let _ = tx.send(a);
                    }
                });
            }
            Effect::FetchChildren(obj) => {
                let client = self.cluster.client.clone();
                let tx = self.ui_tx.clone();
                tokio::spawn(async move {
                    let (key, result) = children::read(client, &obj).await;
                    let _ = tx.send(Action::Children { key, result });
                });
            }
            Effect::Rewatch(scope) => self.rewatch(&scope),
            Effect::SwitchContext(ctx) => {
                let opts = ConnectOptions {
                    context: Some(ctx),
                    ..self.connect.clone()
                };
                return match cluster::connect(&opts).await {
                    Ok(c) => {
                        let scope = Scope::Namespace(c.namespace.clone());
                        self.cluster = c;
                        self.connect = opts;
                        self.rewatch(&scope);
                        After::Feed(Action::ContextSwitched {
                            context: self.cluster.context.clone(),
                            scope,
                        })
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

/// Runs the cockpit until `q`, `:q`, Ctrl-C, SIGTERM or SIGHUP.
///
/// # Errors
/// The kubeconfig is unusable or the terminal cannot be set up. Losing the cluster later is not
/// an error: the board stays, marked stale, and the watches retry.
pub async fn run(opts: AppOptions) -> Result<()> {
    let cluster = cluster::connect(&opts.connect).await?;
    let scope = opts
        .scope
        .clone()
        .unwrap_or_else(|| Scope::Namespace(cluster.namespace.clone()));
    let mut state = State::new(
        cluster.context.clone(),
        scope.clone(),
        opts.readonly,
        Timestamp::now(),
    );
    let (data_tx, data_rx) = mpsc::unbounded_channel();
    let (ui_tx, mut ui_rx) = mpsc::unbounded_channel();
    let watches = watch::start(&cluster.client, &scope, data_tx.clone());
    let mut rt = Runtime {
        cluster,
        data_tx,
        data_rx,
        ui_tx,
        watches,
        connect: opts.connect.clone(),
    };

    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    // ratatui::init restores the terminal from its panic hook too.
    let mut terminal = ratatui::init();
    let theme = Theme::from_env();
    let mut keys_in = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    // Actions waiting for `update`: from the terminal, the watches, the clock, and what
    // effects answer at once. This loop is the only caller of `update`.
    let mut queue: VecDeque<Action> = VecDeque::new();
    match terminal.size() {
        Ok(size) => queue.push_back(screen(size)),
        Err(e) => {
            ratatui::restore();
            return Err(e.into());
        }
    }
    if let Some(w) = &opts.wave {
        queue.push_back(Action::Command(format!("wave {w}")));
    }
    let result: Result<()> = loop {
        let mut quit = false;
        while let Some(a) = queue.pop_front() {
            dirty = true;
            for fx in update(&mut state, a) {
                match rt.run(fx).await {
                    After::Continue => {}
                    After::Feed(a) => queue.push_back(a),
                    After::Quit => quit = true,
                }
            }
        }
        if quit || state.quit {
            break Ok(());
        }
        if dirty && last_draw.elapsed() >= FRAME {
            if let Err(e) = terminal.draw(|f| ui::draw(f, &state, Options { theme, logs: true })) {
                break Err(e.into());
            }
            last_draw = Instant::now();
            dirty = false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(last_draw + FRAME), if dirty => {}
            _ = tick.tick() => queue.push_back(Action::Tick(Timestamp::now())),
            ev = keys_in.next() => match ev {
                Some(Ok(TermEvent::Key(k))) => {
                    if let Some(a) = keys::action_for(&state, k) { queue.push_back(a) }
                }
                Some(Ok(TermEvent::Resize(width, height))) => {
                    queue.push_back(Action::Resize(Screen { width, height }));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(e.into()),
                None => break Ok(()),
            },
            Some(a) = rt.data_rx.recv() => {
                queue.push_back(Action::Tick(Timestamp::now()));
                queue.push_back(a);
                // Drain what else is queued: one frame for a burst of watch events.
                while queue.len() < 4096 {
                    match rt.data_rx.try_recv() { Ok(a) => queue.push_back(a), Err(_) => break }
                }
            }
            Some(a) = ui_rx.recv() => queue.push_back(a),
            _ = sigterm.recv() => break Ok(()),
            _ = sighup.recv() => break Ok(()),
        }
    };
    drop(rt);
    ratatui::restore();
    result
}
