//! Every screen of the cockpit, drawn with fixture data at 80×24 and 160×48.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ferry::{
    state::{
        Action, Check, ConnState, Edit, Nav, Outcome, Resource, Scope, Screen, State, Target,
        TargetKind, Verb, messages::About, update,
    },
    ui::{self, Options, Theme},
};
use insta::assert_snapshot;
use k8s_openapi::jiff::SignedDuration;
use ratatui::{Terminal, backend::TestBackend};
use support::{
    C0, LONG_FAILURE, long_failure, now, preflight_migrations, read_answer, sample_migrations,
    sample_state, two_cluster_state, with_long_failure, with_preflight, with_problems,
};

fn render(state: &mut State, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    // As the app does: the state learns the terminal size before the frame is drawn.
    update(
        state,
        Action::Resize(Screen {
            width: w,
            height: h,
        }),
    );
    term.draw(|f| {
        ui::draw(
            f,
            state,
            Options {
                theme: Theme::MONO,
                logs: false,
            },
        )
    })
    .unwrap();
    term.backend().to_string()
}

fn at_both_sizes(name: &str, setup: impl Fn(&mut State)) {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        setup(&mut s);
        assert_snapshot!(format!("{name}_{w}x{h}"), render(&mut s, w, h));
    }
}

fn apply(s: &mut State, actions: impl IntoIterator<Item = Action>) {
    for a in actions {
        update(s, a);
    }
}

#[test]
fn board() {
    at_both_sizes("board", |_| {});
}

#[test]
fn board_all_namespaces_shows_namespace_column() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::All);
        assert_snapshot!(
            format!("board_all_namespaces_{w}x{h}"),
            render(&mut s, w, h)
        );
    }
}

#[test]
fn board_sorted_by_phase_reversed_with_marks_and_pending() {
    at_both_sizes("board_sorted_marked", |s| {
        apply(
            s,
            [
                Action::CycleSort,
                Action::CycleSort,
                Action::ReverseSort,
                Action::ToggleMark,
                Action::ToggleMark,
            ],
        );
        apply(
            s,
            [
                Action::Nav(Nav::Down),
                Action::Request(Verb::Cancel),
                Action::Confirm,
            ],
        );
    });
}

#[test]
fn board_filter_being_typed() {
    at_both_sizes("board_filter_typing", |s| {
        apply(s, [Action::StartFilter]);
        for c in "phase:Importing,Failed web".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
    });
}

#[test]
fn board_filtered_to_nothing() {
    at_both_sizes("board_filter_empty", |s| {
        apply(s, [Action::StartFilter]);
        for c in "nosuchvm".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
        apply(s, [Action::Submit]);
    });
}

#[test]
fn board_scoped_to_one_wave_with_wave_strip_focused() {
    at_both_sizes("board_wave_focus", |s| {
        apply(
            s,
            [
                Action::PickWave,
                Action::Nav(Nav::Down),
                Action::Enter,
                Action::FocusNext,
            ],
        )
    });
}

#[test]
fn board_command_line() {
    at_both_sizes("board_command", |s| {
        apply(s, [Action::StartCommand]);
        for c in "ns kube-system".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
    });
}

#[test]
fn board_stale_while_reconnecting() {
    at_both_sizes("board_stale_reconnecting", |s| {
        let retry_at = now().checked_add(SignedDuration::from_secs(4)).unwrap();
        apply(
            s,
            [
                Action::Tick(now().checked_sub(SignedDuration::from_secs(12)).unwrap()),
                Action::Connection(
                    C0,
                    Resource::Migrations,
                    ConnState::Reconnecting {
                        retry_at,
                        attempt: 3,
                        error: "Connection refused (os error 111)".into(),
                    },
                ),
                Action::Tick(now()),
            ],
        );
    });
}

#[test]
fn board_forbidden() {
    at_both_sizes("board_forbidden", |s| {
        apply(
            s,
            [Action::Connection(C0, Resource::Waves,
                ConnState::Forbidden(
                    "migrationwaves.migration.platform.example is forbidden: User \"viewer\" cannot list resource".into(),
                ),
            )],
        );
    });
}

