//! The API contract of ferry's CRDs as a real kube-apiserver enforces it: the samples apply,
//! `kubectl explain` teaches, invalid objects are rejected with a message naming the field, the
//! status subresource separates spec from status, and server-side apply merges conditions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ferry_crds::{
    MigrationWave, VirtualMachineMigration, child_migration,
    fixtures::{migration_spec, wave as wave_fixture},
    names,
};
use ferry_harness::{TestNamespace, eventually, lab, repo_root};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
const MANAGER: &str = "ferry-api-tests";

/// Installs the committed CRDs (deploy/crds) with server-side apply and waits until both kinds
/// are served. Idempotent, so every test (and every test binary sharing the lab) may call it.
async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in ["virtualmachinemigrations.yaml", "migrationwaves.yaml"] {
        let path = repo_root().join("deploy/crds").join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).unwrap();
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap();
        eventually(&format!("CRD {name} to be established"), WAIT, || async {
            let crd = crds.get(&name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        })
        .await
        .unwrap();
    }
}

/// A namespace for one test, with the CRDs installed and served in it.
async fn setup(prefix: &str) -> TestNamespace {
    let ns = lab().namespace(prefix).await.unwrap();
    install_crds(&ns.client).await;
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let waves: Api<MigrationWave> = ns.api();
    eventually("both kinds to be served", WAIT, || async {
        (vmms.list(&Default::default()).await.is_ok()
            && waves.list(&Default::default()).await.is_ok())
        .then_some(())
    })
    .await
    .unwrap();
    ns
}

fn dynamic_api<K: Resource<DynamicType = ()>>(ns: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::erase::<K>(&()))
}

fn vmm_json(name: &str) -> Value {
    let mut vmm = VirtualMachineMigration::new(name, migration_spec());
    // No controller should act on these objects; paused says so to one that watches everything.
    vmm.spec.paused = true;
    serde_json::to_value(&vmm).unwrap()
}

fn wave_json(name: &str) -> Value {
    let mut w = wave_fixture(name, 3);
    w.metadata = Default::default();
    w.metadata.name = Some(name.into());
    w.spec.paused = true;
    serde_json::to_value(&w).unwrap()
}

/// Sets (or, with `None`, removes) the value at a JSON pointer, creating objects on the way.
fn set(v: &mut Value, pointer: &str, new: Option<Value>) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let mut cur = v;
    for part in parent.split('/').filter(|p| !p.is_empty()) {
        cur = match cur {
            Value::Array(a) => &mut a[part.parse::<usize>().unwrap()],
            _ => cur
                .as_object_mut()
                .unwrap()
                .entry(part)
                .or_insert_with(|| json!({})),
        };
    }
    match (cur, new) {
        (Value::Array(a), Some(n)) => a[key.parse::<usize>().unwrap()] = n,
        (Value::Array(a), None) => {
            a.remove(key.parse::<usize>().unwrap());
        }
        (Value::Object(o), Some(n)) => {
            o.insert(key.to_owned(), n);
        }
        (Value::Object(o), None) => {
            o.remove(key);
        }
        (other, _) => panic!("cannot set {pointer} in {other}"),
    }
}

