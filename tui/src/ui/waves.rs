//! The wave strip: one line per wave (done/total bar, failed, preflight's counts, a warm wave's
//! precopied migrations and its cutover counted down, in flight vs maxInFlight, throughput, ETA)
//! and a sparkline of completions per minute for the selected wave.

use ferry_crds::WavePreflight;
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Paragraph, Sparkline},
};

use super::{Theme, format};
use crate::{
    keys,
    state::{Action, Focus, Refused, State, Timestamp, WaveCutover, WaveRow},
    strings::{self, waves as text},
};

/// One wave's progress: name (after its context on a board of several clusters), phase,
/// done/total, failed, preflight, in flight, throughput, ETA and its intents, for a line
/// `room` cells wide. Shared with the wave picker.
pub fn progress_spans(
    state: &State,
    w: &WaveRow,
    t: &Theme,
    wide: bool,
    room: usize,
) -> Vec<Span<'static>> {
    let mut spans = counts_spans(state, w, t, wide);
    let mut rest = ranked_rest(w, t, wide);
    // Before in flight and throughput: a wave paused to be planned shows what holds its VMs
    // while nothing else about it moves. In words when the whole line then fits (before the
    // wave moves, nothing else fills it), else in glyphs.
    if let Some(p) = &w.preflight {
        let used = width(&spans, &rest);
        let words = preflight_spans(p, t, true);
        let fits = used + words.iter().map(Span::width).sum::<usize>() <= room;
        spans.extend(if fits {
            words
        } else {
            preflight_spans(p, t, false)
        });
    }
    // Before in flight too: while a warm wave's migrations wait, its cutover is what comes next.
    if let Some(words) = warm_text(w, state.now, true) {
        let fits = width(&spans, &rest) + Span::raw(words.as_str()).width() <= room;
        let shown = if fits {
            words
        } else {
            warm_text(w, state.now, false).unwrap_or_default()
        };
        let due = w
            .warm
            .is_some_and(|warm| warm.cutover(state.now) == WaveCutover::Now);
        spans.push(Span::styled(shown, if due { t.warn() } else { t.text() }));
    }
    // One cell is left free: what is drawn after the line (the strip's sparkline label) never
    // reads as part of it.
    let head: usize = spans.iter().map(Span::width).sum();
    drop_lowest(&mut rest, head, room.saturating_sub(1));
    spans.extend(rest.into_iter().map(|(_, s)| s));
    spans
}

/// The wave's name, phase, gauge and done/total, and what failed or was refused.
fn counts_spans(state: &State, w: &WaveRow, t: &Theme, wide: bool) -> Vec<Span<'static>> {
    let done = w.done();
    let (fill, empty) = format::gauge(w.percent_done(), if wide { 16 } else { 8 });
    let (name, name_w) = if state.multi_cluster() {
        let name = text::in_context(state.context_of(w.key.cluster), &w.key.name);
        (name, if wide { 24 } else { 14 })
    } else {
        (w.key.name.clone(), if wide { 16 } else { 10 })
    };
    let mut spans = vec![
        Span::styled(format::fit(&name, name_w), t.title()),
        Span::raw(" "),
        Span::styled(
            format!("{:<10}", format!("{:?}", w.phase)),
            t.wave_phase(w.phase),
        ),
        Span::styled(fill, t.ok()),
        Span::styled(empty, t.dim()),
        Span::raw(format!(" {done}/{}", w.total)),
    ];
    if w.counts.failed > 0 {
        spans.push(Span::styled(text::failed(w.counts.failed), t.bad()));
        // The way to them: the problems view, grouped by cause.
        if let Some(key) = keys::footer_key(&Action::ShowProblems) {
            spans.push(Span::styled(text::problems_key(&key), t.key()));
        }
    }
    match w.refused {
        Some(Refused::Collisions(n)) => spans.push(Span::styled(text::collisions(n), t.bad())),
        Some(Refused::SelectorTooBroad) => {
            spans.push(Span::styled(text::SELECTOR_TOO_BROAD, t.bad()));
        }
        None => {}
    }
    spans
}