#[test]
fn board_crd_missing_before_first_list() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = State::new("lab", Scope::Namespace("apps".into()), false, now());
        update(
            &mut s,
            Action::Connection(C0, Resource::Migrations, ConnState::CrdMissing),
        );
        assert_snapshot!(format!("board_crd_missing_{w}x{h}"), render(&mut s, w, h));
    }
}

#[test]
fn board_readonly_refusing_cancel() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        s.readonly = true;
        update(&mut s, Action::Request(Verb::Cancel));
        assert_snapshot!(format!("board_readonly_{w}x{h}"), render(&mut s, w, h));
    }
}

#[test]
fn board_with_log_pane() {
    at_both_sizes("board_logs", |s| apply(s, [Action::ToggleLogs]));
}

#[test]
fn details() {
    at_both_sizes("details", |s| {
        apply(s, [Action::Nav(Nav::Down), Action::Enter]);
        let read = read_answer(s, sample_migrations("apps"));
        apply(s, [read]);
    });
}

#[test]
fn details_of_a_failed_migration_with_children() {
    at_both_sizes("details_failed", |s| {
        apply(s, [Action::Command("wave w1".into()), Action::StartFilter]);
        for c in "phase:Failed".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
        apply(s, [Action::Submit, Action::Enter]);
        let read = read_answer(s, sample_migrations("apps"));
        apply(s, [read]);
        let key = s.selected.clone().unwrap();
        let child = |kind: &str, name: &str, state: &str| ferry::state::Child {
            kind: kind.into(),
            name: name.into(),
            state: state.into(),
        };
        apply(
            s,
            [Action::Children {
                key,
                result: Ok(vec![
                    child("Job", "w1-cache-02-convert", "Complete"),
                    child("DataVolume", "w1-cache-02-disk-0", "Succeeded 100.0%"),
                    child("DataVolume", "w1-cache-02-disk-1", "Failed 62.5%"),
                    child("VirtualMachine", "dc0-h0-vm0", "absent"),
                    child("VirtualMachineInstance", "dc0-h0-vm0", "absent"),
                ]),
            }],
        );
    });
}

#[test]
fn yaml() {
    at_both_sizes("yaml", |s| {
        apply(s, [Action::ShowYaml]);
        // What the API answers: the migration whole, as the app writes it.
        let key = s.selected_row().unwrap().key.clone();
        let mut o = sample_migrations("apps")
            .into_iter()
            .find(|o| o.metadata.name.as_deref() == Some(key.name.as_str()))
            .unwrap();
        ferry::kube::watch::trim_meta(&mut o.metadata);
        let text = serde_yaml::to_string(&o).unwrap();
        apply(
            s,
            [Action::Whole {
                key,
                result: Ok(text),
            }],
        );
    });
}

#[test]
fn yaml_while_reading_and_when_unreadable() {
    at_both_sizes("yaml_reading", |s| apply(s, [Action::ShowYaml]));
    at_both_sizes("yaml_unreadable", |s| {
        apply(s, [Action::ShowYaml]);
        let key = s.selected_row().unwrap().key.clone();
        apply(
            s,
            [Action::Whole {
                key,
                result: Err("virtualmachinemigrations \"a\" is forbidden".into()),
            }],
        );
    });
}

/// The pod logs view of the selected migration, its two conversion pods listed.
fn pod_logs(s: &mut State) -> u64 {
    use ferry::state::podlogs::{JobRef, PodInfo};
    apply(s, [Action::ShowPodLogs]);
    let key = s.selected_row().unwrap().key.clone();
    let job = format!("{}-convert", key.name);
    let pod = |n: &str, ago: i64, phase: &str| PodInfo {
        name: format!("{job}-x2k4q-sim{n}"),
        owner: job.clone(),
        job_uid: Some("uid-1".into()),
        containers: vec!["convert".into()],
        phase: phase.into(),
        created: Some(now() - SignedDuration::from_secs(ago)),
    };
    apply(
        s,
        [Action::PodsFound {
            key,
            result: Ok((
                vec![JobRef {
                    name: job.clone(),
                    uid: "uid-1".into(),
                }],
                vec![pod("1", 120, "Failed"), pod("2", 60, "Failed")],
            )),
        }],
    );
    s.podlogs.as_ref().unwrap().session
}

