//! The event loop as it runs (`app::drive`), on a test terminal in a single-threaded runtime (the storm is sent with no await in between, so it lands between two frames): what a
//! storm of watch events costs in frames, and what a frame reads of the board.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ferry::{
    app::{self, FrameInfo, Runtime},
    kube::ConnectOptions,
    state::{Action, ConnState, Resource, Scope, Screen, State},
    ui::Theme,
};
use ratatui::{Terminal, backend::TestBackend};
use support::{C0, many, now};
use tokio::sync::{mpsc, oneshot};

#[tokio::test]
async fn a_storm_of_a_thousand_changes_between_two_frames_is_drawn_in_one_frame() {
    let n = 1000;
    let mut state = State::new("lab", Scope::All, false, now());
    let mut rt = Runtime::new(vec![], ConnectOptions::default());
    let tx = rt.data_sender();
    let objs = many(n, 20);
    tx.send(Action::migrations_listed(C0, objs.clone()))
        .unwrap();
    tx.send(Action::Connection(
        C0,
        Resource::Migrations,
        ConnState::Live,
    ))
    .unwrap();

    let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<(FrameInfo, usize, usize)>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // The storm: once the board shows every row, every row changes at once, between two
    // frames; then the loop runs on (clock ticks included) for three seconds.
    let storm = tokio::spawn(async move {
        loop {
            let (_, rows, _) = frames_rx.recv().await.unwrap();
            if rows == n {
                break;
            }
        }
        for (i, mut o) in objs.into_iter().enumerate() {
            let st = o.status.as_mut().unwrap();
            st.message = Some("stormed".into());
            o.metadata.resource_version = Some(format!("stormed-{i}"));
            tx.send(Action::MigrationApplied(C0, Box::new(o))).unwrap();
        }
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        let mut after = vec![];
        while let Ok(Some(f)) = tokio::time::timeout_at(until, frames_rx.recv()).await {
            after.push(f);
        }
        stop_tx.send(()).unwrap();
        after
    });

    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let mut observer = |s: &State, f: &FrameInfo| {
        // The version each change carries (a failed row's board message is its failure, not
        // the status message, and rows keep no object).
        let stormed = s
            .index
            .iter()
            .filter(|r| r.resource_version.starts_with("stormed-"))
            .count();
        let _ = frames_tx.send((f.clone(), s.index.len(), stormed));
    };
    app::drive(app::Drive {
        terminal: &mut terminal,
        state: &mut state,
        rt: &mut rt,
        first: vec![Action::Resize(Screen {
            width: 120,
            height: 40,
        })],
        keys: futures::stream::pending(),
        stop: async {
            let _ = stop_rx.await;
        },
        theme: Theme::MONO,
        observer: &mut observer,
    })
    .await
    .unwrap();
    let after = storm.await.unwrap();

    let with_storm: Vec<&(FrameInfo, usize, usize)> =
        after.iter().filter(|(f, ..)| f.watch_actions > 0).collect();
    assert_eq!(
        with_storm.len(),
        1,
        "one frame for the storm; frames after it: {after:?}"
    );
    let (frame, _, stormed) = with_storm[0];
    assert_eq!(frame.watch_actions, n, "every change in that one frame");
    assert_eq!(*stormed, n, "and the frame shows all of them");
    assert!(
        after.len() >= 3,
        "the clock still ticks a frame a second: {after:?}"
    );
    // Every frame read only the rows it showed (two passes: column widths, then the rows).
    for (f, ..) in &after {
        assert!(f.rows_read <= 2 * 40, "{f:?}");
    }
}

/// Records every frame; asks for the details a frame log writes.
struct Recorder(mpsc::UnboundedSender<FrameInfo>);