fn api_error(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("not an API error: {other}"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Vmm,
    Wave,
}

/// One object the API server must refuse: `edits` applied to a valid object, and the texts the
/// refusal must contain (the field's path first).
struct Invalid {
    what: &'static str,
    kind: Kind,
    edits: Vec<(&'static str, Option<Value>)>,
    expect: &'static [&'static str],
}

fn invalid(
    what: &'static str,
    kind: Kind,
    edits: Vec<(&'static str, Option<Value>)>,
    expect: &'static [&'static str],
) -> Invalid {
    Invalid {
        what,
        kind,
        edits,
        expect,
    }
}

fn create_time_cases() -> Vec<Invalid> {
    use Kind::{Vmm, Wave};
    let long_label = json!("a".repeat(64));
    vec![
        invalid(
            "no source",
            Vmm,
            vec![("/spec/source", None)],
            &["spec.source", "Required value"],
        ),
        invalid(
            "no staging",
            Vmm,
            vec![("/spec/staging", None)],
            &["spec.staging", "Required value"],
        ),
        invalid(
            "no vSphere credentials",
            Vmm,
            vec![("/spec/source/credentialsSecretRef", None)],
            &["spec.source.credentialsSecretRef", "Required value"],
        ),
        invalid(
            "no VM selector",
            Vmm,
            vec![("/spec/source/name", None)],
            &["spec.source", "exactly one of name, id or uuid"],
        ),
        invalid(
            "name and id",
            Vmm,
            vec![("/spec/source/id", Some(json!("vm-42")))],
            &["spec.source", "exactly one of name, id or uuid"],
        ),
        invalid(
            "name, id and uuid",
            Vmm,
            vec![
                ("/spec/source/id", Some(json!("vm-42"))),
                (
                    "/spec/source/uuid",
                    Some(json!("42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d")),
                ),
            ],
            &["spec.source", "exactly one of name, id or uuid"],
        ),
        invalid(
            "thumbprint and insecure",
            Vmm,
            vec![("/spec/source/insecureSkipTLSVerify", Some(json!(true)))],
            &[
                "spec.source",
                "at most one of thumbprint or insecureSkipTLSVerify",
            ],
        ),
        invalid(
            "thumbprint without colons",
            Vmm,
            vec![(
                "/spec/source/thumbprint",
                Some(json!("ABCDEF0123456789ABCDEF0123456789ABCDEF01")),
            )],
            &["spec.source.thumbprint"],
        ),
        invalid(
            "http vCenter url",
            Vmm,
            vec![(
                "/spec/source/url",
                Some(json!("http://vcenter.example.com/sdk")),
            )],
            &["spec.source.url", "url must be an https URL"],
        ),
        invalid(
            "vCenter url not a URL",
            Vmm,
            vec![("/spec/source/url", Some(json!("vcenter.example.com")))],
            &["spec.source.url", "url must be an https URL"],
        ),
        invalid(
            "unknown restorePowerState",
            Vmm,
            vec![("/spec/source/restorePowerState", Some(json!("Sometimes")))],
            &["spec.source.restorePowerState", "Unsupported value"],
        ),
        invalid(
            "powerOff not a boolean",
            Vmm,
            vec![("/spec/source/powerOff", Some(json!("yes")))],
            &["spec.source.powerOff"],
        ),
        invalid(
            "malformed moref",
            Vmm,
            vec![
                ("/spec/source/name", None),
                ("/spec/source/id", Some(json!("42-vm"))),
            ],
            &["spec.source.id"],
        ),
        invalid(
            "malformed uuid",
            Vmm,
            vec![
                ("/spec/source/name", None),
                ("/spec/source/uuid", Some(json!("not-a-uuid"))),
            ],
            &["spec.source.uuid"],
        ),
        invalid(
            "source VM name too long",
            Vmm,
            vec![("/spec/source/name", Some(json!("v".repeat(81))))],
            &["spec.source.name"],
        ),
        invalid(
            "Secret name not a DNS name",
            Vmm,
            vec![(
                "/spec/source/credentialsSecretRef/name",
                Some(json!("Bad Name")),
            )],
            &["spec.source.credentialsSecretRef.name"],
        ),
        invalid(
            "target name with capitals and underscores",
            Vmm,
            vec![("/spec/target/name", Some(json!("DC0_H0_VM0")))],
            &["spec.target.name"],
        ),
        invalid(
            "target name longer than a label",
            Vmm,
            vec![("/spec/target/name", Some(long_label.clone()))],
            &["spec.target.name"],
        ),
        invalid(
            "unknown runStrategy",
            Vmm,
            vec![("/spec/target/runStrategy", Some(json!("Sometimes")))],
            &["spec.target.runStrategy", "Unsupported value"],
        ),
        invalid(
            "health check with two probes",
            Vmm,
            vec![(
                "/spec/target/healthCheck",
                Some(json!({"tcp": {"port": 22}, "http": {"port": 80}})),
            )],
            &[
                "spec.target.healthCheck",
                "healthCheck takes exactly one of tcp and http",
            ],
        ),
        invalid(
            "health check of a VM ferry leaves stopped",
            Vmm,
            vec![
                (
                    "/spec/target/healthCheck",
                    Some(json!({"tcp": {"port": 22}})),
                ),
                ("/spec/target/runStrategy", Some(json!("Halted"))),
            ],
            &["spec.target", "healthCheck probes the running guest"],
        ),
        invalid(
            "hook without a command",
            Vmm,
            vec![(
                "/spec/hooks",
                Some(json!({"preCutover": {"image": "reg/q:1", "command": []}})),
            )],
            &["spec.hooks.preCutover.command"],
        ),
        invalid(
            "hook without an image",
            Vmm,
            vec![(
                "/spec/hooks",
                Some(json!({"postCutover": {"command": ["q"]}})),
            )],
            &["spec.hooks.postCutover.image", "Required value"],
        ),
        invalid(
            "hook with a timeout of 0",
            Vmm,
            vec![(
                "/spec/hooks",
                Some(
                    json!({"preCutover": {"image": "reg/q:1", "command": ["q"], "timeoutSeconds": 0}}),
                ),
            )],
            &["spec.hooks.preCutover.timeoutSeconds"],
        ),
        invalid(
            "health check of port 0",
            Vmm,
            vec![(
                "/spec/target/healthCheck",
                Some(json!({"tcp": {"port": 0}})),
            )],
            &["spec.target.healthCheck.tcp.port"],
        ),
        invalid(
            "unknown volumeMode",
            Vmm,
            vec![("/spec/target/volumeMode", Some(json!("Tape")))],
            &["spec.target.volumeMode", "Unsupported value"],
        ),
        invalid(
            "network both pod and multus",
            Vmm,
            vec![(
                "/spec/target/networks",
                Some(json!([
            {"source": "VM Network", "pod": {}, "multus": {"networkName": "vlan10"}}])),
            )],
            &["spec.target.networks[0]", "exactly one of pod or multus"],
        ),
        invalid(
            "network neither pod nor multus",
            Vmm,
            vec![(
                "/spec/target/networks",
                Some(json!([{"source": "VM Network"}])),
            )],
            &["spec.target.networks[0]", "exactly one of pod or multus"],
        ),
        invalid(
            "two networks on the pod network",
            Vmm,
            vec![(
                "/spec/target/networks",
                Some(json!([
            {"source": "VM Network", "pod": {}}, {"source": "DMZ", "pod": {}}])),
            )],
            &["spec.target.networks", "at most one source network to pod"],
        ),
        invalid(
            "the same source network twice",
            Vmm,
            vec![(
                "/spec/target/networks",
                Some(json!([
            {"source": "VM Network", "pod": {}}, {"source": "VM Network", "multus": {"networkName": "vlan10"}}])),
            )],
            &["spec.target.networks[1]", "Duplicate value"],
        ),
        invalid(
            "ftp staging endpoint",
            Vmm,
            vec![(
                "/spec/staging/endpoint",
                Some(json!("ftp://s3.example.com")),
            )],
            &[
                "spec.staging.endpoint",
                "endpoint must be an http or https URL",
            ],
        ),
        invalid(
            "bucket with capitals",
            Vmm,
            vec![("/spec/staging/bucket", Some(json!("Ferry_Staging")))],
            &["spec.staging.bucket"],
        ),
        invalid(
            "bucket with ..",
            Vmm,
            vec![("/spec/staging/bucket", Some(json!("ferry..staging")))],
            &["spec.staging.bucket", "valid S3 bucket name"],
        ),
        invalid(
            "bucket shaped like an IP address",
            Vmm,
            vec![("/spec/staging/bucket", Some(json!("192.168.1.10")))],
            &["spec.staging.bucket", "valid S3 bucket name"],
        ),
        invalid(
            "bucket too short",
            Vmm,
            vec![("/spec/staging/bucket", Some(json!("ab")))],
            &["spec.staging.bucket"],
        ),
        invalid(
            "prefix with a leading slash",
            Vmm,
            vec![("/spec/staging/prefix", Some(json!("/ferry")))],
            &["spec.staging.prefix"],
        ),
        invalid(
            "no staging credentials",
            Vmm,
            vec![("/spec/staging/credentialsSecretRef", None)],
            &["spec.staging.credentialsSecretRef", "Required value"],
        ),
        invalid(
            "unknown disk format",
            Vmm,
            vec![("/spec/conversion/format", Some(json!("vmdk")))],
            &["spec.conversion.format", "Unsupported value"],
        ),
        invalid(
            "converter image with spaces",
            Vmm,
            vec![("/spec/conversion/image", Some(json!("ferry converter")))],
            &["spec.conversion.image"],
        ),
        invalid(
            "negative retry",
            Vmm,
            vec![("/spec/retry", Some(json!(-1)))],
            &["spec.retry"],
        ),
        invalid(
            "name longer than a label",
            Vmm,
            vec![("/metadata/name", Some(long_label.clone()))],
            &["metadata.name must be at most 63 characters"],
        ),
        invalid(
            "wave without VMs",
            Wave,
            vec![("/spec/vms", Some(json!([])))],
            &["spec.vms"],
        ),
        invalid(
            "wave VM with name and uuid",
            Wave,
            vec![(
                "/spec/vms/1/uuid",
                Some(json!("42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d")),
            )],
            &["spec.vms[1]", "exactly one of name, id or uuid"],
        ),
        invalid(
            "wave VM with only a target name",
            Wave,
            vec![("/spec/vms/0", Some(json!({"targetName": "db"})))],
            &["spec.vms[0]", "exactly one of name, id or uuid"],
        ),
        invalid(
            "wave VM target name not a label",
            Wave,
            vec![("/spec/vms/0/targetName", Some(json!("Billing_DB")))],
            &["spec.vms[0].targetName"],
        ),
        invalid(
            "wave VM powered on by a halted template",
            Wave,
            vec![
                ("/spec/template/target/runStrategy", Some(json!("Halted"))),
                ("/spec/vms/1/powerState", Some(json!("PoweredOn"))),
            ],
            &[
                "spec.vms",
                "powerState PoweredOn needs a template runStrategy",
            ],
        ),
        invalid(
            "maxInFlight 0",
            Wave,
            vec![("/spec/maxInFlight", Some(json!(0)))],
            &["spec.maxInFlight"],
        ),
        invalid(
            "wave thumbprint and insecure",
            Wave,
            vec![(
                "/spec/template/source/insecureSkipTLSVerify",
                Some(json!(true)),
            )],
            &[
                "spec.template.source",
                "at most one of thumbprint or insecureSkipTLSVerify",
            ],
        ),
        invalid(
            "wave without staging",
            Wave,
            vec![("/spec/template/staging", None)],
            &["spec.template.staging", "Required value"],
        ),
        invalid(
            "wave name longer than a label",
            Wave,
            vec![("/metadata/name", Some(long_label))],
            &["metadata.name must be at most 63 characters"],
        ),
    ]
}

#[tokio::test]
async fn invalid_objects_are_rejected_with_a_message_naming_the_field() {
    let ns = setup("api-invalid").await;
    let vmms = dynamic_api::<VirtualMachineMigration>(&ns);
    let waves = dynamic_api::<MigrationWave>(&ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    // The unedited objects are valid, so each refusal below is caused by its edit alone.
    for (api, base) in [(&vmms, vmm_json("valid")), (&waves, wave_json("valid"))] {
        let obj: DynamicObject = serde_json::from_value(base).unwrap();
        api.create(&dry_run, &obj).await.unwrap();
    }

    let cases = create_time_cases();
    assert!(
        cases.len() >= 30,
        "the table must hold at least 30 invalid objects"
    );
    let mut wrong = vec![];
    for (i, case) in cases.iter().enumerate() {
        let name = format!("invalid-{i}");
        let (api, mut obj) = match case.kind {
            Kind::Vmm => (&vmms, vmm_json(&name)),
            Kind::Wave => (&waves, wave_json(&name)),
        };
        for (pointer, value) in &case.edits {
            set(&mut obj, pointer, value.clone());
        }
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        match api.create(&dry_run, &obj).await {
            Ok(_) => wrong.push(format!("{}: accepted", case.what)),
            Err(e) => {
                let (code, message) = api_error(e);
                let missing: Vec<_> = case
                    .expect
                    .iter()
                    .filter(|t| !message.contains(*t))
                    .collect();
                if code != 422 || !missing.is_empty() {
                    wrong.push(format!(
                        "{}: {code} {message:?}, missing {missing:?}",
                        case.what
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases went wrong:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

/// Once a migration has started, `spec.staging` and `spec.conversion` are fixed until it is
/// settled (`Failed` or `Cancelled`): the status (written through its subresource, as the
/// controller does) decides, and the message names both fields and the way out.
#[tokio::test]
async fn staging_and_conversion_are_fixed_while_a_migration_runs() {
    let ns = setup("api-fixed").await;
    let vmms = dynamic_api::<VirtualMachineMigration>(&ns);
    vmms.create(
        &PostParams::default(),
        &serde_json::from_value(vmm_json("fixed")).unwrap(),
    )
    .await
    .unwrap();
    let phase = |p: &str| json!({"status": {"phase": p}});
    let changes = [
        ("prefix", json!({"spec": {"staging": {"prefix": "moved"}}})),
        (
            "bucket",
            json!({"spec": {"staging": {"bucket": "other-bucket"}}}),
        ),
        (
            "format",
            json!({"spec": {"conversion": {"format": "qcow2"}}}),
        ),
    ];
    // Not started yet: anything goes.
    vmms.patch(
        "fixed",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"staging": {"prefix": "early"}}})),
    )
    .await
    .unwrap();
    let mut wrong = vec![];
    for running in [
        "Preparing",
        "Converting",
        "Importing",
        "Validating",
        "Succeeded",
    ] {
        vmms.patch_status(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(&phase(running)),
        )
        .await
        .unwrap();
        for (what, patch) in &changes {
            match vmms
                .patch("fixed", &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => wrong.push(format!("{running}: {what} accepted")),
                Err(e) => {
                    let (code, message) = api_error(e);
                    if code != 422
                        || !message.contains("spec.staging and spec.conversion cannot change")
                        || !message.contains("raise spec.retry")
                    {
                        wrong.push(format!("{running}: {what}: {code} {message:?}"));
                    }
                }
            }
        }
        // Steering is not refused.
        vmms.patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for settled in ["Failed", "Cancelled"] {
        vmms.patch_status(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(&phase(settled)),
        )
        .await
        .unwrap();
        for (_, patch) in &changes {
            vmms.patch("fixed", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap_or_else(|e| panic!("{settled}: {e}"));
        }
        vmms.patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"staging": {"prefix": format!("p-{}", settled.to_lowercase())}, "conversion": {"format": "raw"}}})),
        )
        .await
        .unwrap();
    }
}

/// Updates the API server must refuse: `edit` applied (as a merge patch) to a stored object.
#[tokio::test]
async fn updates_that_break_the_rules_are_rejected_with_a_message_naming_the_field() {
    let ns = setup("api-updates").await;
    let vmms = dynamic_api::<VirtualMachineMigration>(&ns);
    let waves = dynamic_api::<MigrationWave>(&ns);

    let mut vmm = vmm_json("stored");
    set(&mut vmm, "/spec/retry", Some(json!(2)));
    vmms.create(
        &PostParams::default(),
        &serde_json::from_value(vmm).unwrap(),
    )
    .await
    .unwrap();
    let mut wave = wave_json("stored");
    set(&mut wave, "/spec/retry", Some(json!(2)));
    waves
        .create(
            &PostParams::default(),
            &serde_json::from_value(wave).unwrap(),
        )
        .await
        .unwrap();

    let cases: Vec<(&str, &Api<DynamicObject>, Value, &[&str])> = vec![
        (
            "retry decreased",
            &vmms,
            json!({"spec": {"retry": 1}}),
            &["spec.retry", "retry may not decrease"],
        ),
        (
            "source VM changed",
            &vmms,
            json!({"spec": {"source": {"name": "DC0_H0_VM1"}}}),
            &["spec.source", "source is immutable"],
        ),
        (
            "source endpoint changed",
            &vmms,
            json!({"spec": {"source": {"url": "https://other.example.com/sdk"}}}),
            &["spec.source", "source is immutable"],
        ),
        (
            "power policy changed",
            &vmms,
            json!({"spec": {"source": {"powerOff": false}}}),
            &["spec.source", "source is immutable"],
        ),
        (
            "target name set later",
            &vmms,
            json!({"spec": {"target": {"name": "other"}}}),
            &["spec.target", "target is immutable"],
        ),
        (
            "target run strategy changed",
            &vmms,
            json!({"spec": {"target": {"runStrategy": "Halted"}}}),
            &["spec.target", "target is immutable"],
        ),
        (
            "wave retry decreased",
            &waves,
            json!({"spec": {"retry": 0}}),
            &["spec.retry", "retry may not decrease"],
        ),
    ];
    let mut wrong = vec![];
    for (what, api, patch, expect) in &cases {
        match api
            .patch("stored", &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => wrong.push(format!("{what}: accepted")),
            Err(e) => {
                let (code, message) = api_error(e);
                let missing: Vec<_> = expect.iter().filter(|t| !message.contains(*t)).collect();
                if code != 422 || !missing.is_empty() {
                    wrong.push(format!("{what}: {code} {message:?}, missing {missing:?}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases went wrong:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );

    // What the rules allow: raising retry, cancelling, pausing, and changing staging (the
    // object has no status: it never started).
    let allowed = json!({"spec": {"retry": 3, "cancel": true, "paused": false, "staging": {"bucket": "other-bucket"}}});
    vmms.patch("stored", &PatchParams::default(), &Patch::Merge(&allowed))
        .await
        .unwrap();
    waves
        .patch(
            "stored",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"retry": 5, "maxInFlight": 1}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn every_sample_applies_and_prints_its_columns() {
    let ns = setup("api-samples").await;
    let lab = lab();
    for sample in ["migration.yaml", "wave.yaml"] {
        let path = repo_root().join("deploy/samples").join(sample);
        lab.kubectl_ok(&["apply", "-n", &ns.name, "-f", path.to_str().unwrap()])
            .unwrap();
    }
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let vmm = vmms.get("dc0-h0-vm0").await.unwrap();
    assert_eq!(vmm.spec.source.vm.name.as_deref(), Some("DC0_H0_VM0"));
    assert_eq!(vmm.spec.staging.region, "us-east-1", "defaults are applied");
    let wave = ns.api::<MigrationWave>().get("wave-1").await.unwrap();
    assert!(wave.spec.vms.len() >= 3);

    let out = lab.kubectl_ok(&["get", "vmm", "-n", &ns.name]).unwrap();
    let header: Vec<_> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "PROGRESS", "WAVE", "READY", "AGE"],
        "{out}"
    );
    let out = lab.kubectl_ok(&["get", "wave", "-n", &ns.name]).unwrap();
    let header: Vec<_> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PHASE",
            "DONE",
            "TOTAL",
            "FAILED",
            "IN-FLIGHT",
            "AGE"
        ],
        "{out}"
    );
    let out = lab
        .kubectl_ok(&["get", "migration", "-n", &ns.name, "-o", "name"])
        .unwrap();
    assert!(
        out.contains("dc0-h0-vm0") && out.contains("wave-1"),
        "category migration lists both kinds: {out}"
    );

    // The wave's child migrations, as ferry-crds builds them, are valid objects too; the Wave
    // column reads the wave label.
    for vm in &wave.spec.vms {
        let child = child_migration(&wave, vm).unwrap();
        vmms.create(&PostParams::default(), &child).await.unwrap();
    }
    let first = child_migration(&wave, &wave.spec.vms[0])
        .unwrap()
        .name_any();
    let out = lab
        .kubectl_ok(&["get", "vmm", &first, "-n", &ns.name])
        .unwrap();
    let mut lines = out.lines();
    let (header, row) = (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    );
    let at = header.find("WAVE").unwrap();
    assert_eq!(
        row.get(at..).and_then(|r| r.split_whitespace().next()),
        Some("wave-1"),
        "Wave column:\n{out}"
    );
    let held = vmms.get(&first).await.unwrap();
    assert!(held.is_held() && held.wave() == Some("wave-1"));
    assert_eq!(held.owner_references()[0].uid, wave.uid().unwrap());
}

#[tokio::test]
async fn kubectl_explain_shows_the_field_descriptions() {
    let _ns = setup("api-explain").await;
    let lab = lab();
    // The CRD's OpenAPI is published a moment after the CRD is established.
    let out = eventually("kubectl explain vmm.spec.source", WAIT, || async {
        lab.kubectl_ok(&["explain", "vmm.spec.source"])
            .ok()
            .filter(|o| o.contains("thumbprint"))
    })
    .await
    .unwrap();
    for text in [
        "The vSphere endpoint, the VM to migrate and its power policy. Immutable.",
        "URL of the vCenter or ESXi SDK",
        "Taken from the credentials Secret (key url) when left out",
        "credentialsSecretRef",
        "restorePowerState",
        "DC0_H0_VM0",
    ] {
        // kubectl wraps descriptions at 80 columns: compare with the words rejoined.
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(text),
            "kubectl explain vmm.spec.source lacks {text:?}:\n{out}"
        );
    }
    let out = lab
        .kubectl_ok(&["explain", "wave.spec.maxInFlight"])
        .unwrap();
    assert!(
        out.contains("How many migrations of the wave may be past Queued"),
        "{out}"
    );
    let out = lab
        .kubectl_ok(&["explain", "vmm.status.conditions.reason"])
        .unwrap();
    assert!(out.contains("VMNotFound"), "enums are listed: {out}");
}

#[tokio::test]
async fn status_and_spec_are_written_through_separate_endpoints() {
    let ns = setup("api-status").await;
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let created = vmms
        .create(
            &PostParams::default(),
            &VirtualMachineMigration::new("split", {
                let mut spec = migration_spec();
                spec.paused = true;
                spec
            }),
        )
        .await
        .unwrap();
    let generation = created.metadata.generation;

    // A status write that also tries to change spec changes only status.
    let both = json!({"spec": {"paused": false, "retry": 7}, "status": {"phase": "Importing", "attempts": 1}});
    let after = vmms
        .patch_status("split", &PatchParams::default(), &Patch::Merge(&both))
        .await
        .unwrap();
    assert_eq!(
        after.spec, created.spec,
        "the status subresource must not change spec"
    );
    assert_eq!(after.metadata.generation, generation);
    let status = after.status.clone().unwrap();
    assert_eq!(
        (status.phase, status.attempts),
        (ferry_crds::Phase::Importing, 1)
    );

    // A spec write that also tries to change status changes only spec.
    let both = json!({"spec": {"cancel": true}, "status": {"phase": "Failed", "attempts": 9}});
    let after = vmms
        .patch("split", &PatchParams::default(), &Patch::Merge(&both))
        .await
        .unwrap();
    assert!(after.spec.cancel);
    assert_eq!(
        after.status,
        Some(status),
        "the main resource must not change status"
    );
    assert_eq!(
        after.metadata.generation,
        generation.map(|g| g + 1),
        "a spec change bumps the generation"
    );
}

#[tokio::test]
async fn server_side_apply_of_one_condition_leaves_the_others_alone() {
    let ns = setup("api-ssa").await;
    let vmms: Api<VirtualMachineMigration> = ns.api();
    vmms.create(
        &PostParams::default(),
        &VirtualMachineMigration::new("ssa", migration_spec()),
    )
    .await
    .unwrap();

    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
    };
    let apply = |manager: &'static str, conditions: Value| {
        let vmms = vmms.clone();
        async move {
            let body = json!({
                "apiVersion": ferry_crds::API_VERSION,
                "kind": "VirtualMachineMigration",
                "metadata": {"name": "ssa"},
                "status": {"conditions": conditions},
            });
            vmms.patch_status("ssa", &PatchParams::apply(manager), &Patch::Apply(&body))
                .await
                .unwrap()
        }
    };
    let types = |vmm: &VirtualMachineMigration| -> Vec<(String, String)> {
        vmm.status
            .iter()
            .flat_map(|s| &s.conditions)
            .map(|c| (c.type_.to_string(), c.reason.to_string()))
            .collect()
    };

    apply(
        names::CONTROLLER_FIELD_MANAGER,
        json!([condition("SourceDiscovered", "True", "Discovered", "")]),
    )
    .await;
    let after = apply(
        "another-tool",
        json!([condition(
            "Validated",
            "False",
            "UnsupportedDiskLayout",
            "RDM disk"
        )]),
    )
    .await;
    assert_eq!(
        types(&after),
        [
            ("SourceDiscovered".into(), "Discovered".into()),
            ("Validated".into(), "UnsupportedDiskLayout".into())
        ]
    );

    // The controller re-applies its own condition: the other manager's stays untouched.
    let after = apply(
        names::CONTROLLER_FIELD_MANAGER,
        json!([condition("SourceDiscovered", "False", "VMNotFound", "gone")]),
    )
    .await;
    assert_eq!(
        types(&after),
        [
            ("SourceDiscovered".into(), "VMNotFound".into()),
            ("Validated".into(), "UnsupportedDiskLayout".into())
        ]
    );
    let validated = after
        .condition(ferry_crds::ConditionType::Validated)
        .unwrap();
    assert_eq!(validated.message, "RDM disk");

    // Applying without its condition removes only what that manager owned.
    let after = apply(names::CONTROLLER_FIELD_MANAGER, json!([])).await;
    assert_eq!(
        types(&after),
        [("Validated".into(), "UnsupportedDiskLayout".into())]
    );
}

#[path = "../../../crds/tests/common/doc_blocks.rs"]
mod doc_blocks;

/// Every migration and wave the README and docs/ show, whole, as the API server would take it
/// (a server-side dry-run in a test namespace: the schema, the CEL rules, the defaults); the
/// docs' own check (`crds/tests/docs.rs`) only parses them.
#[tokio::test]
async fn every_object_the_docs_show_passes_the_api_servers_validation() {
    use serde::Deserialize;
    let ns = setup("api-docs").await;
    let vmms = dynamic_api::<VirtualMachineMigration>(&ns);
    let waves = dynamic_api::<MigrationWave>(&ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let (mut tried, mut refused) = (0, vec![]);
    for b in doc_blocks::all_blocks().iter().filter(|b| b.lang == "yaml") {
        for (i, doc) in serde_yaml::Deserializer::from_str(&b.text).enumerate() {
            let mut v = serde_json::to_value(serde_yaml::Value::deserialize(doc).unwrap()).unwrap();
            let api = match v["kind"].as_str() {
                Some("VirtualMachineMigration") => &vmms,
                Some("MigrationWave") => &waves,
                _ => continue,
            };
            // A fragment shown for one field is not an object to apply.
            if v["metadata"]["name"].as_str().is_none() || v["spec"].is_null() {
                continue;
            }
            v["metadata"]["namespace"] = json!(ns.name);
            let obj: DynamicObject = serde_json::from_value(v).unwrap();
            tried += 1;
            if let Err(e) = api.create(&dry_run, &obj).await {
                refused.push(format!(
                    "{}:{} (document {i}): {}",
                    b.page,
                    b.line,
                    api_error(e).1
                ));
            }
        }
    }
    assert!(tried >= 3, "the docs show {tried} whole objects");
    assert!(refused.is_empty(), "refused: {refused:#?}");
}