#[test]
fn pod_logs_following_with_a_long_line_wrapped() {
    at_both_sizes("pod_logs", |s| {
        let session = pod_logs(s);
        let lines = [
            "ferry-controller convert: disk 0 of 1 (scsi0:0), 16 MiB, format qcow2",
            "reading [datastore1] web/web.vmdk through NBD",
            "uploading s3://ferry-staging/apps/web/disk-0.qcow2: part 1 of 1",
            "error: the staging bucket refused the upload: AccessDenied: Access Denied (request id 4442587FB7D0A2F9, host id vr5wKoDy/8bK+Q3Tt5u1yJmVFa2H8AXl3ZykrHHH0Zw=)",
            "exit 2 (permanent): see the record beside the image",
        ];
        apply(
            s,
            [Action::LogLines {
                session,
                lines: lines.iter().map(|l| (*l).to_owned()).collect(),
            }],
        );
    });
}

#[test]
fn pod_logs_forbidden_and_waiting_to_start() {
    at_both_sizes("pod_logs_forbidden", |s| {
        let session = pod_logs(s);
        apply(
            s,
            [Action::LogEnded {
                session,
                result: Err(ferry::strings::podlogs::log_forbidden("apps")),
            }],
        );
    });
    at_both_sizes("pod_logs_waiting", |s| {
        let session = pod_logs(s);
        let pod = s.podlogs.as_ref().unwrap().pod().unwrap().name.clone();
        apply(
            s,
            [Action::LogEnded {
                session,
                result: Err(format!(
                    "container \"convert\" in pod \"{pod}\" is waiting to start: ContainerCreating"
                )),
            }],
        );
    });
}

#[test]
fn events() {
    at_both_sizes("events", |s| {
        apply(s, [Action::Nav(Nav::Down), Action::ShowEvents])
    });
}

#[test]
fn help() {
    at_both_sizes("help", |s| apply(s, [Action::ToggleHelp]));
}

#[test]
fn confirm_cancel_of_marked_rows() {
    at_both_sizes("confirm_cancel", |s| {
        apply(s, [Action::Nav(Nav::Down)]);
        apply(s, (0..4).map(|_| Action::ToggleMark));
        apply(s, [Action::Request(Verb::Cancel)]);
    });
}

#[test]
fn report_with_a_forbidden_outcome() {
    at_both_sizes("report_forbidden", |s| {
        apply(s, [Action::StartFilter]);
        for c in "phase:Importing".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
        apply(
            s,
            [
                Action::Submit,
                Action::MarkAllVisible,
                Action::Request(Verb::Pause),
                Action::Confirm,
            ],
        );
        let id = s.report.as_ref().unwrap().id;
        let entries: Vec<Target> = s
            .report
            .as_ref()
            .unwrap()
            .entries
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        apply(
            s,
            [Action::Outcome {
                id,
                target: entries[0].clone(),
                outcome: Outcome::Applied,
            }],
        );
        apply(
            s,
            [Action::Outcome {
                id,
                target: entries[1].clone(),
                outcome: Outcome::Forbidden(
                    "User \"viewer\" cannot patch resource \"virtualmachinemigrations\"".into(),
                ),
            }],
        );
        assert_eq!(entries[0].kind, TargetKind::Migration);
    });
}

/// What `ferry-view` alone grants in `apps`: no patch, no delete (the logs, yes).
fn view_only_in_apps(s: &mut State) {
    let refused = [
        Check::PatchMigrations,
        Check::PatchWaves,
        Check::DeleteMigrations,
        Check::DeleteWaves,
    ];
    apply(
        s,
        [Action::AccessReviewed {
            cluster: C0,
            namespace: "apps".into(),
            generation: 0,
            answers: Check::ALL
                .into_iter()
                .map(|c| (c, Ok(!refused.contains(&c))))
                .collect(),
        }],
    );
}

#[test]
fn board_of_a_read_only_user_greys_the_verbs_and_names_the_role() {
    at_both_sizes("board_view_only", view_only_in_apps);
}

#[test]
fn help_of_a_read_only_user_greys_the_verbs_and_names_the_role() {
    at_both_sizes("help_view_only", |s| {
        view_only_in_apps(s);
        apply(s, [Action::ToggleHelp]);
    });
}

