//! Fault injection: the annotation grammar, the `--fault-rate` grammar and the pure decision of
//! which fault (if any) hits one attempt of one step.
//!
//! Annotation `sim.ferry.example/fault` (on the owning VirtualMachineMigration, or on the child):
//!
//! ```text
//! spec    := rule ( "," rule )*            whitespace around tokens is ignored
//! rule    := step "=" mode
//! step    := "convert" | "import" | "vmi" | "agent" | "stop"
//! mode    := kind [ "@" percent "%" ]      percent in [0, 100]; only `import` has progress
//! kind    := "once" | "transient" | "always" | "permanent"
//! ```
//!
//! `once` and `transient` are the same thing: one retriable failure per migration (recorded in
//! `sim.ferry.example/fired`, so a restarted sim does not fire it again). `always` makes every
//! attempt fail in the retriable way (so the step never succeeds on its own), `permanent` makes
//! it fail terminally. What "retriable" and "terminal" mean per step is in [`Step`].
//!
//! `--fault-rate`: `step[:kind]=rate[,...]`, rate in [0, 1], kind `once` by default. Whether a
//! child is hit is a hash of (seed, step, namespace/name): deterministic for a given seed.

use std::collections::BTreeSet;
use std::fmt;

use crate::{Error, Result};

/// The annotation that asks for faults.
pub const FAULT_ANNOTATION: &str = "sim.ferry.example/fault";
/// The annotation where the sim records the `once` faults it fired.
pub const FIRED_ANNOTATION: &str = "sim.ferry.example/fired";

/// A step of the migration the sim plays a part in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// The conversion Job. Retriable: one pod attempt exits 1 (the Job retries within its
    /// `backoffLimit`). Terminal: the Job fails at once (reason `PodFailurePolicy`).
    Convert,
    /// The CDI import. Retriable: the importer restarts (`restartCount` +1, `Running=False`
    /// reason `Error`, phase stays `ImportInProgress`). Terminal: phase `Failed`.
    Import,
    /// The VMI. Retriable: the VMI ends `Failed` after scheduling (the VM's run strategy decides
    /// whether a new one starts). Terminal: the VMI stays `Scheduling`, unschedulable.
    Vmi,
    /// The guest agent. Retriable: the agent of this VMI never connects (a new VMI's will).
    /// Terminal: no VMI's agent connects.
    Agent,
    /// A deleted VMI's stop, as its node sees it. Retriable (`once`): the node answers late and
    /// the VMI goes after twice its grace. `always` and terminal: the node is lost and the VMI
    /// never goes (its finalizer stays), as with a virt-handler that is down.
    Stop,
}

impl Step {
    pub const ALL: [Step; 5] = [
        Step::Convert,
        Step::Import,
        Step::Vmi,
        Step::Agent,
        Step::Stop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Convert => "convert",
            Step::Import => "import",
            Step::Vmi => "vmi",
            Step::Agent => "agent",
            Step::Stop => "stop",
        }
    }

    fn parse(s: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|step| step.as_str() == s)
    }

    /// Whether the step reports progress, so that `@N%` means something.
    pub fn has_progress(self) -> bool {
        matches!(self, Step::Import)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a fault behaves over attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One retriable failure per migration (`once` and `transient` are synonyms).
    Once,
    /// Every attempt fails in the retriable way.
    Always,
    /// The step fails terminally.
    Permanent,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        match s {
            "once" | "transient" => Some(Kind::Once),
            "always" => Some(Kind::Always),
            "permanent" => Some(Kind::Permanent),
            _ => None,
        }
    }
}

/// One rule of a fault spec: `step=kind[@N%]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    pub step: Step,
    pub kind: Kind,
    /// Where in the step's progress the fault strikes, 0..=100.
    pub at_percent: f64,
}

/// A parsed `sim.ferry.example/fault` annotation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultSpec {
    pub rules: Vec<Rule>,
}