/// What follows the counts, each with its priority: when the line does not fit its room, the
/// lowest goes first (the in-flight label, then throughput, then the ETA), never the intents
/// (5).
fn ranked_rest(w: &WaveRow, t: &Theme, wide: bool) -> Vec<(u8, Span<'static>)> {
    let mut rest: Vec<(u8, Span<'static>)> = vec![(
        4,
        Span::raw(format!(" ⇉{}/{}", w.in_flight, w.max_in_flight)),
    )];
    if wide {
        rest.push((1, Span::styled(text::IN_FLIGHT, t.dim())));
    }
    if let Some(tp) = w.throughput_per_hour {
        rest.push((2, Span::raw(text::per_hour(tp))));
    }
    if let Some(eta) = w.eta_seconds {
        rest.push((
            3,
            Span::raw(format!(" {}", strings::eta(&format::duration(eta)))),
        ));
    }
    // What holds the rest of the wave back is never dropped for room.
    if w.outside_window > 0 {
        rest.push((
            5,
            Span::styled(text::outside_window(w.outside_window), t.warn()),
        ));
    }
    if w.at_risk > 0 {
        rest.push((5, Span::styled(text::at_risk(w.at_risk), t.warn())));
    }
    if w.does_not_fit {
        rest.push((5, Span::styled(text::DOES_NOT_FIT, t.warn())));
    }
    if w.paused {
        rest.push((5, Span::styled(text::PAUSED, t.warn())));
    }
    if w.cancel {
        rest.push((5, Span::styled(text::CANCEL, t.warn())));
    }
    rest
}

/// The width of `spans` and `rest` together.
fn width(spans: &[Span<'_>], rest: &[(u8, Span<'_>)]) -> usize {
    spans
        .iter()
        .chain(rest.iter().map(|(_, s)| s))
        .map(Span::width)
        .sum()
}

/// Drops from `rest` the lowest priority first until it fits `budget` after a `head` that wide
/// (or only intents are left).
fn drop_lowest(rest: &mut Vec<(u8, Span<'_>)>, head: usize, budget: usize) {
    while head + rest.iter().map(|(_, s)| s.width()).sum::<usize>() > budget {
        let Some(lowest) = rest
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| *p < 5)
            .min_by_key(|(_, (p, _))| *p)
            .map(|(i, _)| i)
        else {
            break;
        };
        rest.remove(lowest);
    }
}

/// A warm wave's cutover on its line: how many of its migrations are precopied and waiting,
/// and when the cutover comes, counted down from `now` — in words (`3 precopied, waiting ·
/// cutover 03:13Z in 2h13m`, `… · cutover now` once asked for or due, `… · cutover: not set`),
/// else in glyphs (`◷3 cutover in 2h13m`); `None` for a cold or finished wave. Pure.
pub fn warm_text(w: &WaveRow, now: Timestamp, words: bool) -> Option<String> {
    let warm = w.warm.filter(|_| !w.phase.is_terminal())?;
    let cutover = match warm.cutover(now) {
        WaveCutover::NotSet => text::cutover_not_set(words).to_owned(),
        WaveCutover::Now => text::cutover_now(words).to_owned(),
        WaveCutover::At { at, in_secs } => {
            text::cutover_at(&format::moment(at, now), &format::duration(in_secs), words)
        }
    };
    Some(format!("{}{cutover}", text::waiting(warm.waiting, words)))
}

/// `preflight 10 ready · 2 blocked · 3 warnings`, or in glyphs `preflight 10✓ 2✕ 3⚠`; a count
/// coloured only when it is not zero.
fn preflight_spans(p: &WavePreflight, t: &Theme, words: bool) -> Vec<Span<'static>> {
    let sep = if words { text::SEPARATOR } else { " " };
    let style = |n: i32, s| if n > 0 { s } else { t.dim() };
    vec![
        Span::styled(text::PREFLIGHT, t.dim()),
        Span::styled(text::ready(p.ready, words), style(p.ready, t.ok())),
        Span::styled(sep, t.dim()),
        Span::styled(text::blocked(p.blocked, words), style(p.blocked, t.bad())),
        Span::styled(sep, t.dim()),
        Span::styled(
            text::warnings(p.warnings, words),
            style(p.warnings, t.warn()),
        ),
    ]
    .into_iter()
    // The wave's disks together exceed a quota (each VM may fit alone): the details say which.
    .chain((!p.quota_short.is_empty()).then(|| Span::styled(text::quota_short(words), t.bad())))
    .collect()
}

fn line(
    state: &State,
    w: &WaveRow,
    t: &Theme,
    selected: bool,
    focused: bool,
    (wide, room): (bool, usize),
) -> Line<'static> {
    let mut spans = vec![Span::styled(if selected { "▸ " } else { "  " }, t.key())];
    spans.extend(progress_spans(state, w, t, wide, room.saturating_sub(2)));
    let mut l = Line::from(spans);
    if selected && focused {
        l = l.style(t.cursor(true));
    }
    l
}

