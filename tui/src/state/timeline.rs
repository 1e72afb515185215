//! Where the migrations' time went: each one's stays in its phases (from `status.history`) on a
//! time axis shared by the rows shown, which phase filled each cell of a bar, the share of each
//! phase over all the rows shown, and which migrations are slow. Pure: `ui/timeline.rs` draws it.

use ferry_crds::Phase;

use super::{Row, Timestamp};

/// One stay in a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stay {
    /// The phase.
    pub phase: Phase,
    /// Entered, in seconds since the epoch.
    pub from: i64,
    /// Left (now for the current phase; a finished migration's last phase is an instant).
    pub to: i64,
}

/// The stays of a migration, oldest first.
pub fn stays(row: &Row, now: Timestamp) -> impl Iterator<Item = Stay> + '_ {
    let now = now.as_second();
    row.history.iter().map(move |h| {
        let from = h.entered;
        let to = match (h.left, h.phase.is_terminal()) {
            (Some(t), _) => t,
            (None, true) => from,
            (None, false) => now,
        };
        Stay {
            phase: h.phase,
            from,
            to: to.max(from),
        }
    })
}

/// From the first stay's start to the last one's end, in seconds; `None` without history.
pub fn took(row: &Row, now: Timestamp) -> Option<i64> {
    let mut it = stays(row, now);
    let first = it.next()?;
    let last = it.last().unwrap_or(first);
    Some(last.to - first.from)
}

/// The time axis of a set of rows: from the earliest stay to the latest end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis {
    /// Seconds since the epoch at the left edge.
    pub start: i64,
    /// Seconds since the epoch at the right edge (after `start`).
    pub end: i64,
}

impl Axis {
    /// Seconds the axis spans.
    pub fn span(&self) -> i64 {
        self.end - self.start
    }
}

/// What one cell of a bar shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Before the migration's first phase or after its end.
    Empty,
    /// The phase that took most of the cell's time; `starts` when a stay in it begins here.
    Phase {
        /// The phase.
        phase: Phase,
        /// Whether a stay in this phase begins in this cell (the bar writes its letter there).
        starts: bool,
    },
}

/// The bar of a migration `width` cells wide on `axis`.
///
/// # Guarantees
/// `width` cells; a cell is a phase exactly when some stay overlaps it (an instant — a finished
/// migration's last phase — fills the cell it falls in); each stay of at least a cell's time
/// starts in some cell marked `starts`.
pub fn bar(row: &Row, now: Timestamp, axis: Axis, width: usize) -> Vec<Cell> {
    let mut cells = vec![Cell::Empty; width];
    if width == 0 {
        return cells;
    }
    let span = axis.span().max(1) as f64;
    let cell_of = |t: i64| -> usize {
        let x = ((t - axis.start) as f64 / span * width as f64).floor();
        (x.max(0.0) as usize).min(width - 1)
    };
    // Time of each phase in each cell, written in order: a later stay wins a cell only with
    // more time in it. An instant (a finished migration's last phase) takes the cell it is in.
    let mut best: Vec<i64> = vec![-1; width];
    let all: Vec<Stay> = stays(row, now).collect();
    for s in &all {
        let (a, b) = (cell_of(s.from), cell_of(s.to));
        for (i, cell) in cells.iter_mut().enumerate().take(b + 1).skip(a) {
            let lo = axis.start + (i as f64 * span / width as f64) as i64;
            let hi = axis.start + ((i + 1) as f64 * span / width as f64) as i64;
            let overlap = s.to.min(hi) - s.from.max(lo);
            // An instant — how a finished migration ended — always shows.
            let instant = s.from == s.to;
            if instant || overlap > best[i] && overlap > 0 {
                best[i] = if instant { i64::MAX } else { overlap };
                *cell = Cell::Phase {
                    phase: s.phase,
                    starts: false,
                };
            }
        }
    }
    // Each stay's letter goes in the first cell it holds, even when another stay holds the
    // cell where it began.
    for s in &all {
        let (a, b) = (cell_of(s.from), cell_of(s.to));
        if let Some(cell) = cells[a..=b]
            .iter_mut()
            .find(|c| matches!(c, Cell::Phase { phase, .. } if *phase == s.phase))
        {
            *cell = Cell::Phase {
                phase: s.phase,
                starts: true,
            };
        }
    }
    cells
}

/// What the timeline shows about all its rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The shared axis; `None` when no row has history.
    pub axis: Option<Axis>,
    /// Seconds spent in each phase, summed over the rows, in [`Phase::ALL`] order.
    pub per_phase: [i64; Phase::ALL.len()],
    /// The median time a migration took (rows with history).
    pub median_took: Option<i64>,
    /// Rows that took more than [`SLOW_FACTOR`] times the median.
    pub slow: usize,
}

/// A migration is slow when it took more than this many times the median.
pub const SLOW_FACTOR: i64 = 2;