impl app::FrameObserver for Recorder {
    fn frame(&mut self, s: &State, info: &FrameInfo) {
        // The first frame after the list is the one with every row.
        if s.index.is_empty() {
            return;
        }
        let _ = self.0.send(info.clone());
    }
    fn details(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_frame_names_the_changes_it_received_and_when_for_the_event_to_screen_benchmark() {
    let mut state = State::new("lab", Scope::All, false, now());
    let mut rt = Runtime::new(vec![], ConnectOptions::default());
    let tx = rt.data_sender();
    let objs = many(10, 2);
    tx.send(Action::migrations_listed(C0, objs.clone()))
        .unwrap();
    let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<FrameInfo>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let changes = tokio::spawn(async move {
        // The list is on screen; then three changes, each a new resourceVersion.
        let first = frames_rx.recv().await.unwrap();
        let mut sent = vec![];
        for (i, mut o) in objs.into_iter().take(3).enumerate() {
            o.metadata.resource_version = Some(format!("{}", 5000 + i));
            sent.push((
                format!(
                    "{}/{}",
                    o.metadata.namespace.clone().unwrap(),
                    o.metadata.name.clone().unwrap()
                ),
                format!("{}", 5000 + i),
            ));
            tx.send(Action::MigrationApplied(C0, Box::new(o))).unwrap();
        }
        let mut got = vec![];
        while got.len() < 3 {
            let f = frames_rx.recv().await.unwrap();
            got.extend(f.arrived);
        }
        stop_tx.send(()).unwrap();
        (first, sent, got)
    });
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    app::drive(app::Drive {
        terminal: &mut terminal,
        state: &mut state,
        rt: &mut rt,
        first: vec![],
        keys: futures::stream::pending(),
        stop: async {
            let _ = stop_rx.await;
        },
        theme: Theme::MONO,
        observer: &mut Recorder(frames_tx),
    })
    .await
    .unwrap();
    let (first, sent, got) = changes.await.unwrap();
    assert!(first.arrived.is_empty(), "a list is no change: {first:?}");
    let got_keys: Vec<(String, String)> = got
        .iter()
        .map(|a| (a.key.clone(), a.resource_version.clone()))
        .collect();
    assert_eq!(
        got_keys, sent,
        "each change, in order, with its resourceVersion"
    );
    assert!(got.iter().all(|a| a.at_us >= started), "{got:?}");
    assert!(first.render <= first.draw, "{first:?}");
    // The drawing thread's CPU time (its own clock) fits in the frame's wall time.
    let sched = first.sched.expect("Linux tells a thread's CPU time");
    assert!(
        sched.cpu > std::time::Duration::ZERO && sched.cpu <= first.draw,
        "{first:?}"
    );
}

#[tokio::test]
async fn changes_to_rows_off_screen_draw_no_frame_and_the_next_change_on_screen_is_drawn() {
    let n = 1000;
    let mut state = State::new("lab", Scope::All, false, now());
    let mut rt = Runtime::new(vec![], ConnectOptions::default());
    let tx = rt.data_sender();
    let objs = many(n, 20);
    tx.send(Action::migrations_listed(C0, objs.clone()))
        .unwrap();
    // Sorted by name: the first rows are on screen, the last ones far below it.
    let mut by_name = objs.clone();
    by_name.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<FrameInfo>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let changes = tokio::spawn(async move {
        frames_rx.recv().await.unwrap();
        // Forty changes off screen, one every 50 ms (longer than a frame's pacing): two seconds.
        let mut pace = tokio::time::interval(std::time::Duration::from_millis(50));
        for (i, o) in by_name.iter().rev().take(40).enumerate() {
            pace.tick().await;
            let mut o = o.clone();
            o.status.as_mut().unwrap().message = Some(format!("off screen {i}"));
            tx.send(Action::MigrationApplied(C0, Box::new(o))).unwrap();
        }
        pace.tick().await;
        let mut o = by_name[0].clone();
        o.status.as_mut().unwrap().message = Some("on screen".into());
        let key = format!(
            "{}/{}",
            o.metadata.namespace.clone().unwrap(),
            o.metadata.name.clone().unwrap()
        );
        tx.send(Action::MigrationApplied(C0, Box::new(o))).unwrap();
        let mut frames = vec![];
        loop {
            let f = frames_rx.recv().await.unwrap();
            let shown = f.arrived.iter().any(|a| a.key == key);
            frames.push(f);
            if shown {
                break;
            }
        }
        stop_tx.send(()).unwrap();
        frames
    });
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    app::drive(app::Drive {
        terminal: &mut terminal,
        state: &mut state,
        rt: &mut rt,
        first: vec![Action::Resize(Screen {
            width: 120,
            height: 40,
        })],
        keys: futures::stream::pending(),
        stop: async {
            let _ = stop_rx.await;
        },
        theme: Theme::MONO,
        observer: &mut Recorder(frames_tx),
    })
    .await
    .unwrap();
    let frames = changes.await.unwrap();
    let received: usize = frames.iter().map(|f| f.arrived.len()).sum();
    assert_eq!(received, 41, "every change reached the loop");
    // Without the check, each of the forty changes would have drawn a frame; with it, only the
    // ticks of the clock's seconds (the ages shown) over the two seconds do, and the change on
    // screen.
    assert!(
        frames.len() <= 5,
        "{} frames for 40 changes off screen and one on it: {frames:?}",
        frames.len()
    );
}

/// A clipboard the test reads: what the loop writes for the copy key.
#[derive(Clone, Default)]
struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_copy_key_writes_the_whole_failure_as_one_osc_52_sequence() {
    use base64::Engine;
    use ferry::state::Edit;

    let mut state = support::sample_state(Scope::Namespace("apps".into()));
    support::with_long_failure(&mut state);
    let mut rt = Runtime::new(vec![], ConnectOptions::default());
    let written = Written::default();
    rt.set_clipboard(Box::new(written.clone()));
    let mut first = vec![
        Action::Resize(Screen {
            width: 80,
            height: 24,
        }),
        Action::StartFilter,
    ];
    first.extend("w1-cache-02".chars().map(|c| Action::Edit(Edit::Char(c))));
    // The details read their migration (the runtime has no cluster to ask): the test answers
    // as the API would, before the copy.
    let mut read = support::long_failure();
    ferry::kube::watch::trim_migration(&mut read);
    first.extend([
        Action::Submit,
        Action::Enter,
        Action::MigrationRead {
            key: ferry::state::ObjKey::new("apps", "w1-cache-02"),
            result: Ok(Box::new(read)),
        },
        Action::CopyMessage,
    ]);
    // The first frame comes after every action of `first` was applied (and its effects run).
    let (drawn_tx, mut drawn_rx) = mpsc::unbounded_channel::<()>();
    let mut observer = |_: &State, _: &FrameInfo| {
        let _ = drawn_tx.send(());
    };
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    app::drive(app::Drive {
        terminal: &mut terminal,
        state: &mut state,
        rt: &mut rt,
        first,
        keys: futures::stream::pending(),
        stop: async {
            drawn_rx.recv().await;
        },
        theme: Theme::MONO,
        observer: &mut observer,
    })
    .await
    .unwrap();

    let out = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
    let body = out
        .strip_prefix("\x1b]52;c;")
        .and_then(|s| s.strip_suffix("\x1b\\"))
        .unwrap_or_else(|| panic!("not one OSC 52 sequence: {out:?}"));
    let copied = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    let copied = String::from_utf8(copied).unwrap();
    // The whole failure as the API has it, its line break included, after reason and phase.
    assert!(
        copied.starts_with("ImportFailed in Importing: ") && copied.contains(support::LONG_FAILURE),
        "{copied:?}"
    );
    let flash = state
        .flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default();
    assert!(
        flash.contains(&copied.chars().count().to_string()),
        "{flash}"
    );
}
