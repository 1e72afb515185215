//! `ferry board --once -o text|json` as a script reads it, from a fixture board (the lab test
//! runs the binary): preflight's concerns are in both, one line each in text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ferry::{cli, state::Scope};
use insta::assert_snapshot;
use support::{sample_state, with_preflight};

#[test]
fn text_lists_each_concern_of_each_migration_on_a_line_after_the_board() {
    let mut s = sample_state(Scope::Namespace("apps".into()));
    with_preflight(&mut s);
    let text = cli::board_text(&s);
    // One line per concern: severity, code, message; the held migration says so.
    assert!(
        text.contains("apps/w2-dc0-h0-vm1  held by preflight\n"),
        "{text}"
    );
    assert!(
        text.contains("  Critical  RawDeviceMapping  Hard disk 2 is a raw device mapping (RDM)\n"),
        "{text}"
    );
    assert!(text.contains("(accepted)\n"), "{text}");
    assert_snapshot!("board_once_text_preflight", text);
}

#[test]
fn text_without_concerns_is_the_board_alone() {
    let s = sample_state(Scope::Namespace("apps".into()));
    let text = cli::board_text(&s);
    assert!(!text.contains("PREFLIGHT"), "{text}");
    assert_eq!(
        text.lines().count(),
        1 + s.index.len(),
        "the header and a line per migration"
    );
}

#[test]
fn json_carries_each_migrations_preflight_as_the_api_has_it() {
    let mut s = sample_state(Scope::Namespace("apps".into()));
    with_preflight(&mut s);
    let json = cli::board_json(&s);
    let items = json["migrations"].as_array().unwrap();
    let by_name = |n: &str| items.iter().find(|m| m["name"] == n).unwrap();
    let held = by_name("w2-dc0-h0-vm1");
    assert_eq!(held["heldByPreflight"], true);
    assert_eq!(held["phase"], "Pending");
    let concerns = held["preflight"]["concerns"].as_array().unwrap();
    assert_eq!(concerns.len(), 4);
    assert_eq!(concerns[0]["code"], "SnapshotPresent");
    assert_eq!(concerns[0]["severity"], "Critical");
    assert!(
        concerns[0]["message"]
            .as_str()
            .unwrap()
            .contains("snapshot"),
        "{held}"
    );
    let accepted = by_name("w2-dc0-h0-vm2");
    assert_eq!(accepted["heldByPreflight"], false);
    assert_eq!(accepted["preflight"]["accepted"][0], "SharedDisk");
    let never = by_name("legacy-erp");
    assert!(never["preflight"].is_null(), "{never}");
    assert_eq!(never["heldByPreflight"], false);
}
