//! `ferry report` as a change ticket reads it, from the objects of `make demo`'s wave with its
//! two injected failures (`support::demo_wave`), loaded as the command loads them: scoped to
//! the wave, at the state's clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ferry::{
    cli,
    report::{self, DowntimeEnd},
    state::{Action, Scope, State, update},
};
use ferry_crds::Phase;
use insta::assert_snapshot;
use support::{C0, demo_wave, now};

/// What `ferry report demo-wave -n demo` reads: one list, then the wave's scope; the report of
/// the listed objects the state shows (its rows keep no object).
fn report_of(wave: Option<&str>) -> report::Report {
    let mut s = State::new("lab", Scope::Namespace("demo".into()), false, now());
    let listed = demo_wave();
    update(&mut s, Action::migrations_listed(C0, listed.clone()));
    update(&mut s, Action::WavesListed(C0, vec![demo_wave_object()]));
    if let Some(w) = wave {
        update(&mut s, Action::Command(format!("wave {w}")));
    }
    cli::report(&s, listed.iter().map(|o| (C0, o)))
}

/// The demo's wave, its first forecast of its end made when its first VM had succeeded.
fn demo_wave_object() -> ferry_crds::MigrationWave {
    use ferry_crds::fixtures::ts;
    let mut w = support::wave_obj(
        "demo",
        "demo-wave",
        5,
        ferry_crds::wave::WaveCounts::default(),
        ferry_crds::WavePhase::Running,
    );
    w.status.as_mut().unwrap().forecast = Some(ferry_crds::WaveForecast {
        first_made_at: Some(ts(1000)),
        first_ends_at: Some(ts(3000)),
        ..Default::default()
    });
    w
}

#[test]
fn the_report_of_a_wave_with_injected_failures_says_per_vm_what_happened_and_totals_it() {
    let r = report_of(Some("demo-wave"));
    // The wave's first forecast of its end, not yet held against an end: one is under way.
    let f = r.totals[0].forecast.unwrap();
    assert_eq!(
        (f.first.made_at, f.first.ends_at, f.error_percent),
        (
            ferry_crds::fixtures::ts(1000).0,
            ferry_crds::fixtures::ts(3000).0,
            None
        )
    );
    assert_eq!(r.wave.as_deref(), Some("demo-wave"));
    let names: Vec<&str> = r.vms.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        (0..5)
            .map(|i| format!("demo-wave-dc0-h0-vm{i}"))
            .collect::<Vec<_>>(),
        "the other wave's migration is left out"
    );
    let vm = |i: usize| &r.vms[i];
    // Moved at once: down from the shutdown request (20 s in) until it ran.
    let d0 = &vm(0).outages[0];
    assert_eq!(d0.ended_by, Some(DowntimeEnd::Migrated));
    assert_eq!(d0.seconds, 45 + 380 + 410 + 3 + 35 - 20);
    // Failed at 40 % of its import, retried, moved: the failure kept as retried past, the
    // downtime across both attempts.
    let v2 = vm(2);
    assert_eq!((v2.phase, v2.attempts), (Phase::Succeeded, 2));
    let f2 = v2.failure.as_ref().unwrap();
    assert!(!f2.is_final);
    assert_eq!(f2.reason, "ImportFailed");
    assert!(f2.message.contains("import fault at 40%"), "{}", f2.message);
    assert!(v2.phases.iter().any(|s| s.phase == Phase::Failed));
    assert_eq!(
        v2.downtime_seconds.unwrap(),
        44 + 371 + 160 + 240 + 415 + 3 + 31 - 20
    );
    // The conversion that failed: final, and its source powered back on ended its downtime.
    let v3 = vm(3);
    assert_eq!(v3.phase, Phase::Failed);
    assert!(v3.failure.as_ref().unwrap().is_final);
    let d3 = &v3.outages[0];
    assert_eq!(
        (d3.ended_by, d3.seconds),
        (Some(DowntimeEnd::SourceRestored), 46 + 95 + 12 - 20)
    );
    // Still importing: down until now.
    let d4 = &vm(4).outages[0];
    assert_eq!((d4.to, d4.seconds), (None, 3600 - 1000 - 20));

    let [t] = r.totals.as_slice() else {
        panic!("one wave: {:?}", r.totals);
    };
    assert_eq!(
        (t.vms, t.succeeded, t.failed, t.under_way, t.retries),
        (5, 3, 1, 1, 1)
    );
    assert_eq!(
        t.bytes_moved,
        r.vms.iter().map(|v| v.bytes_moved).sum::<i64>()
    );
    let downtimes: Vec<i64> = r.vms.iter().map(|v| v.downtime_seconds.unwrap()).collect();
    assert_eq!(t.downtime_seconds, downtimes.iter().sum::<i64>());
    assert_eq!(t.longest_downtime_seconds, *downtimes.iter().max().unwrap());
    assert_eq!(t.completed_at, None, "vm4 is under way");
}

#[test]
fn the_markdown_is_one_table_line_per_vm_and_one_per_wave() {
    let r = report_of(Some("demo-wave"));
    let md = report::markdown(&r);
    let table_lines = md.lines().filter(|l| l.starts_with("| ")).count();
    // Two header lines (VMs, totals), five VMs, one wave.
    assert_eq!(table_lines, 2 + 5 + 1, "{md}");
    let failed = md
        .lines()
        .find(|l| l.starts_with("| demo-wave-dc0-h0-vm3 |"))
        .unwrap();
    assert!(
        failed.contains("ConversionFailed in Converting: the conversion Job"),
        "{failed}"
    );
    assert!(failed.contains("source powered back on"), "{failed}");
    // The README's example is this output.
    assert_snapshot!("report_demo_wave_md", md);
}

#[test]
fn csv_has_a_line_per_vm_and_per_wave_with_the_same_columns() {
    let r = report_of(None);
    let csv = report::csv(&r);
    let lines: Vec<&str> = csv.lines().collect();
    // Header, six migrations, two waves.
    assert_eq!(lines.len(), 1 + 6 + 2, "{csv}");
    let columns = lines[0].split(',').count();
    // No field of this fixture quotes a comma, so a plain split counts the columns.
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), columns, "{l}");
    }
    assert!(lines[1..7].iter().all(|l| l.starts_with("vm,")));
    assert!(lines[7].starts_with("total,demo-wave,"), "{}", lines[7]);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["vms"].as_array().unwrap().len(), 6);
    assert_eq!(json["totals"][0]["wave"], "demo-wave");
    assert_eq!(json["vms"][3]["failure"]["reason"], "ConversionFailed");
}
