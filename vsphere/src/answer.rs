//! vSphere's answer about a VM, read strictly whatever features vim_rs was built with; when vim_rs
//! refuses part of it, that part is named from the answer's text, never dropped unnoticed.

use std::borrow::Cow;
use std::ops::Range;

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};
use vim_rs::types::structs::{ObjectContent, PropertyFilterSpec, RetrieveOptions, RetrieveResult};
use vim_rs::xml::de::DeserializeOptions;

use super::{Unread, UnreadDevice};

/// The property whose entries are the VM's devices.
const DEVICES: &str = "config.hardware.device";

/// The RetrievePropertiesEx request. vim_rs keeps its own private and parses the answer itself;
/// ferry sends this one to get the answer's text and read it as [`read`] says.
pub(crate) struct RetrieveRequest<'a> {
    pub spec_set: &'a [PropertyFilterSpec],
    pub options: &'a RetrieveOptions,
}

impl miniserde::Serialize for RetrieveRequest<'_> {
    fn begin(&self) -> miniserde::ser::Fragment<'_> {
        miniserde::ser::Fragment::Map(Box::new(RequestFields {
            request: self,
            next: 0,
        }))
    }
}

struct RequestFields<'b, 'a> {
    request: &'b RetrieveRequest<'a>,
    next: usize,
}

impl miniserde::ser::Map for RequestFields<'_, '_> {
    fn next(&mut self) -> Option<(Cow<'_, str>, &dyn miniserde::Serialize)> {
        let field = self.next;
        self.next += 1;
        match field {
            // vim_rs turns `_typeName` into the method element's xsi:type.
            0 => Some((
                Cow::Borrowed("_typeName"),
                &"RetrievePropertiesExRequestType",
            )),
            1 => Some((Cow::Borrowed("specSet"), &self.request.spec_set)),
            2 => Some((Cow::Borrowed("options"), self.request.options)),
            _ => None,
        }
    }
}

/// A RetrievePropertiesEx answer about one object: what was read, and what could not be.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The object and the properties read (none when the answer names no object).
    pub content: Option<ObjectContent>,
    /// What could not be read, in answer order.
    pub unread: Vec<Unread>,
}

