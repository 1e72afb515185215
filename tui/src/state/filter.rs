//! The `/` filter: free text plus `phase:`, `wave:` and `ns:` tokens, parsed once per edit.

use ferry_crds::Phase;

use super::row::Row;
use crate::strings;

/// A parsed filter. Tokens of one kind are alternatives (`phase:Failed phase:Cancelled`, or
/// `phase:Failed,Cancelled`); different kinds and free words must all match.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// What was typed.
    pub raw: String,
    words: Vec<String>,
    phases: Vec<Phase>,
    waves: Vec<String>,
    namespaces: Vec<String>,
    /// Tokens that could not be understood (e.g. an unknown phase), for the filter line.
    pub errors: Vec<String>,
}

impl Filter {
    /// Parses what was typed. Never fails: bad tokens end up in [`Filter::errors`].
    pub fn parse(raw: &str) -> Filter {
        let mut f = Filter {
            raw: raw.to_owned(),
            ..Filter::default()
        };
        for token in raw.split_whitespace() {
            let (kind, value) = match token.split_once(':') {
                Some((k, v)) if !v.is_empty() => (k.to_ascii_lowercase(), v),
                _ => {
                    f.words.push(token.to_lowercase());
                    continue;
                }
            };
            for v in value.split(',').filter(|v| !v.is_empty()) {
                match kind.as_str() {
                    "phase" | "p" => match v.parse::<Phase>() {
                        Ok(p) => f.phases.push(p),
                        Err(_) => f.errors.push(strings::unknown_phase(v)),
                    },
                    "wave" | "w" => f.waves.push(v.to_owned()),
                    "ns" | "namespace" | "n" => f.namespaces.push(v.to_owned()),
                    _ => f.words.push(token.to_lowercase()),
                }
            }
        }
        f
    }

    /// Whether nothing is filtered out.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
            && self.phases.is_empty()
            && self.waves.is_empty()
            && self.namespaces.is_empty()
    }

    /// Whether a row passes the filter. Words match name, namespace, wave, phase or message,
    /// case-insensitively.
    pub fn matches(&self, row: &Row) -> bool {
        if !self.phases.is_empty() && !self.phases.contains(&row.phase) {
            return false;
        }
        if !self.waves.is_empty()
            && !row
                .wave
                .as_deref()
                .is_some_and(|w| self.waves.iter().any(|x| x == w))
        {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.contains(&row.key.namespace) {
            return false;
        }
        self.words.iter().all(|w| {
            contains_ci(&row.key.name, w)
                || contains_ci(&row.key.namespace, w)
                || row.wave.as_deref().is_some_and(|x| contains_ci(x, w))
                || contains_ci(row.phase.as_str(), w)
                || contains_ci(&row.message, w)
        })
    }
}

/// `needle` is already lowercase.
fn contains_ci(hay: &str, needle: &str) -> bool {
    if hay.is_ascii() && needle.is_ascii() {
        hay.as_bytes()
            .windows(needle.len().max(1))
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
            || needle.is_empty()
    } else {
        hay.to_lowercase().contains(needle)
    }
}
