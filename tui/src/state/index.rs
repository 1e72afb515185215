//! The rows and the sorted, filtered view over them, kept up to date one watch event at a time:
//! an update costs a binary search and a `Vec` shift, never a re-sort of every row.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, HashMap},
    sync::atomic::{AtomicU64, Ordering as AtomicOrdering},
};

use ferry_crds::Phase;

use super::{ClusterId, ObjKey, filter::Filter, row::Row};
use crate::strings::column;

/// Column the board is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// Name, then namespace.
    #[default]
    Name,
    /// Cluster (context), then name.
    Cluster,
    /// Namespace, then name.
    Namespace,
    /// Wave label (rows without a wave last).
    Wave,
    /// Phase in lifecycle order.
    Phase,
    /// Progress percent.
    Progress,
    /// Attempt number.
    Attempt,
    /// Time in the current phase (longest first).
    InPhase,
}

impl SortKey {
    /// The order `s` walks through.
    pub const ALL: [SortKey; 8] = [
        SortKey::Name,
        SortKey::Cluster,
        SortKey::Namespace,
        SortKey::Wave,
        SortKey::Phase,
        SortKey::Progress,
        SortKey::Attempt,
        SortKey::InPhase,
    ];

    /// The next key for `s`; `Namespace` is skipped when only one namespace is shown, `Cluster`
    /// when only one cluster is.
    pub fn next(self, all_namespaces: bool, multi_cluster: bool) -> SortKey {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        let n = Self::ALL[(i + 1) % Self::ALL.len()];
        if (n == SortKey::Namespace && !all_namespaces) || (n == SortKey::Cluster && !multi_cluster)
        {
            n.next(all_namespaces, multi_cluster)
        } else {
            n
        }
    }

    /// Column title.
    pub fn title(self) -> &'static str {
        match self {
            SortKey::Name => column::NAME,
            SortKey::Cluster => column::CLUSTER,
            SortKey::Namespace => column::NAMESPACE,
            SortKey::Wave => column::WAVE,
            SortKey::Phase => column::PHASE,
            SortKey::Progress => column::PROGRESS,
            SortKey::Attempt => column::ATTEMPT,
            SortKey::InPhase => column::IN_PHASE,
        }
    }
}

/// Sort key and direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sort {
    /// The column.
    pub key: SortKey,
    /// Descending.
    pub reverse: bool,
}

/// A total order on rows (ties broken by name, namespace and cluster), so that binary search
/// finds a row.
pub fn compare(sort: Sort, a: &Row, b: &Row) -> Ordering {
    let primary = match sort.key {
        SortKey::Name | SortKey::Namespace => Ordering::Equal,
        SortKey::Cluster => a.key.cluster.cmp(&b.key.cluster),
        SortKey::Wave => match (&a.wave, &b.wave) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        },
        SortKey::Phase => a.phase.cmp(&b.phase),
        SortKey::Progress => a
            .percent
            .unwrap_or(-1.0)
            .total_cmp(&b.percent.unwrap_or(-1.0)),
        SortKey::Attempt => a.attempt.cmp(&b.attempt),
        // Oldest entry first: the longest in its phase leads.
        SortKey::InPhase => a.phase_since.cmp(&b.phase_since),
    };
    let tie = if sort.key == SortKey::Namespace {
        a.key
            .namespace
            .cmp(&b.key.namespace)
            .then_with(|| a.key.name.cmp(&b.key.name))
    } else {
        a.key
            .name
            .cmp(&b.key.name)
            .then_with(|| a.key.namespace.cmp(&b.key.namespace))
    }
    .then_with(|| a.key.cluster.cmp(&b.key.cluster));
    let ord = primary.then(tie);
    if sort.reverse { ord.reverse() } else { ord }
}

