//! Colours, and their absence under `NO_COLOR`: every meaning also has a glyph or a word.

use ferry_crds::{Phase, Stage, WavePhase};

use crate::state::Pip;
use ratatui::style::{Color, Modifier, Style};

/// Styles of the cockpit.
#[derive(Clone, Copy, Debug)]
pub struct Theme {
    color: bool,
}

impl Theme {
    /// With colours.
    pub const COLOR: Theme = Theme { color: true };
    /// Without colours (`NO_COLOR`): only bold, dim and reverse.
    pub const MONO: Theme = Theme { color: false };

    /// Colours unless `NO_COLOR` is set to anything non-empty.
    pub fn from_env() -> Theme {
        match std::env::var_os("NO_COLOR") {
            Some(v) if !v.is_empty() => Theme::MONO,
            _ => Theme::COLOR,
        }
    }

    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    /// Normal text.
    pub fn text(&self) -> Style {
        Style::new()
    }

    /// Secondary text.
    pub fn dim(&self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new().add_modifier(Modifier::DIM)
        }
    }

    /// Titles and column headers.
    pub fn title(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    /// The row under the cursor.
    pub fn cursor(&self, focused: bool) -> Style {
        match (self.color, focused) {
            (true, true) => Style::new()
                .bg(Color::Rgb(40, 60, 90))
                .add_modifier(Modifier::BOLD),
            (true, false) => Style::new().bg(Color::Rgb(45, 45, 45)),
            (false, true) => Style::new().add_modifier(Modifier::REVERSED),
            (false, false) => Style::new().add_modifier(Modifier::UNDERLINED),
        }
    }

    /// Good news.
    pub fn ok(&self) -> Style {
        self.fg(Color::Green)
    }

    /// Needs attention.
    pub fn warn(&self) -> Style {
        self.fg(Color::Yellow)
    }

    /// Bad news.
    pub fn bad(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    /// Keys in hints and help.
    pub fn key(&self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    /// A badge such as STALE or READ-ONLY.
    pub fn badge(&self, bad: bool) -> Style {
        if self.color {
            let bg = if bad { Color::Red } else { Color::Blue };
            Style::new()
                .bg(bg)
                .fg(Color::White)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        }
    }

    /// A phase name.
    pub fn phase(&self, p: Phase) -> Style {
        let c = match p {
            Phase::Pending | Phase::Queued => Color::Gray,
            Phase::Preparing => Color::LightBlue,
            Phase::Converting => Color::Blue,
            Phase::Importing => Color::Cyan,
            Phase::CuttingOver | Phase::ConvertingGuest => Color::LightCyan,
            Phase::CreatingVM | Phase::Starting => Color::LightMagenta,
            Phase::Validating => Color::LightGreen,
            Phase::Succeeded => Color::Green,
            Phase::Failed => return self.bad(),
            Phase::Cancelled => Color::Yellow,
            // Its own colour: the gate caught it and the source runs again.
            Phase::RolledBack => return self.fg(Color::LightRed),
        };
        self.fg(c)
    }

    /// A wave phase.
    pub fn wave_phase(&self, p: WavePhase) -> Style {
        match p {
            WavePhase::Pending => self.dim(),
            WavePhase::Running => self.fg(Color::Cyan),
            WavePhase::Paused => self.warn(),
            WavePhase::Succeeded => self.ok(),
            WavePhase::Failed => self.bad(),
            WavePhase::Cancelled => self.warn(),
        }
    }

    /// A condition pip and its style.
    pub fn pip(&self, p: Pip) -> (&'static str, Style) {
        match p {
            Pip::Done => ("●", self.ok()),
            Pip::Failed => ("✕", self.bad()),
            Pip::Retrying => ("↻", self.warn()),
            Pip::Waiting => ("○", self.dim()),
        }
    }

    /// The letter that starts a phase's stretch of a timeline bar, and the fill after it.
    pub fn phase_mark(&self, p: Phase) -> (&'static str, &'static str) {
        match p {
            Phase::Pending => ("·", "┄"),
            Phase::Queued => ("Q", "┄"),
            Phase::Preparing => ("P", "━"),
            Phase::Converting => ("C", "━"),
            Phase::Importing => ("I", "━"),
            Phase::CuttingOver => ("X", "━"),
            Phase::ConvertingGuest => ("O", "━"),
            Phase::CreatingVM => ("V", "━"),
            Phase::Starting => ("S", "━"),
            Phase::Validating => ("G", "━"),
            Phase::Succeeded => ("✓", "━"),
            Phase::Failed => ("✕", "━"),
            Phase::Cancelled => ("⊘", "━"),
            Phase::RolledBack => ("↶", "━"),
        }
    }

    /// Filled part of a gauge.
    pub fn gauge(&self, p: Phase) -> Style {
        match p.stage() {
            Stage::Failed => self.fg(Color::Red),
            Stage::Succeeded => self.fg(Color::Green),
            Stage::Pending | Stage::Queued | Stage::InFlight | Stage::Cancelled => {
                self.fg(Color::Cyan)
            }
        }
    }
}