#[test]
fn a_refused_key_says_what_grants_it_whole_instead_of_asking() {
    at_both_sizes("refused_retry", |s| {
        view_only_in_apps(s);
        // w1-cache-02 failed: retry applies, and is refused.
        apply(s, [Action::StartFilter]);
        for c in "phase:Failed".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
        apply(s, [Action::Submit, Action::Request(Verb::Retry)]);
        assert!(s.popup.is_none(), "no confirmation");
    });
}

#[test]
fn a_403_that_still_happens_is_shown_whole_with_the_role_that_grants_it() {
    // One migration, as the lab's viewer meets it: the API server's whole message, the
    // namespace at its end, wrapped in the outcome box at 80×24 and 120×40.
    for (w, h) in [(80, 24), (120, 40)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        apply(&mut s, [Action::Request(Verb::Cancel), Action::Confirm]);
        let report = s.report.as_ref().unwrap();
        let (id, target) = (report.id, report.entries[0].0.clone());
        let message = format!(
            "virtualmachinemigrations.migration.platform.example \"{name}\" is forbidden: User \"viewer\" cannot patch resource \"virtualmachinemigrations\" in API group \"migration.platform.example\" in the namespace \"apps\"",
            name = target.key.name
        );
        apply(
            &mut s,
            [Action::Outcome {
                id,
                target,
                outcome: Outcome::Forbidden(message),
            }],
        );
        let screen = render(&mut s, w, h);
        assert!(screen.contains("grant ferry-operate"), "{screen}");
        assert!(screen.contains("Esc/Enter closes"), "{screen}");
        assert_snapshot!(format!("report_forbidden_whole_{w}x{h}"), screen);
    }
}

#[test]
fn too_small_terminal_says_so() {
    let mut s = sample_state(Scope::Namespace("apps".into()));
    assert_snapshot!("too_small_60x20", render(&mut s, 60, 20));
}

#[test]
fn two_clusters_one_lost_show_a_cluster_column_and_each_connection_state() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = two_cluster_state();
        assert_snapshot!(format!("board_two_clusters_{w}x{h}"), render(&mut s, w, h));
    }
}

#[test]
fn wave_picker() {
    at_both_sizes("wave_picker", |s| {
        apply(s, [Action::PickWave, Action::Nav(Nav::Down)])
    });
}

#[test]
fn timeline() {
    at_both_sizes("timeline", |s| apply(s, [Action::ShowTimeline]));
}

#[test]
fn timeline_of_one_wave_picked_from_the_picker() {
    at_both_sizes("timeline_wave", |s| {
        apply(
            s,
            [
                Action::PickWave,
                Action::Nav(Nav::Down),
                Action::Enter,
                Action::ShowTimeline,
            ],
        )
    });
}

#[test]
fn welcome() {
    at_both_sizes("welcome", |s| {
        s.popup = Some(ferry::state::Popup::Welcome {
            note: "This demo wave has 30 VMs; two fail on purpose (injected faults).".into(),
        });
    });
}

#[test]
fn board_with_a_migration_preflight_holds_and_the_waves_preflight_counts() {
    at_both_sizes("board_preflight", with_preflight);
}

#[test]
fn preflight_view_groups_the_concerns_of_the_rows_shown() {
    at_both_sizes("preflight", |s| {
        with_preflight(s);
        apply(s, [Action::ShowPreflight, Action::Nav(Nav::Down)]);
    });
}

#[test]
fn preflight_group_lists_its_migrations_with_their_messages() {
    at_both_sizes("preflight_group", |s| {
        with_preflight(s);
        apply(s, [Action::ShowPreflight, Action::Enter]);
    });
}

#[test]
fn preflight_view_of_a_board_none_was_preflighted_on_says_so() {
    at_both_sizes("preflight_none", |s| apply(s, [Action::ShowPreflight]));
}

#[test]
fn details_of_a_migration_preflight_holds() {
    at_both_sizes("details_preflight", |s| {
        with_preflight(s);
        apply(s, [Action::StartFilter]);
        for c in "w2-dc0-h0-vm1".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
        apply(s, [Action::Submit, Action::Enter]);
        let read = read_answer(s, preflight_migrations("apps"));
        apply(s, [read]);
    });
}