fn spec_error(spec: &str, reason: impl Into<String>) -> Error {
    Error::FaultSpec {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

fn steps_list() -> String {
    Step::ALL.map(Step::as_str).join(", ")
}

impl FaultSpec {
    /// Parses the annotation value.
    ///
    /// Errors: unknown step or kind, a missing `=`, a percent that is not a number in
    /// [0, 100] or lacks its `%`, `@N%` (N > 0) on a step without progress, a step named twice.
    pub fn parse(spec: &str) -> Result<FaultSpec> {
        let mut rules: Vec<Rule> = Vec::new();
        for raw in spec.split(',') {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let (step, mode) = raw
                .split_once('=')
                .ok_or_else(|| spec_error(spec, format!("rule {raw:?} is not step=mode")))?;
            let step = step.trim();
            let step = Step::parse(step).ok_or_else(|| {
                spec_error(
                    spec,
                    format!("unknown step {step:?} (steps: {})", steps_list()),
                )
            })?;
            let (kind, at_percent) = parse_mode(spec, mode.trim())?;
            if at_percent > 0.0 && !step.has_progress() {
                return Err(spec_error(
                    spec,
                    format!("step {step} has no progress, so @{at_percent}% means nothing there"),
                ));
            }
            if rules.iter().any(|r| r.step == step) {
                return Err(spec_error(spec, format!("step {step} is named twice")));
            }
            rules.push(Rule {
                step,
                kind,
                at_percent,
            });
        }
        Ok(FaultSpec { rules })
    }

    /// The rule for `step`, if any.
    pub fn rule(&self, step: Step) -> Option<&Rule> {
        self.rules.iter().find(|r| r.step == step)
    }
}

fn parse_mode(spec: &str, mode: &str) -> Result<(Kind, f64)> {
    let (kind, percent) = match mode.split_once('@') {
        Some((k, p)) => (k.trim(), Some(p.trim())),
        None => (mode, None),
    };
    let kind = Kind::parse(kind).ok_or_else(|| {
        spec_error(
            spec,
            format!("unknown mode {kind:?} (modes: once, transient, always, permanent)"),
        )
    })?;
    let at = match percent {
        None => 0.0,
        Some(p) => {
            let digits = p
                .strip_suffix('%')
                .ok_or_else(|| spec_error(spec, format!("percent {p:?} must end with %")))?;
            let n: f64 = digits
                .trim()
                .parse()
                .map_err(|_| spec_error(spec, format!("percent {p:?} is not a number")))?;
            if !(0.0..=100.0).contains(&n) {
                return Err(spec_error(spec, format!("percent {p:?} is outside 0..100")));
            }
            n
        }
    };
    Ok((kind, at))
}

/// One `--fault-rate` entry: `step[:kind]=rate`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateRule {
    pub step: Step,
    pub kind: Kind,
    pub rate: f64,
}

/// Every `--fault-rate` entry, with the seed that makes the draws deterministic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rates {
    pub rules: Vec<RateRule>,
    pub seed: u64,
}

impl Rates {
    /// Parses one `--fault-rate` value (several comma-separated entries allowed) and adds it.
    ///
    /// Errors: unknown step or kind, a rate that is not a number in [0, 1].
    pub fn add(&mut self, value: &str) -> Result<()> {
        for raw in value.split(',') {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let (lhs, rate) = raw
                .split_once('=')
                .ok_or_else(|| spec_error(value, format!("{raw:?} is not step[:kind]=rate")))?;
            let (step, kind) = match lhs.split_once(':') {
                Some((s, k)) => (s.trim(), Some(k.trim())),
                None => (lhs.trim(), None),
            };
            let step = Step::parse(step).ok_or_else(|| {
                spec_error(
                    value,
                    format!("unknown step {step:?} (steps: {})", steps_list()),
                )
            })?;
            let kind = match kind {
                None => Kind::Once,
                Some(k) => Kind::parse(k).ok_or_else(|| {
                    spec_error(
                        value,
                        format!("unknown mode {k:?} (modes: once, transient, always, permanent)"),
                    )
                })?,
            };
            let rate: f64 = rate
                .trim()
                .parse()
                .map_err(|_| spec_error(value, format!("rate {rate:?} is not a number")))?;
            if !(0.0..=1.0).contains(&rate) {
                return Err(spec_error(value, format!("rate {rate} is outside 0..1")));
            }
            self.rules.retain(|r| r.step != step);
            self.rules.push(RateRule { step, kind, rate });
        }
        Ok(())
    }

    /// The rule a child named `key` draws for `step`, if the draw hits.
    fn draw(&self, step: Step, key: &str) -> Option<Rule> {
        let rule = self.rules.iter().find(|r| r.step == step)?;
        let h = fnv1a(self.seed, step.as_str(), key);
        // The top 53 bits as a uniform number in [0, 1).
        let x = (h >> 11) as f64 / (1u64 << 53) as f64;
        if x >= rule.rate {
            return None;
        }
        let at_percent = if step.has_progress() {
            (h % 90) as f64 + 5.0
        } else {
            0.0
        };
        Some(Rule {
            step,
            kind: rule.kind,
            at_percent,
        })
    }
}