impl Summary {
    /// The summary of `rows` at `now`.
    pub fn of<'a>(rows: impl Iterator<Item = &'a Row>, now: Timestamp) -> Summary {
        let mut axis: Option<Axis> = None;
        let mut per_phase = [0i64; Phase::ALL.len()];
        let mut tooks = vec![];
        for r in rows {
            let mut first = None;
            let mut last = None;
            for s in stays(r, now) {
                per_phase[s.phase.index()] += s.to - s.from;
                first.get_or_insert(s.from);
                last = Some(s.to);
            }
            if let (Some(a), Some(b)) = (first, last) {
                tooks.push(b - a);
                axis = Some(match axis {
                    None => Axis { start: a, end: b },
                    Some(x) => Axis {
                        start: x.start.min(a),
                        end: x.end.max(b),
                    },
                });
            }
        }
        let median_took = if tooks.is_empty() {
            None
        } else {
            let mid = tooks.len() / 2;
            Some(*tooks.select_nth_unstable(mid).1)
        };
        let slow = median_took.map_or(0, |m| {
            tooks.iter().filter(|t| is_slow(**t, Some(m))).count()
        });
        Summary {
            axis: axis.map(|a| Axis {
                start: a.start,
                end: a.end.max(a.start + 1),
            }),
            per_phase,
            median_took,
            slow,
        }
    }

    /// Share of the time spent in each phase that took any, in percent, biggest first.
    pub fn shares(&self) -> Vec<(Phase, f64)> {
        let total: i64 = self.per_phase.iter().sum();
        if total <= 0 {
            return vec![];
        }
        let mut out: Vec<(Phase, f64)> = Phase::ALL
            .iter()
            .zip(self.per_phase)
            .filter(|(_, s)| *s > 0)
            .map(|(p, s)| (*p, s as f64 * 100.0 / total as f64))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }
}

/// Whether a migration that took `took` seconds is slow against the median.
pub fn is_slow(took: i64, median: Option<i64>) -> bool {
    median.is_some_and(|m| m > 0 && took > SLOW_FACTOR * m)
}

#[cfg(test)]
mod tests {
    use ferry_crds::{PhaseTransition, fixtures::migration, fixtures::ts};

    use super::*;
    use crate::state::ClusterId;

    fn row(stays: &[(Phase, i64, Option<i64>)]) -> Row {
        let mut o = migration("m").with_phase(stays.last().map_or(Phase::Pending, |s| s.0));
        o.status.as_mut().unwrap().history = stays
            .iter()
            .map(|(p, a, b)| PhaseTransition {
                phase: *p,
                attempt: 1,
                entered_at: ts(*a),
                left_at: b.map(ts),
            })
            .collect();
        Row::from_object(ClusterId::default(), o)
    }

    /// Seconds since the epoch of the fixtures' `ts(secs)`.
    fn at(secs: i64) -> i64 {
        ts(secs).0.as_second()
    }

    fn axis(from: i64, to: i64) -> Axis {
        Axis {
            start: at(from),
            end: at(to),
        }
    }

    fn letters(cells: &[Cell]) -> String {
        cells
            .iter()
            .map(|c| match c {
                Cell::Empty => ' ',
                Cell::Phase { phase, starts } => {
                    let ch = phase.as_str().chars().next().unwrap_or('?');
                    if *starts { ch } else { ch.to_ascii_lowercase() }
                }
            })
            .collect()
    }

    #[test]
    fn a_bar_shows_each_phase_where_it_took_the_time() {
        // 100 s over 10 cells: queued 0-20, converting 20-50, importing 50-100 (now).
        let r = row(&[
            (Phase::Queued, 0, Some(20)),
            (Phase::Converting, 20, Some(50)),
            (Phase::Importing, 50, None),
        ]);
        let axis = self::axis(0, 100);
        assert_eq!(letters(&bar(&r, ts(100).0, axis, 10)), "QqCccIiiii");
        // Half the axis later, the bar fills the left half.
        let axis = self::axis(0, 200);
        assert_eq!(letters(&bar(&r, ts(100).0, axis, 10)), "QCcIi     ");
    }

    #[test]
    fn a_finished_migration_ends_in_an_instant_and_short_stays_still_show_their_start() {
        let r = row(&[
            (Phase::Preparing, 0, Some(2)),
            (Phase::Converting, 2, Some(90)),
            (Phase::Succeeded, 90, None),
        ]);
        let cells = bar(&r, ts(500).0, axis(0, 100), 10);
        assert_eq!(letters(&cells), "CccccccccS");
        assert_eq!(took(&r, ts(500).0), Some(90), "not until now: it finished");
    }

    #[test]
    fn the_summary_sums_phases_and_flags_what_took_more_than_twice_the_median() {
        let rows = [
            row(&[
                (Phase::Converting, 0, Some(10)),
                (Phase::Succeeded, 10, None),
            ]),
            row(&[
                (Phase::Converting, 0, Some(12)),
                (Phase::Succeeded, 12, None),
            ]),
            row(&[(Phase::Importing, 5, Some(65)), (Phase::Failed, 65, None)]),
            row(&[]),
        ];
        let s = Summary::of(rows.iter(), ts(100).0);
        assert_eq!(s.axis, Some(axis(0, 65)));
        assert_eq!(s.median_took, Some(12));
        assert_eq!(s.slow, 1);
        let shares = s.shares();
        assert_eq!(shares[0].0, Phase::Importing);
        assert!((shares[0].1 - 60.0 * 100.0 / 82.0).abs() < 1e-9);
        assert_eq!(Summary::of([row(&[])].iter(), ts(1).0).axis, None);
    }
}