#[test]
fn details_of_a_warm_migration_waiting_for_its_cutover() {
    at_both_sizes("details_warm", |s| {
        let mut o = support::vmm(
            "apps",
            "warm-db-01",
            None,
            ferry_crds::Phase::CuttingOver,
            7,
        );
        o.spec.mode = ferry_crds::MigrationMode::Warm;
        o.spec.warm = Some(ferry_crds::WarmSpec {
            cutover_at: Some(ferry_crds::fixtures::ts(3600 + 5400)),
            precopy_interval_seconds: Some(600),
            ..ferry_crds::WarmSpec::default()
        });
        o.status.as_mut().unwrap().warm = Some(Box::new(ferry_crds::WarmStatus {
            rounds: 4,
            last_round_at: Some(ferry_crds::fixtures::ts(3300)),
            last_delta_bytes: Some(96 << 20),
            change_rate_bytes_per_second: Some(160 << 10),
            next_round_at: Some(ferry_crds::fixtures::ts(3900)),
            predicted_cutover_copy_seconds: Some(41),
            predicted_downtime_seconds: Some(161),
            ..ferry_crds::WarmStatus::default()
        }));
        apply(s, [Action::MigrationApplied(C0, Box::new(o.clone()))]);
        apply(s, [Action::StartFilter]);
        for c in "warm-db".chars() {
            apply(s, [Action::Edit(Edit::Char(c))]);
        }
        apply(s, [Action::Submit, Action::Enter]);
        let read = read_answer(s, [o]);
        apply(s, [read]);
    });
}

/// Opens the details of the failed `w1-cache-02` (of [`with_long_failure`]), and the API
/// answers their read.
fn details_of_the_failed_one(s: &mut State) {
    apply(s, [Action::StartFilter]);
    for c in "w1-cache-02".chars() {
        apply(s, [Action::Edit(Edit::Char(c))]);
    }
    apply(s, [Action::Submit, Action::Enter]);
    let read = read_answer(s, [long_failure()]);
    apply(s, [read]);
}

#[test]
fn details_show_the_failure_conditions_and_events_whole_with_the_selected_one_marked() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        with_long_failure(&mut s);
        details_of_the_failed_one(&mut s);
        let screen = render(&mut s, w, h);
        // Every word of the failure is on screen, its last one included: nothing is cut.
        for word in LONG_FAILURE.split_whitespace() {
            assert!(screen.contains(word), "{w}x{h}: {word:?} missing\n{screen}");
        }
        assert_snapshot!(format!("details_whole_failure_{w}x{h}"), screen);
    }
}

#[test]
fn details_scrolled_to_the_events_with_the_newest_events_note_selected() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        with_long_failure(&mut s);
        details_of_the_failed_one(&mut s);
        // From the failure, through the conditions' messages, to the newest Event.
        let newest = About::Event("cache-ev-3002".into());
        for _ in 0..10 {
            if s.message.as_ref() == Some(&newest) {
                break;
            }
            apply(&mut s, [Action::NextMessage]);
        }
        assert_eq!(s.message, Some(newest));
        apply(&mut s, [Action::Nav(Nav::Bottom)]);
        let screen = render(&mut s, w, h);
        assert!(screen.contains("▸"), "{screen}");
        assert!(screen.contains("once the cause is fixed"), "{screen}");
        assert_snapshot!(format!("details_event_selected_{w}x{h}"), screen);
    }
}

#[test]
fn problems_view_groups_failed_and_stuck_migrations_and_enter_marks_the_biggest_group() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        with_problems(&mut s);
        apply(&mut s, [Action::ShowProblems, Action::Enter]);
        // The three imports that failed alike are one group, all marked.
        let marked: Vec<&str> = {
            let mut m: Vec<&str> = s.marks.iter().map(|k| k.name.as_str()).collect();
            m.sort();
            m
        };
        assert_eq!(marked, ["w1-api-03", "w1-cache-02", "w1-worker-04"]);
        assert_snapshot!(format!("problems_{w}x{h}"), render(&mut s, w, h));
    }
}

