//! Hooks: a program of the migration author's own, run as a Job in the migration's namespace
//! right before the cutover (`preCutover`: the source is still as it was) and right after the
//! migrated guest passed its readiness check (`postCutover`: before its health check and the
//! hand-over), with the migration's context as a file and no credentials of anyone's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.hooks` (and a wave's `spec.template.hooks`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    /// Run before the source is touched for the cutover: a cold migration's before its power-off
    /// (and its copy), a warm one's before the cutover's power-off. A failure stops the
    /// migration with the source as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_cutover: Option<Hook>,
    /// Run once the migrated guest passed its readiness check, before its health check and the
    /// hand-over. A failure fails the migration as a failed health check does (rolled back
    /// under `onHealthCheckFailure: RollBack`, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_cutover: Option<Hook>,
}

/// One hook: a container of the author's choosing, run once per attempt as a Job under Pod
/// Security `restricted` (user 65532, a read-only root with `/tmp` writable), with no
/// ServiceAccount token and no Secret; the migration's context is the JSON file named by
/// `$FERRY_HOOK_CONTEXT`. Exit 0 passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// The container image (the converter image allow list does not apply).
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// The program and its first arguments (the container's `command`).
    #[schemars(length(min = 1, max = 64))]
    pub command: Vec<String>,
    /// More arguments (the container's `args`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub args: Vec<String>,
    /// How long the hook may run before it is stopped and counts as failed (default 600).
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: u32,
}

fn default_timeout() -> u32 {
    600
}

/// Which hook.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum HookPoint {
    /// `spec.hooks.preCutover`.
    PreCutover,
    /// `spec.hooks.postCutover`.
    PostCutover,
}

impl HookPoint {
    /// The spec field's name (`preCutover`).
    pub fn field(self) -> &'static str {
        match self {
            HookPoint::PreCutover => "preCutover",
            HookPoint::PostCutover => "postCutover",
        }
    }

    /// The suffix of its Job's name (`pre-cutover`).
    pub fn suffix(self) -> &'static str {
        match self {
            HookPoint::PreCutover => "pre-cutover",
            HookPoint::PostCutover => "post-cutover",
        }
    }
}

impl Hooks {
    /// The hook at `point`, if one is set.
    pub fn at(&self, point: HookPoint) -> Option<&Hook> {
        match point {
            HookPoint::PreCutover => self.pre_cutover.as_ref(),
            HookPoint::PostCutover => self.post_cutover.as_ref(),
        }
    }
}

/// Where a hook's run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HookState {
    /// Its Job runs.
    Running,
    /// It exited 0.
    Succeeded,
    /// It failed (the message says how).
    Failed,
}

/// `status.hooks[]`: one hook's run in the current attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// Which hook.
    pub point: HookPoint,
    /// The attempt it ran in (`status.attempts`): a retry that starts over runs it again.
    pub attempt: i32,
    /// Its Job.
    pub job: String,
    /// Where it stands.
    pub state: HookState,
    /// When its Job was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// What its failure said (its termination message or log's end), empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
