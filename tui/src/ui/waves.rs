//! The wave strip: one line per wave (done/total bar, failed, in flight vs maxInFlight,
//! throughput, ETA) and a sparkline of completions per minute for the selected wave.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Paragraph, Sparkline},
};

use super::{Theme, format};
use crate::{
    state::{Focus, Refused, State, WaveRow},
    strings::{self, waves as text},
};

/// One wave's progress: name (after its context on a board of several clusters), phase,
/// done/total, failed, in flight, throughput, ETA and its intents. Shared with the wave picker.
pub fn progress_spans(state: &State, w: &WaveRow, t: &Theme, wide: bool) -> Vec<Span<'static>> {
    let done = w.done();
    let (fill, empty) = format::gauge(w.percent_done(), if wide { 16 } else { 8 });
    let (name, room) = if state.multi_cluster() {
        let name = text::in_context(state.context_of(w.key.cluster), &w.key.name);
        (name, if wide { 24 } else { 14 })
    } else {
        (w.key.name.clone(), if wide { 16 } else { 10 })
    };
    let mut spans = vec![
        Span::styled(format::fit(&name, room), t.title()),
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
    }
    match w.refused {
        Some(Refused::Collisions(n)) => spans.push(Span::styled(text::collisions(n), t.bad())),
        Some(Refused::SelectorTooBroad) => {
            spans.push(Span::styled(text::SELECTOR_TOO_BROAD, t.bad()));
        }
        None => {}
    }
    spans.push(Span::raw(format!(" ⇉{}/{}", w.in_flight, w.max_in_flight)));
    if wide {
        spans.push(Span::styled(text::IN_FLIGHT, t.dim()));
    }
    if let Some(tp) = w.throughput_per_hour {
        spans.push(Span::raw(text::per_hour(tp)));
    }
    if let Some(eta) = w.eta_seconds {
        spans.push(Span::raw(format!(
            " {}",
            strings::eta(&format::duration(eta))
        )));
    }
    if w.paused {
        spans.push(Span::styled(text::PAUSED, t.warn()));
    }
    if w.cancel {
        spans.push(Span::styled(text::CANCEL, t.warn()));
    }
    spans
}

fn line(
    state: &State,
    w: &WaveRow,
    t: &Theme,
    selected: bool,
    focused: bool,
    wide: bool,
) -> Line<'static> {
    let mut spans = vec![Span::styled(if selected { "▸ " } else { "  " }, t.key())];
    spans.extend(progress_spans(state, w, t, wide));
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
                wide,
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