#[test]
fn problems_view_retry_of_the_marked_group_asks_once() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        with_problems(&mut s);
        apply(
            &mut s,
            [
                Action::ShowProblems,
                Action::Enter,
                Action::Request(Verb::Retry),
            ],
        );
        assert_snapshot!(
            format!("problems_retry_confirm_{w}x{h}"),
            render(&mut s, w, h)
        );
    }
}

#[test]
fn problems_view_from_the_wave_strip_shows_that_waves_problems() {
    at_both_sizes("problems_of_wave_w2", |s| {
        apply(
            s,
            [
                Action::FocusNext,
                Action::Nav(Nav::Down),
                Action::ShowProblems,
            ],
        );
    });
}

/// A warm wave `w3` of four: three precopied and waiting for the wave's cutover at 03:13Z
/// (2 h 13 min after the fixtures' clock), one still copying.
fn with_warm_wave(s: &mut State) {
    let cutover_at = ferry_crds::fixtures::ts(3600 + 7980);
    let mut w = support::wave_obj(
        "apps",
        "w3",
        4,
        ferry_crds::WaveCounts {
            running: 4,
            ..ferry_crds::WaveCounts::default()
        },
        ferry_crds::WavePhase::Running,
    );
    w.spec.template.mode = ferry_crds::MigrationMode::Warm;
    w.spec.warm = Some(ferry_crds::WarmSpec {
        cutover_at: Some(cutover_at.clone()),
        precopy_interval_seconds: Some(600),
        ..ferry_crds::WarmSpec::default()
    });
    let status = w.status.as_mut().unwrap();
    status.in_flight = 1;
    status.waiting_for_cutover = 3;
    status.throughput_per_hour = None;
    status.eta_seconds = None;
    let migrations = ["db", "app", "queue", "search"]
        .into_iter()
        .enumerate()
        .map(|(i, vm)| {
            let waiting = i < 3;
            let phase = if waiting {
                ferry_crds::Phase::CuttingOver
            } else {
                ferry_crds::Phase::Importing
            };
            let mut o = support::vmm(
                "apps",
                &format!("w3-{vm}-0{i}"),
                Some("w3"),
                phase,
                20 + i as i64,
            );
            o.spec.mode = ferry_crds::MigrationMode::Warm;
            o.spec.warm = Some(ferry_crds::WarmSpec {
                precopy_interval_seconds: Some(600),
                ..ferry_crds::WarmSpec::default()
            });
            if waiting {
                let st = o.status.as_mut().unwrap();
                st.message = Some(format!(
                    "precopied, waiting for the wave's cutover at {}",
                    cutover_at.0
                ));
                st.warm = Some(Box::new(ferry_crds::WarmStatus {
                    rounds: 3,
                    last_round_at: Some(ferry_crds::fixtures::ts(3300)),
                    next_round_at: Some(ferry_crds::fixtures::ts(3900)),
                    ..ferry_crds::WarmStatus::default()
                }));
            }
            o
        });
    for o in migrations {
        apply(s, [Action::MigrationApplied(C0, Box::new(o))]);
    }
    apply(s, [Action::WaveApplied(C0, Box::new(w))]);
}

#[test]
fn wave_strip_of_a_warm_wave_waiting_for_its_cutover() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = sample_state(Scope::Namespace("apps".into()));
        with_warm_wave(&mut s);
        // The board shows wave w3 (the picker: every wave, w1, w2, w3), the strip focused on it.
        apply(
            &mut s,
            [
                Action::PickWave,
                Action::Nav(Nav::Down),
                Action::Nav(Nav::Down),
                Action::Nav(Nav::Down),
                Action::Enter,
                Action::FocusNext,
            ],
        );
        let screen = render(&mut s, w, h);
        let line = screen
            .lines()
            .find(|l| l.contains("w3 Running"))
            .unwrap_or_else(|| panic!("no line of w3:\n{screen}"));
        if w >= 140 {
            assert!(
                line.contains("3 precopied, waiting · cutover 03:13Z in 2h13m"),
                "{line}"
            );
        } else {
            assert!(line.contains("◷3 cutover in 2h13m"), "{line}");
        }
        assert_snapshot!(format!("wave_strip_warm_{w}x{h}"), screen);
    }
}