/// The one wave the board shows: by name (`:wave w1`, `--wave w1`: in any cluster and
/// namespace), or exactly one MigrationWave (picked from the wave picker or the strip).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveScope {
    /// The wave's name (the migrations' wave label).
    pub name: String,
    /// Its cluster and namespace, when one MigrationWave was picked.
    pub at: Option<(ClusterId, String)>,
}

impl WaveScope {
    /// Every wave of that name.
    pub fn named(name: impl Into<String>) -> WaveScope {
        WaveScope {
            name: name.into(),
            at: None,
        }
    }

    /// Exactly the wave `key`.
    pub fn exactly(key: &ObjKey) -> WaveScope {
        WaveScope {
            name: key.name.clone(),
            at: Some((key.cluster, key.namespace.clone())),
        }
    }

    /// Whether the MigrationWave `key` is (one of) the scoped wave(s).
    pub fn covers(&self, key: &ObjKey) -> bool {
        key.name == self.name
            && self
                .at
                .as_ref()
                .is_none_or(|(c, ns)| *c == key.cluster && *ns == key.namespace)
    }

    /// Whether a migration belongs to the scoped wave(s).
    pub fn holds(&self, row: &Row) -> bool {
        row.wave.as_deref() == Some(self.name.as_str())
            && self
                .at
                .as_ref()
                .is_none_or(|(c, ns)| *c == row.key.cluster && *ns == row.key.namespace)
    }
}

/// [`Index::replace_all`] turns a list's buffer of rows into its slots in place, which takes
/// a slot as large as a row (a `Row` has a niche for `None`).
const _SLOT_IS_A_ROW: () = assert!(size_of::<Option<Row>>() == size_of::<Row>());

/// Every migration in scope, and the visible ones in board order.
#[derive(Debug, Default)]
pub struct Index {
    slots: Vec<Option<Row>>,
    /// Per slot, when its row was last put there (see [`Index::page_revisions`]).
    revisions: Vec<u64>,
    /// Rows put so far.
    revision: u64,
    free: Vec<usize>,
    by_key: HashMap<ObjKey, usize>,
    view: Vec<usize>,
    sort: Sort,
    filter: Filter,
    wave_scope: Option<WaveScope>,
    counts: [u32; Phase::ALL.len()],
    /// wave (cluster, namespace, name) → minute since the epoch → migrations that succeeded in it.
    completions: HashMap<ObjKey, BTreeMap<i64, u32>>,
    /// Visible rows handed out so far (by [`Index::visible`] and [`Index::visible_range`]):
    /// what a frame reads of the board, which must be the rows on screen, not all of them.
    rows_read: AtomicU64,
}

impl Index {
    /// Rows in scope.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// No rows at all.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Rows that pass the filter and the wave scope.
    pub fn visible_len(&self) -> usize {
        self.view.len()
    }

    /// The `i`-th visible row.
    pub fn visible(&self, i: usize) -> Option<&Row> {
        self.rows_read.fetch_add(1, AtomicOrdering::Relaxed);
        self.view.get(i).and_then(|id| self.slots[*id].as_ref())
    }

    /// Visible rows `range`, in board order.
    pub fn visible_range(&self, start: usize, len: usize) -> impl Iterator<Item = &Row> {
        let end = (start + len).min(self.view.len());
        let ids = &self.view[start.min(end)..end];
        self.rows_read
            .fetch_add(ids.len() as u64, AtomicOrdering::Relaxed);
        ids.iter().filter_map(|id| self.slots[*id].as_ref())
    }