/// Reads a RetrievePropertiesEx answer strictly: an element vim_rs cannot build fails the read,
/// with or without vim_rs' `vcsim_compat` (which would drop it silently).
///
/// # Guarantees
/// * When the whole answer reads, it is returned with nothing unread.
/// * Otherwise every property that does not read on its own is named; of the device list, every
///   device that does not read on its own (key, type, label, backing, as the text shows them),
///   or the whole property when no single device explains it. The rest of the answer, without
///   them, is read strictly. `unread` is then never empty.
///
/// # Errors
/// Why nothing could be read: the answer is not well-formed, or it does not read even without
/// the parts that fail on their own.
pub(crate) fn read(body: &str) -> Result<Answer, String> {
    if let Some(result) = strictly(body) {
        return Ok(Answer {
            content: result.objects.into_iter().next(),
            unread: Vec::new(),
        });
    }
    let props = scan(body)?;
    let mut keep: Vec<Keep> = Vec::with_capacity(props.len());
    let mut unread = Vec::new();
    for (i, prop) in props.iter().enumerate() {
        if reads(
            body,
            &props,
            |j| if j == i { Keep::Whole } else { Keep::None },
        ) {
            keep.push(Keep::Whole);
            continue;
        }
        let devices = match &prop.items {
            Some(items) if prop.name == DEVICES => items,
            _ => {
                unread.push(Unread::Property(prop.name.clone()));
                keep.push(Keep::None);
                continue;
            }
        };
        let alone = |k: usize| {
            reads(body, &props, |j| {
                if j == i {
                    Keep::Items(vec![k])
                } else {
                    Keep::None
                }
            })
        };
        let (ok, bad): (Vec<usize>, Vec<usize>) = (0..devices.each.len()).partition(|k| alone(*k));
        if bad.is_empty() {
            unread.push(Unread::Property(prop.name.clone()));
            keep.push(Keep::None);
        } else {
            unread.extend(
                bad.iter()
                    .map(|k| Unread::Device(devices.each[*k].1.clone())),
            );
            keep.push(Keep::Items(ok));
        }
    }
    if unread.is_empty() {
        return Err(
            "vSphere's answer does not read as a whole, though each of its properties does".into(),
        );
    }
    let rest = assemble(body, &props, |j| keep[j].clone());
    match strictly(&rest) {
        Some(result) => Ok(Answer {
            content: result.objects.into_iter().next(),
            unread,
        }),
        None => Err(format!(
            "vSphere's answer does not read even without {}",
            unread
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

/// Whether this build's vim_rs refuses what it cannot build, where vim_rs itself parses answers
/// (login, tasks, inventory lists): `false` when its `vcsim_compat` feature is on, which drops
/// such elements silently. A probe on a recorded answer, so it tells the truth about the binary
/// whatever the build asked for; `ferry-controller --version` prints it.
pub fn vim_rs_reads_strictly() -> bool {
    vim_rs::core::client::unmarshal::<RetrieveResult>(
        vim_rs::core::client::Transport::Soap,
        PROBE.as_bytes(),
    )
    .is_err()
}

/// An answer with one disk whose backing lacks a field the API requires (`partition`).
const PROBE: &str = r#"<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><RetrievePropertiesExResponse xmlns="urn:vim25"><returnval><objects><obj type="VirtualMachine">vm-1</obj><propSet><name>config.hardware.device</name><val xsi:type="ArrayOfVirtualDevice"><VirtualDevice xsi:type="VirtualDisk"><key>2001</key><backing xsi:type="VirtualDiskPartitionedRawDiskVer2BackingInfo"><deviceName>/vmfs/devices/disks/naa.1</deviceName><descriptorFileName>[ds] vm/p.vmdk</descriptorFileName></backing><capacityInKB>1024</capacityInKB></VirtualDevice></val></propSet></objects></returnval></RetrievePropertiesExResponse></soapenv:Body></soapenv:Envelope>"#;

/// The answer parsed with vim_rs' strict reader, explicitly: no element is dropped.
fn strictly(body: &str) -> Option<RetrieveResult> {
    vim_rs::xml::soap::vim_response_with::<RetrieveResult>(
        body,
        DeserializeOptions {
            tolerate_build_errors: false,
        },
    )
    .ok()
}

/// What of a property to keep when reassembling an answer.
#[derive(Clone, Debug)]
enum Keep {
    None,
    Whole,
    /// Only these entries of its array value, by index.
    Items(Vec<usize>),
}

/// One `propSet` of the answer, by byte ranges of its text.
#[derive(Debug)]
struct PropSpan {
    name: String,
    span: Range<usize>,
    /// The entries of its value, when the value is an array with elements.
    items: Option<Items>,
}

#[derive(Debug)]
struct Items {
    /// Between `<val ...>` and `</val>`.
    inner: Range<usize>,
    /// Each entry's range, and what its text says about it as a device.
    each: Vec<(Range<usize>, UnreadDevice)>,
}

/// Whether the answer reassembled with `keep` reads strictly.
fn reads(body: &str, props: &[PropSpan], keep: impl Fn(usize) -> Keep) -> bool {
    strictly(&assemble(body, props, keep)).is_some()
}

/// The answer with only what `keep` says of each property (in answer order): its text before
/// the first `propSet` and after the last stay as they are.
fn assemble(body: &str, props: &[PropSpan], keep: impl Fn(usize) -> Keep) -> String {
    let (Some(first), Some(last)) = (props.first(), props.last()) else {
        return body.to_owned();
    };
    let mut out = String::with_capacity(body.len());
    out.push_str(&body[..first.span.start]);
    for (i, p) in props.iter().enumerate() {
        match (keep(i), &p.items) {
            (Keep::None, _) => {}
            (Keep::Whole, _) | (Keep::Items(_), None) => out.push_str(&body[p.span.clone()]),
            (Keep::Items(ks), Some(items)) => {
                out.push_str(&body[p.span.start..items.inner.start]);
                for k in ks {
                    if let Some((r, _)) = items.each.get(k) {
                        out.push_str(&body[r.clone()]);
                    }
                }
                out.push_str(&body[items.inner.end..p.span.end]);
            }
        }
    }
    out.push_str(&body[last.span.end..]);
    out
}

/// The `propSet`s of an answer: names, byte ranges, and the entries of array values with what
/// their text says (key, type, label, backing type and file).
fn scan(body: &str) -> Result<Vec<PropSpan>, String> {
    let mut reader = Reader::from_str(body);
    let mut scanner = Scanner::default();
    let malformed = |e: quick_xml::Error, at: u64| {
        format!("vSphere's answer is not well-formed XML at byte {at}: {e}")
    };
    loop {
        let before = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let event = reader
            .read_event()
            .map_err(|e| malformed(e, reader.error_position()))?;
        let after = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        match event {
            Event::Start(e) => scanner.start(&e, before, after),
            Event::End(_) => scanner.end(before, after),
            Event::Text(t) => scanner.text.push_str(t.as_ref()),
            Event::CData(t) => scanner.text.push_str(t.as_ref()),
            Event::GeneralRef(r) => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    scanner.text.push(c);
                } else if let Some(s) = quick_xml::escape::resolve_predefined_entity(r.as_ref()) {
                    scanner.text.push_str(s);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if scanner.props.is_empty() {
        return Err("vSphere's answer holds no property".into());
    }
    Ok(scanner.props)
}

/// What [`scan`] has seen of the answer so far.
#[derive(Default)]
struct Scanner {
    /// The open elements, outermost first.
    path: Vec<String>,
    props: Vec<PropSpan>,
    /// Within the current propSet: its start, name, and the value's entries so far.
    prop: Option<(usize, String, Option<Items>)>,
    /// Within an entry of an array value: its start, and what its text said so far.
    entry: Option<(usize, UnreadDevice)>,
    /// The text of the element being read.
    text: String,
}

impl Scanner {
    /// Whether the innermost open element is a property's value (`propSet/val`): an element
    /// starting or ending right inside it is an entry of the value.
    fn in_value(&self) -> bool {
        matches!(self.path.as_slice(), [.., set, val] if set == "propSet" && val == "val")
    }

    /// Element `e` starts at `before`; its content at `after`.
    fn start(&mut self, e: &BytesStart<'_>, before: usize, after: usize) {
        let name = local(e);
        self.text.clear();
        match (self.path.last().map(String::as_str), name.as_str()) {
            (Some("objects"), "propSet") => self.prop = Some((before, String::new(), None)),
            (Some("propSet"), "val") => {
                if let Some((_, _, items)) = self.prop.as_mut() {
                    *items = Some(Items {
                        inner: after..after,
                        each: Vec::new(),
                    });
                }
            }
            (Some("val"), _) if self.in_value() => {
                self.entry = Some((
                    before,
                    UnreadDevice {
                        kind: xsi_type(e).unwrap_or_default(),
                        ..UnreadDevice::default()
                    },
                ));
            }
            (Some(_), "backing") if self.entry.is_some() && in_entry(&self.path) == 0 => {
                if let Some((_, d)) = self.entry.as_mut() {
                    d.backing = xsi_type(e);
                }
            }
            _ => {}
        }
        self.path.push(name);
    }

    /// The innermost open element ends: its end tag starts at `before` and ends at `after`.
    fn end(&mut self, before: usize, after: usize) {
        let name = self.path.pop().unwrap_or_default();
        let in_value = self.in_value();
        let parent = self.path.last().map(String::as_str);
        match (parent, name.as_str()) {
            (Some("propSet"), "name") => {
                if let Some((_, n, _)) = self.prop.as_mut() {
                    *n = self.text.trim().to_owned();
                }
            }
            (Some("propSet"), "val") => {
                if let Some((_, _, Some(items))) = self.prop.as_mut() {
                    items.inner.end = before;
                }
            }
            (Some("objects"), "propSet") => {
                if let Some((start, name, items)) = self.prop.take() {
                    self.props.push(PropSpan {
                        name,
                        span: start..after,
                        items: items.filter(|i| !i.each.is_empty()),
                    });
                }
            }
            (Some("val"), _) if in_value => {
                if let (Some((start, d)), Some((_, _, Some(items)))) =
                    (self.entry.take(), self.prop.as_mut())
                {
                    items.each.push((start..after, d));
                }
            }
            _ => {
                if let Some((_, d)) = self.entry.as_mut() {
                    device_field(d, in_entry(&self.path), parent, &name, self.text.trim());
                }
            }
        }
        self.text.clear();
    }
}

/// What element `name` (under `parent`, `depth` below an entry's own children) with text
/// `value` says of the device the entry is: its key, label or backing file. Pure.
fn device_field(d: &mut UnreadDevice, depth: usize, parent: Option<&str>, name: &str, value: &str) {
    match (depth, parent, name) {
        (0, _, "key") => d.key = value.parse().ok(),
        (1, Some("deviceInfo"), "label") => d.label = Some(value.to_owned()),
        (1, Some("backing"), "fileName") => {
            d.file = Some(value.to_owned()).filter(|f| !f.is_empty())
        }
        _ => {}
    }
}

/// How deep below an array entry's own children the current element is: 0 for the entry's
/// children (`key`, `backing`), 1 for theirs (`deviceInfo/label`, `backing/fileName`).
/// `path` is the stack of open elements above the element being looked at.
fn in_entry(path: &[String]) -> usize {
    // path: ... propSet, val, <entry>, [child, [grandchild...]]
    path.iter()
        .rposition(|p| p == "val")
        .map_or(usize::MAX, |v| path.len().saturating_sub(v + 2))
}

fn local(e: &BytesStart<'_>) -> String {
    let name = e.local_name();
    let name: &str = name.as_ref();
    name.to_owned()
}

/// The value of an element's `xsi:type` attribute.
fn xsi_type(e: &BytesStart<'_>) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        let key: &str = a.key.as_ref();
        let is_type = key == "type" || key.ends_with(":type");
        (is_type && !key.starts_with("xmlns")).then(|| {
            let v: &str = a.value.as_ref();
            // `xsd:string` style values keep only the local name.
            v.rsplit(':').next().unwrap_or(v).to_owned()
        })
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// vcsim's answer about a lab VM (`ferry-lab shape` not applied): one disk, key 204.
    pub const VCSIM_VM: &str = include_str!("testdata/vcsim-vm.xml");
    /// vcsim's answer about a lab VM after `ferry-lab shape --add-disk unreadable`: a second disk
    /// (key 205, "Hard disk 2") whose description lacks a value the API requires.
    pub const VCSIM_VM_UNREADABLE_DISK: &str =
        include_str!("testdata/vcsim-vm-unreadable-disk.xml");

    fn names(a: &Answer) -> Vec<String> {
        a.content
            .iter()
            .flat_map(|c| c.prop_set.iter().flatten())
            .map(|p| p.name.clone())
            .collect()
    }

    #[test]
    fn an_answer_vim_rs_reads_is_read_whole() {
        let a = read(VCSIM_VM).unwrap();
        assert!(a.unread.is_empty(), "{:?}", a.unread);
        assert_eq!(names(&a).len(), 17, "{:?}", names(&a));
    }

    #[test]
    fn a_device_vim_rs_cannot_read_is_named_and_the_rest_is_read() {
        assert!(
            strictly(VCSIM_VM_UNREADABLE_DISK).is_none(),
            "vim_rs refuses the answer as a whole"
        );
        let a = read(VCSIM_VM_UNREADABLE_DISK).unwrap();
        assert_eq!(
            a.unread,
            vec![Unread::Device(UnreadDevice {
                key: Some(205),
                kind: "VirtualDisk".into(),
                label: Some("Hard disk 2".into()),
                backing: Some("VirtualDiskFlatVer2BackingInfo".into()),
                file: Some("[LocalDS_0] DC0_C0_RP0_VM0/disk2.vmdk".into()),
            })]
        );
        assert_eq!(
            a.unread[0].to_string(),
            "device 205 \"Hard disk 2\" (VirtualDisk, backing VirtualDiskFlatVer2BackingInfo, \
             [LocalDS_0] DC0_C0_RP0_VM0/disk2.vmdk) in config.hardware.device"
        );
        assert_eq!(names(&a).len(), 17, "every property is still read");
    }

    #[test]
    fn a_property_vim_rs_cannot_read_is_named_and_the_rest_is_read() {
        let bad = VCSIM_VM.replacen(
            ">1</val></propSet><propSet><name>config.hardware.numCoresPerSocket",
            ">one</val></propSet><propSet><name>config.hardware.numCoresPerSocket",
            1,
        );
        assert_ne!(
            bad, VCSIM_VM,
            "the fixture has numCPU 1 before numCoresPerSocket"
        );
        let a = read(&bad).unwrap();
        assert_eq!(
            a.unread,
            vec![Unread::Property("config.hardware.numCPU".into())]
        );
        let n = names(&a);
        assert!(
            n.len() == 16 && !n.iter().any(|p| p == "config.hardware.numCPU"),
            "{n:?}"
        );
    }

    #[test]
    fn an_answer_that_is_not_xml_reads_nothing() {
        let cut = &VCSIM_VM[..VCSIM_VM.len() / 2];
        assert!(read(cut).is_err());
        assert!(read("no XML at all").is_err());
    }

    #[test]
    fn the_probe_reads_once_its_unreadable_backing_is_gone() {
        let without = PROBE.replace(
            r#"<backing xsi:type="VirtualDiskPartitionedRawDiskVer2BackingInfo"><deviceName>/vmfs/devices/disks/naa.1</deviceName><descriptorFileName>[ds] vm/p.vmdk</descriptorFileName></backing>"#,
            "",
        );
        assert_ne!(without, PROBE);
        assert!(
            vim_rs::core::client::unmarshal::<RetrieveResult>(
                vim_rs::core::client::Transport::Soap,
                without.as_bytes(),
            )
            .is_ok(),
            "the probe fails for its backing alone"
        );
    }

    #[test]
    fn the_probe_tells_tolerant_reading_from_strict() {
        // What vim_rs' vcsim_compat does to every answer it parses: drop what does not build.
        let tolerant = vim_rs::xml::soap::vim_response_with::<RetrieveResult>(
            PROBE,
            DeserializeOptions {
                tolerate_build_errors: true,
            },
        );
        assert!(tolerant.is_ok(), "a tolerant reader takes the probe");
        assert!(strictly(PROBE).is_none(), "a strict one refuses it");
    }

    /// The build ferry's tests run is the build they prove: with vim_rs' `vcsim_compat` on
    /// (in this crate or unified in from any other), this fails.
    #[test]
    fn vim_rs_is_built_without_simulator_compatibility() {
        assert!(vim_rs_reads_strictly());
    }
}