/// FNV-1a over the seed, the step and the key, then SplitMix64's finalizer (FNV alone mixes
/// its high bits poorly for keys that differ in one character): stable across Rust versions
/// and platforms, unlike `std`'s hasher.
fn fnv1a(seed: u64, step: &str, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&seed.to_le_bytes());
    eat(step.as_bytes());
    eat(&[0]);
    eat(key.as_bytes());
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The `once` faults already fired for one migration, as recorded in [`FIRED_ANNOTATION`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fired(BTreeSet<Step>);

impl Fired {
    /// Reads the annotation value; unknown words are ignored (they may come from a newer sim).
    pub fn parse(value: Option<&str>) -> Fired {
        Fired(
            value
                .unwrap_or("")
                .split(',')
                .filter_map(|s| Step::parse(s.trim()))
                .collect(),
        )
    }

    pub fn contains(&self, step: Step) -> bool {
        self.0.contains(&step)
    }

    /// The annotation value with `step` added.
    pub fn with(&self, step: Step) -> String {
        let mut set = self.0.clone();
        set.insert(step);
        set.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
    }
}

/// What hits one attempt of a step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    pub step: Step,
    /// Terminal (`permanent`) or retriable (`once`, `always`).
    pub terminal: bool,
    /// Where in the step's progress it strikes, 0..=100.
    pub at_percent: f64,
    /// Whether firing it must be recorded in [`FIRED_ANNOTATION`] first (a `once` fault).
    pub record: bool,
}