    /// When the rows of visible rows `range` were last put (not counted as read: nothing is
    /// drawn from them): a number that grows with every watch change to any row, so the page
    /// changed when these did.
    pub fn page_revisions(&self, start: usize, len: usize) -> impl Iterator<Item = u64> + '_ {
        let end = (start + len).min(self.view.len());
        self.view[start.min(end)..end]
            .iter()
            .map(|id| self.revisions.get(*id).copied().unwrap_or(0))
    }

    fn put(&mut self, id: usize, row: Row) {
        self.revision += 1;
        if self.revisions.len() <= id {
            self.revisions.resize(id + 1, 0);
        }
        self.revisions[id] = self.revision;
        self.slots[id] = Some(row);
    }

    /// How many visible rows were handed out so far: a frame's share of it is what drawing
    /// read of the board.
    pub fn rows_read(&self) -> u64 {
        self.rows_read.load(AtomicOrdering::Relaxed)
    }

    /// A row by key, visible or not.
    pub fn get(&self, key: &ObjKey) -> Option<&Row> {
        self.by_key.get(key).and_then(|id| self.slots[*id].as_ref())
    }

    /// Every row, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Row> {
        self.slots.iter().flatten()
    }

    /// Position of a row on the board, if visible.
    pub fn position(&self, key: &ObjKey) -> Option<usize> {
        let row = self.get(key)?;
        self.search(row).ok()
    }

    /// Rows per phase (whole scope, not only the visible ones), in [`Phase::ALL`] order.
    pub fn counts(&self) -> impl Iterator<Item = (Phase, u32)> + '_ {
        Phase::ALL.into_iter().zip(self.counts.iter().copied())
    }

    /// Count of one phase.
    pub fn count(&self, phase: Phase) -> u32 {
        self.counts[phase.index()]
    }

    /// Succeeded migrations of the wave `wave` per minute for the `minutes` minutes up to
    /// `now_minute`, oldest first.
    pub fn completions_per_minute(
        &self,
        wave: &ObjKey,
        now_minute: i64,
        minutes: usize,
    ) -> Vec<u64> {
        let mut out = vec![0u64; minutes];
        if let Some(m) = self.completions.get(wave) {
            let from = now_minute - minutes as i64 + 1;
            for (minute, n) in m.range(from..=now_minute) {
                out[(minute - from) as usize] = u64::from(*n);
            }
        }
        out
    }

    /// Current sort.
    pub fn sort(&self) -> Sort {
        self.sort
    }

    /// Current filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// Current wave scope.
    pub fn wave_scope(&self) -> Option<&WaveScope> {
        self.wave_scope.as_ref()
    }

    fn passes(&self, row: &Row) -> bool {
        self.wave_scope.as_ref().is_none_or(|w| w.holds(row)) && self.filter.matches(row)
    }

    fn search(&self, row: &Row) -> Result<usize, usize> {
        let sort = self.sort;
        self.view.binary_search_by(|id| match &self.slots[*id] {
            Some(r) => compare(sort, r, row),
            None => Ordering::Less,
        })
    }

    fn account(&mut self, row: &Row, add: bool) {
        let slot = &mut self.counts[row.phase.index()];
        *slot = if add {
            *slot + 1
        } else {
            slot.saturating_sub(1)
        };
        if let (Phase::Succeeded, Some(w), Some(t)) = (row.phase, &row.wave, row.completed_at) {
            let minute = t.as_second().div_euclid(60);
            let wave = ObjKey::at(row.key.cluster, row.key.namespace.clone(), w.clone());
            let m = self.completions.entry(wave).or_default();
            let n = m.entry(minute).or_default();
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(&minute);
                }
            }
        }
    }

    /// Adds or replaces a row, moving it on the board only if its place changed.
    pub fn upsert(&mut self, row: Row) {
        let new_visible = self.passes(&row);
        let Some(&id) = self.by_key.get(&row.key) else {
            self.account(&row, true);
            let id = match self.free.pop() {
                Some(id) => id,
                None => {
                    self.slots.push(None);
                    self.slots.len() - 1
                }
            };
            self.by_key.insert(row.key.clone(), id);
            self.place(id, row, new_visible);
            return;
        };
        let old_visible = self.slots[id].as_ref().is_some_and(|r| self.passes(r));
        let same_place = old_visible
            && new_visible
            && self.slots[id]
                .as_ref()
                .is_some_and(|r| compare(self.sort, r, &row) == Ordering::Equal);
        if old_visible
            && !same_place
            && let Some(pos) = self.slots[id]
                .as_ref()
                .and_then(|old| self.search(old).ok())
        {
            self.view.remove(pos);
        }
        if let Some(old) = self.slots[id].take() {
            self.account(&old, false);
        }
        self.account(&row, true);
        self.place(id, row, new_visible && !same_place);
    }

    /// Puts `row` in slot `id` and, when `into_view`, into the view at its sorted place.
    fn place(&mut self, id: usize, row: Row, into_view: bool) {
        let pos = if into_view {
            self.search(&row).err()
        } else {
            None
        };
        self.put(id, row);
        if let Some(pos) = pos {
            self.view.insert(pos, id);
        }
    }

    /// Removes a row; returns it.
    pub fn remove(&mut self, key: &ObjKey) -> Option<Row> {
        let id = self.by_key.remove(key)?;
        if let Some(row) = self.slots[id].as_ref()
            && let Ok(pos) = self.search(row)
        {
            self.view.remove(pos);
        }
        let row = self.slots[id].take()?;
        self.account(&row, false);
        self.free.push(id);
        Some(row)
    }

    /// Replaces every row (a re-list), then sorts once.
    pub fn replace_all(&mut self, mut rows: Vec<Row>) {
        self.free.clear();
        self.by_key.clear();
        self.counts = Default::default();
        self.completions.clear();
        // The list's own buffer becomes the slots, its growth slack given back first: an
        // `Option<Row>` is as large as a `Row` (see `_SLOT_IS_A_ROW`), so the standard library
        // collects in place. A list of 10,000 never holds its rows twice, and its buffer's
        // doubling is not kept for good (issue #30).
        rows.shrink_to_fit();
        self.slots = rows.into_iter().map(Some).collect();
        for id in 0..self.slots.len() {
            let Some(row) = self.slots[id].take() else {
                continue;
            };
            if let Some(earlier) = self.by_key.insert(row.key.clone(), id) {
                // A list never repeats a key; keep the later one if it did.
                if let Some(old) = self.slots[earlier].take() {
                    self.account(&old, false);
                }
                self.free.push(earlier);
            }
            self.account(&row, true);
            self.put(id, row);
        }
        self.rebuild();
    }

    /// Replaces every row of one cluster (its re-list), keeping the other clusters' rows.
    pub fn replace_cluster(&mut self, cluster: ClusterId, rows: Vec<Row>) {
        let mut others: Vec<Row> = self
            .slots
            .drain(..)
            .flatten()
            .filter(|r| r.key.cluster != cluster)
            .collect();
        // One cluster (the usual case): the list's rows as they are, not copied once more.
        if others.is_empty() {
            self.replace_all(rows);
        } else {
            others.extend(rows);
            self.replace_all(others);
        }
    }

    /// Changes the sort and re-sorts the view.
    pub fn set_sort(&mut self, sort: Sort) {
        self.sort = sort;
        self.rebuild();
    }

    /// Changes the filter and rebuilds the view.
    pub fn set_filter(&mut self, filter: Filter) {
        self.filter = filter;
        self.rebuild();
    }

    /// Shows one wave only (or every row).
    pub fn set_wave_scope(&mut self, wave: Option<WaveScope>) {
        self.wave_scope = wave;
        self.rebuild();
    }

    fn rebuild(&mut self) {
        let mut view: Vec<usize> = (0..self.slots.len())
            .filter(|id| self.slots[*id].as_ref().is_some_and(|r| self.passes(r)))
            .collect();
        let sort = self.sort;
        let slots = &self.slots;
        view.sort_unstable_by(|a, b| match (&slots[*a], &slots[*b]) {
            (Some(x), Some(y)) => compare(sort, x, y),
            _ => Ordering::Equal,
        });
        self.view = view;
    }
}
