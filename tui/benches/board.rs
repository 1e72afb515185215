//! Render time per frame at 200×60 with 10,000 migrations, and the state's cost per watch event.
//! A plain harness (no criterion): it prints the median and p99 of many runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use support::C0;

use std::{
    cell::Cell,
    rc::Rc,
    time::{Duration, Instant},
};

use ferry::{
    app::Sched,
    state::{Action, ConnState, Edit, Nav, Resource, Scope, Screen, State, update},
    ui::{self, Options, Theme},
};
use ferry_crds::VirtualMachineMigration;
use ratatui::{
    Terminal, TerminalOptions, Viewport,
    backend::{CrosstermBackend, TestBackend},
    layout::Rect,
};

fn stats(name: &str, mut samples: Vec<Duration>) {
    if samples.is_empty() {
        println!("{name:<48} no samples");
        return;
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    println!(
        "{name:<48} n={:<6} median {:>9.3} µs   p99 {:>9.3} µs   max {:>9.3} µs",
        samples.len(),
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        samples[samples.len() - 1].as_secs_f64() * 1e6
    );
}

fn loaded(n: usize) -> State {
    let mut s = State::new("bench", Scope::All, false, support::now());
    let t = Instant::now();
    update(&mut s, Action::migrations_listed(C0, support::many(n, 20)));
    println!(
        "list of {n} migrations into the state: {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    update(
        &mut s,
        Action::Resize(Screen {
            width: 200,
            height: 60,
        }),
    );
    s
}

/// A terminal that only counts what it is sent.
struct Counted(Rc<Cell<usize>>);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.set(self.0.get() + buf.len());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Frames as the end-to-end bench's stream makes them, offline: between two frames (33 ms of
/// clock), three status patches on random rows, one in ten on a row on screen, as the e2e
/// writer sends 100 a second; each frame drawn through crossterm into memory, so the
/// terminal diff and the escape codes count too. Returns the frame times and the bytes a frame
/// wrote on average, and the drawing thread's CPU time per frame (Linux), which on a busy
/// machine tells the work apart from the waits for a CPU.
fn stream(
    s: &mut State,
    objs: &[VirtualMachineMigration],
    frames: usize,
) -> (Vec<Duration>, Vec<Duration>, usize) {
    let written = Rc::new(Cell::new(0usize));
    let mut term = Terminal::with_options(
        CrosstermBackend::new(Counted(written.clone())),
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, 200, 60)),
        },
    )
    .unwrap();
    let opts = Options {
        theme: Theme::COLOR,
        logs: false,
    };
    let mut now = s.now;
    let mut seed: u64 = 7;
    let (mut samples, mut cpu, mut bytes) = (vec![], vec![], 0);
    for i in 0..frames + 5 {
        for j in 0..3 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let pct = (seed >> 40) % 100;
            let obj = if (i * 3 + j) % 10 == 0 && s.index.visible_len() > 0 {
                let shown = s.offset + (seed >> 33) as usize % s.page.min(s.index.visible_len());
                let key = s.index.visible(shown).map(|r| r.key.clone()).unwrap();
                objs.iter()
                    .find(|o| o.metadata.name.as_deref() == Some(&key.name))
                    .unwrap()
            } else {
                &objs[(seed >> 33) as usize % objs.len()]
            };
            let mut o = obj.clone();
            if let Some(st) = o.status.as_mut() {
                st.progress = Some(ferry_crds::Progress {
                    percent: pct as f64,
                    ..Default::default()
                });
                st.message = Some(format!("bench {pct}"));
            }
            update(s, Action::MigrationApplied(C0, Box::new(o)));
        }
        now = now
            .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(33))
            .unwrap();
        update(s, Action::Tick(now));
        written.set(0);
        let (drawn, took, sched) = Sched::around(true, || term.draw(|f| ui::draw(f, s, opts)));
        drawn.unwrap();
        // The first frames paint the whole screen.
        if i >= 5 {
            samples.push(took);
            cpu.extend(sched.map(|s| s.cpu));
            bytes += written.get();
        }
    }
    (samples, cpu, bytes / frames.max(1))
}

fn main() {
    let n = 10_000;
    let mut s = loaded(n);
    let mut term = Terminal::new(TestBackend::new(200, 60)).unwrap();
    let opts = Options {
        theme: Theme::COLOR,
        logs: false,
    };
    for _ in 0..5 {
        term.draw(|f| ui::draw(f, &s, opts)).unwrap();
    }
    let mut samples = vec![];
    for i in 0..500 {
        update(
            &mut s,
            Action::Nav(if i % 100 < 50 {
                Nav::PageDown
            } else {
                Nav::PageUp
            }),
        );
        let t = Instant::now();
        term.draw(|f| ui::draw(f, &s, opts)).unwrap();
        samples.push(t.elapsed());
    }
    stats("render 200x60, 10k rows (board)", samples);

    update(&mut s, Action::Nav(Nav::Top));
    update(&mut s, Action::Enter);
    let mut samples = vec![];
    for _ in 0..200 {
        let t = Instant::now();
        term.draw(|f| ui::draw(f, &s, opts)).unwrap();
        samples.push(t.elapsed());
    }
    stats("render 200x60, 10k rows (details)", samples);
    update(&mut s, Action::Back);

    // Watch events: status changes of random rows (progress moves, sorted by progress so the
    // row moves on the board), the state's work per event.
    let objs = support::many(n, 20);
    while s.index.sort().key != ferry::state::SortKey::Progress {
        update(&mut s, Action::CycleSort);
    }
    let mut samples = vec![];
    let mut seed: u64 = 42;
    for i in 0..20_000usize {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let mut o = objs[(seed >> 33) as usize % n].clone();
        if let Some(st) = o.status.as_mut() {
            st.progress = Some(ferry_crds::Progress {
                percent: (i % 100) as f64,
                ..Default::default()
            });
        }
        let t = Instant::now();
        update(&mut s, Action::MigrationApplied(C0, Box::new(o)));
        samples.push(t.elapsed());
    }
    stats("update per watch event (10k rows, sort PROGRESS)", samples);

    let mut samples = vec![];
    update(&mut s, Action::StartFilter);
    for c in "phase:Importing".chars() {
        let t = Instant::now();
        update(&mut s, Action::Edit(Edit::Char(c)));
        samples.push(t.elapsed());
    }
    stats("filter keystroke (10k rows, full rebuild)", samples);
    update(&mut s, Action::Submit);

    // The e2e bench's stream, offline: sorted by name, live, with and without the filter.
    let mut s = loaded(n);
    for r in Resource::ALL {
        update(&mut s, Action::Connection(C0, r, ConnState::Live));
    }
    let (samples, cpu, bytes) = stream(&mut s, &objs, 2000);
    stats(
        &format!("stream frame 200x60, crossterm, no filter ({bytes} B/frame)"),
        samples,
    );
    stats("  … its CPU time", cpu);
    update(&mut s, Action::StartFilter);
    for c in "phase:Importing".chars() {
        update(&mut s, Action::Edit(Edit::Char(c)));
    }
    update(&mut s, Action::Submit);
    let (samples, cpu, bytes) = stream(&mut s, &objs, 2000);
    stats(
        &format!("stream frame 200x60, crossterm, phase:Importing ({bytes} B/frame)"),
        samples,
    );
    stats("  … its CPU time", cpu);
}