/// Decides the fault (if any) for one attempt of `step` on the child `key` (`namespace/name`).
///
/// Guarantees: pure; an annotation rule for the step wins over a rate rule; a `once` fault is
/// never returned when `fired` already holds the step.
pub fn decide(
    step: Step,
    spec: &FaultSpec,
    rates: &Rates,
    key: &str,
    fired: &Fired,
) -> Option<Fault> {
    let rule = spec.rule(step).copied().or_else(|| rates.draw(step, key))?;
    match rule.kind {
        Kind::Once if fired.contains(step) => None,
        Kind::Once => Some(Fault {
            step,
            terminal: false,
            at_percent: rule.at_percent,
            record: true,
        }),
        Kind::Always => Some(Fault {
            step,
            terminal: false,
            at_percent: rule.at_percent,
            record: false,
        }),
        Kind::Permanent => Some(Fault {
            step,
            terminal: true,
            at_percent: rule.at_percent,
            record: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(s: &str) -> FaultSpec {
        FaultSpec::parse(s).unwrap()
    }

    fn err(s: &str) -> String {
        FaultSpec::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn parses_the_example_from_the_design() {
        let spec = parse("import=transient@40%,convert=once,vmi=always");
        assert_eq!(
            spec.rules,
            vec![
                Rule {
                    step: Step::Import,
                    kind: Kind::Once,
                    at_percent: 40.0
                },
                Rule {
                    step: Step::Convert,
                    kind: Kind::Once,
                    at_percent: 0.0
                },
                Rule {
                    step: Step::Vmi,
                    kind: Kind::Always,
                    at_percent: 0.0
                },
            ]
        );
    }

    #[test]
    fn tolerates_whitespace_and_empty_rules() {
        let spec = parse(" import = permanent @ 12.5 % , , agent=always ");
        assert_eq!(
            spec.rule(Step::Import),
            Some(&Rule {
                step: Step::Import,
                kind: Kind::Permanent,
                at_percent: 12.5
            })
        );
        assert_eq!(spec.rule(Step::Agent).map(|r| r.kind), Some(Kind::Always));
        assert_eq!(parse("").rules, vec![]);
    }

    #[test]
    fn rejects_bad_specs_with_a_reason() {
        assert!(
            err("start=once").contains("unknown step \"start\""),
            "{}",
            err("start=once")
        );
        assert!(err("import=sometimes").contains("unknown mode \"sometimes\""));
        assert!(err("import").contains("is not step=mode"));
        assert!(err("import=once@40").contains("must end with %"));
        assert!(err("import=once@x%").contains("is not a number"));
        assert!(err("import=once@140%").contains("outside 0..100"));
        assert!(err("convert=once@40%").contains("has no progress"));
        assert!(err("import=once,import=always").contains("named twice"));
    }

    #[test]
    fn zero_percent_is_allowed_on_any_step() {
        assert_eq!(
            parse("vmi=permanent@0%").rule(Step::Vmi).map(|r| r.kind),
            Some(Kind::Permanent)
        );
    }

    #[test]
    fn once_fires_until_recorded() {
        let spec = parse("import=once@40%");
        let rates = Rates::default();
        let f = decide(Step::Import, &spec, &rates, "ns/a", &Fired::default()).unwrap();
        assert_eq!(
            f,
            Fault {
                step: Step::Import,
                terminal: false,
                at_percent: 40.0,
                record: true
            }
        );
        let fired = Fired::parse(Some("import"));
        assert_eq!(decide(Step::Import, &spec, &rates, "ns/a", &fired), None);
        assert_eq!(
            decide(Step::Convert, &spec, &rates, "ns/a", &Fired::default()),
            None
        );
    }

    #[test]
    fn always_and_permanent_ignore_the_record() {
        let fired = Fired::parse(Some("convert,import"));
        let always = decide(
            Step::Convert,
            &parse("convert=always"),
            &Rates::default(),
            "k",
            &fired,
        )
        .unwrap();
        assert!(!always.terminal && !always.record);
        let perm = decide(
            Step::Import,
            &parse("import=permanent@10%"),
            &Rates::default(),
            "k",
            &fired,
        )
        .unwrap();
        assert!(perm.terminal && !perm.record);
        assert_eq!(perm.at_percent, 10.0);
    }

    #[test]
    fn fired_round_trips_and_ignores_unknown_words() {
        let f = Fired::parse(Some("agent, bogus ,import"));
        assert!(f.contains(Step::Agent) && f.contains(Step::Import) && !f.contains(Step::Vmi));
        assert_eq!(f.with(Step::Convert), "convert,import,agent");
        assert_eq!(Fired::parse(None).with(Step::Vmi), "vmi");
    }

    #[test]
    fn rates_parse_and_reject() {
        let mut r = Rates::default();
        r.add("import=0.05, convert:permanent=0.5").unwrap();
        r.add("vmi:always=1").unwrap();
        assert_eq!(r.rules.len(), 3);
        assert_eq!(
            r.rules[1],
            RateRule {
                step: Step::Convert,
                kind: Kind::Permanent,
                rate: 0.5
            }
        );
        assert!(
            r.add("import=2")
                .unwrap_err()
                .to_string()
                .contains("outside 0..1")
        );
        assert!(
            r.add("import:maybe=0.1")
                .unwrap_err()
                .to_string()
                .contains("unknown mode")
        );
        assert!(
            r.add("disk=0.1")
                .unwrap_err()
                .to_string()
                .contains("unknown step")
        );
        assert!(
            r.add("import")
                .unwrap_err()
                .to_string()
                .contains("step[:kind]=rate")
        );
    }

    #[test]
    fn rate_draws_are_deterministic_and_near_the_rate() {
        let mut r = Rates {
            seed: 7,
            ..Rates::default()
        };
        r.add("import=0.2").unwrap();
        let hits = |r: &Rates| {
            (0..2000)
                .filter(|i| {
                    decide(
                        Step::Import,
                        &FaultSpec::default(),
                        r,
                        &format!("ns/dv-{i}"),
                        &Fired::default(),
                    )
                    .is_some()
                })
                .count()
        };
        let a = hits(&r);
        assert_eq!(a, hits(&r));
        assert!((300..500).contains(&a), "{a} hits of 2000 at rate 0.2");
        let other_seed = Rates {
            seed: 8,
            ..r.clone()
        };
        assert_ne!(
            (0..50)
                .map(|i| r.draw(Step::Import, &format!("k{i}")).is_some())
                .collect::<Vec<_>>(),
            (0..50)
                .map(|i| other_seed.draw(Step::Import, &format!("k{i}")).is_some())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn rate_draws_place_import_faults_inside_the_copy() {
        let mut r = Rates::default();
        r.add("import=1,convert=1").unwrap();
        for i in 0..100 {
            let f = r.draw(Step::Import, &format!("k{i}")).unwrap();
            assert!((5.0..95.0).contains(&f.at_percent));
            assert_eq!(
                r.draw(Step::Convert, &format!("k{i}")).unwrap().at_percent,
                0.0
            );
        }
    }

    #[test]
    fn annotation_wins_over_rate() {
        let mut r = Rates::default();
        r.add("import:permanent=1").unwrap();
        let f = decide(
            Step::Import,
            &parse("import=always"),
            &r,
            "k",
            &Fired::default(),
        )
        .unwrap();
        assert!(!f.terminal);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,60}") {
            let _ = FaultSpec::parse(&s);
            let _ = Rates::default().add(&s);
        }
    }
}