/// Draws the strip.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect) {
    if area.height == 0 || state.waves.is_empty() {
        return;
    }
    let wide = area.width >= 140;
    let spark_w = if wide { 40 } else { 20 };
    let [text, spark] =
        Layout::horizontal([Constraint::Min(40), Constraint::Length(spark_w)]).areas(area);
    let selected = state.selected_wave().map(|w| w.key.clone());
    let n = area.height as usize;
    let first = state
        .wave_cursor
        .saturating_sub(n - 1)
        .min(state.waves.len().saturating_sub(n));
    let focused = state.focus == Focus::Waves;
    let lines: Vec<Line> = state.waves[first..]
        .iter()
        .take(n)
        .map(|w| {
            line(
                state,
                w,
                t,
                Some(&w.key) == selected.as_ref(),
                focused,
                (wide, usize::from(text.width)),
            )
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), text);
    if let Some(w) = state.selected_wave() {
        let label = text::DONE_PER_MINUTE;
        let [l, s] =
            Layout::horizontal([Constraint::Length(label.len() as u16), Constraint::Min(1)])
                .areas(spark);
        frame.render_widget(Paragraph::new(Span::styled(label, t.dim())), l);
        let minute = state.now.as_second().div_euclid(60);
        let data = state
            .index
            .completions_per_minute(&w.key, minute, s.width as usize);
        frame.render_widget(Sparkline::default().data(&data).style(t.ok()), s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ClusterId;
    use ferry_crds::{
        MigrationMode, MigrationWaveStatus, WarmSpec,
        fixtures::{ts, wave},
    };

    fn warm_wave(waiting: i32, spec: Option<WarmSpec>) -> WaveRow {
        let mut w = wave("w", 4);
        w.spec.template.mode = MigrationMode::Warm;
        w.spec.warm = spec;
        w.status = Some(MigrationWaveStatus {
            phase: ferry_crds::WavePhase::Running,
            waiting_for_cutover: waiting,
            ..MigrationWaveStatus::default()
        });
        WaveRow::from_object(ClusterId(0), w)
    }

    fn at(secs: i64) -> Option<WarmSpec> {
        Some(WarmSpec {
            cutover_at: Some(ts(secs)),
            ..WarmSpec::default()
        })
    }

    #[test]
    fn a_wave_says_how_many_its_window_holds_and_are_at_risk_and_never_drops_them_for_room() {
        let mut w = wave("w", 4);
        w.status = Some(MigrationWaveStatus {
            phase: ferry_crds::WavePhase::Running,
            forecast: Some(ferry_crds::WaveForecast {
                outside_window: 3,
                at_risk: 5,
                window_short: "the wave does not fit its window".into(),
                ..Default::default()
            }),
            ..MigrationWaveStatus::default()
        });
        let row = WaveRow::from_object(ClusterId(0), w);
        let mut rest = ranked_rest(&row, &Theme::MONO, false);
        drop_lowest(&mut rest, 0, 1);
        let kept: String = rest.iter().map(|(_, s)| s.content.to_string()).collect();
        assert_eq!(
            kept,
            " ⊘ 3 outside the window ⚠ 5 at risk ⚠ does not fit the window"
        );
    }

    #[test]
    fn a_warm_wave_says_how_many_wait_and_counts_its_cutover_down() {
        // The fixtures' clock: ts(3600) is 01:00Z.
        let now = |secs| ts(secs).0;
        let asked = Some(WarmSpec {
            cutover: true,
            ..WarmSpec::default()
        });
        let cases = [
            (
                warm_wave(3, at(3600 + 7980)),
                now(3600),
                "3 precopied, waiting · cutover 03:13Z in 2h13m",
                "◷3 cutover in 2h13m",
            ),
            // A second later the countdown has moved.
            (
                warm_wave(3, at(3600 + 7980)),
                now(3600 + 7979),
                "3 precopied, waiting · cutover 03:13Z in 1s",
                "◷3 cutover in 1s",
            ),
            (
                warm_wave(3, at(3600 + 7980)),
                now(3600 + 7980),
                "3 precopied, waiting · cutover now",
                "◷3 cutover now",
            ),
            (
                warm_wave(1, asked),
                now(3600),
                "1 precopied, waiting · cutover now",
                "◷1 cutover now",
            ),
            (
                warm_wave(0, None),
                now(3600),
                "0 precopied, waiting · cutover: not set",
                "◷0 no cutover set",
            ),
            (
                warm_wave(2, at(3600 + 2 * 86_400)),
                now(3600),
                "2 precopied, waiting · cutover Jan 3 01:00Z in 2d00h",
                "◷2 cutover in 2d00h",
            ),
        ];
        for (w, now, words, glyphs) in cases {
            assert_eq!(
                warm_text(&w, now, true).as_deref().map(str::trim_start),
                Some(words)
            );
            assert_eq!(
                warm_text(&w, now, false).as_deref().map(str::trim_start),
                Some(glyphs)
            );
        }
    }

    #[test]
    fn a_cold_or_finished_wave_has_no_cutover_to_show() {
        let cold = WaveRow::from_object(ClusterId(0), wave("w", 2));
        assert_eq!(warm_text(&cold, ts(0).0, true), None);
        let mut done = warm_wave(0, at(60));
        done.phase = ferry_crds::WavePhase::Succeeded;
        assert_eq!(warm_text(&done, ts(0).0, true), None);
    }
}
