//! vSphere tags: the names of the VMs that carry one. Tags live in vCenter's tagging service,
//! which SOAP does not reach: it is read over vCenter's REST API (`/rest/com/vmware/cis/...`,
//! served by vCenter 6.5 and later, and by vcsim with govmomi's vAPI simulator). Every request
//! goes through the SOAP session's own HTTP client, so the endpoint was trusted (pinned
//! thumbprint, CA bundle) before the credentials go out a second time, for the REST login; the
//! REST session token never leaves this module and is never logged.

use std::fmt;

use reqwest::{Method, StatusCode, Url};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use vim_rs::mo;
use vim_rs::types::enums::MoTypesEnum;
use vim_rs::types::structs::{
    ManagedObjectReference, ObjectSpec, PropertyFilterSpec, RetrieveOptions,
};

use super::inventory::VmName;
use super::{Endpoint, Error, Result, Session};
use crate::tls::TlsObserver;

/// The header carrying the REST session (vCenter and vcsim alike).
const SESSION_HEADER: &str = "vmware-api-session-id";
/// VMs whose names one property-collector call asks for.
const NAMES_PER_CALL: usize = 500;

/// A tag as a wave's selector names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagRef<'a> {
    /// The tag's name.
    pub name: &'a str,
    /// Its category's name, when given.
    pub category: Option<&'a str>,
}

impl fmt::Display for TagRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.category {
            Some(c) => write!(f, "tag {:?} of category {c:?}", self.name),
            None => write!(f, "tag {:?}", self.name),
        }
    }
}

/// Why the tag a selector names cannot be used: the input, not the endpoint, is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagMiss {
    /// The endpoint serves no tagging API (a standalone ESXi host has no tags).
    NoTagging,
    /// No category has this name.
    NoCategory { category: String },
    /// No tag of this name (in this category, when one was given).
    NoTag {
        name: String,
        category: Option<String>,
    },
    /// Tags of this name exist in several categories and none was given.
    Ambiguous {
        name: String,
        categories: Vec<String>,
    },
}

impl fmt::Display for TagMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTagging => write!(
                f,
                "the endpoint serves no vSphere tagging API (a standalone ESXi host has no \
                 tags); select by folder or namePattern"
            ),
            Self::NoCategory { category } => write!(f, "no tag category named {category:?}"),
            Self::NoTag {
                name,
                category: Some(c),
            } => write!(f, "no tag named {name:?} in category {c:?}"),
            Self::NoTag {
                name,
                category: None,
            } => write!(f, "no tag named {name:?} in any category"),
            Self::Ambiguous { name, categories } => write!(
                f,
                "a tag named {name:?} exists in categories {}; name one in \
                 spec.selector.tag.category",
                categories
                    .iter()
                    .map(|c| format!("{c:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The names of the VMs carrying `tag`, sorted; `Ok(Err(miss))` when the tag cannot be found.
/// One SOAP session and one REST session, both closed before returning.
///
/// # Errors
/// As [`Session::connect`]; the REST login refused ([`Error::BadCredentials`]); other answers
/// of the endpoint.
pub async fn vms_tagged(
    endpoint: &Endpoint,
    tag: TagRef<'_>,
) -> Result<std::result::Result<Vec<String>, TagMiss>> {
    let session = Session::connect(endpoint).await?;
    let found = tagged_in(&session, endpoint, tag).await;
    let _ = session.logout().await;
    found
}

async fn tagged_in(
    session: &Session,
    endpoint: &Endpoint,
    tag: TagRef<'_>,
) -> Result<std::result::Result<Vec<String>, TagMiss>> {
    let (http, tls, _) = session.parts();
    let mut base = session.sdk_url().clone();
    base.set_path("/rest");
    let Some(rest) = Rest::login(http, tls, base, endpoint).await? else {
        return Ok(Err(TagMiss::NoTagging));
    };
    let objects = match rest.find_tag(tag).await {
        Ok(Ok(id)) => rest.attached(&id).await,
        Ok(Err(miss)) => Ok(Err(miss)),
        Err(e) => Err(e),
    };
    rest.logout().await;
    let morefs = match objects? {
        Ok(m) => m,
        Err(miss) => return Ok(Err(miss)),
    };
    let mut names = vm_names(session, &morefs).await?;
    names.sort();
    names.dedup();
    Ok(Ok(names))
}

/// `{"value": ...}`, the envelope of every `/rest` answer (vcsim writes `null` for an empty list).
#[derive(Deserialize)]
struct Value<T> {
    value: Option<T>,
}

#[derive(Deserialize)]
struct Named {
    id: String,
    name: String,
    #[serde(default)]
    category_id: String,
}

#[derive(Deserialize)]
struct Attached {
    id: String,
    #[serde(rename = "type")]
    kind: String,
}

/// A logged-in REST session.
struct Rest<'a> {
    http: &'a reqwest::Client,
    tls: &'a TlsObserver,
    base: Url,
    token: String,
}

impl<'a> Rest<'a> {
    /// Logs in with HTTP Basic; `None` when the endpoint has no REST API at all.
    async fn login(
        http: &'a reqwest::Client,
        tls: &'a TlsObserver,
        base: Url,
        endpoint: &Endpoint,
    ) -> Result<Option<Rest<'a>>> {
        let url = url_of(&base, &["com", "vmware", "cis", "session"], None);
        let resp = http
            .post(url.clone())
            .basic_auth(&endpoint.username, Some(endpoint.password.expose_secret()))
            // The token in a header only: no cookie to outlive this session.
            .header("vmware-use-header-authn", "true")
            .send()
            .await
            .map_err(|e| Error::from_reqwest(url.as_str(), &e, tls))?;
        match resp.status() {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return Err(Error::BadCredentials {
                    user: endpoint.username.clone(),
                });
            }
            StatusCode::NOT_FOUND => return Ok(None),
            _ => {}
        }
        let token: Option<String> = parse(url.as_str(), resp, tls).await?;
        let token =
            token.ok_or_else(|| Error::Protocol("the REST login answered no session".into()))?;
        Ok(Some(Rest {
            http,
            tls,
            base,
            token,
        }))
    }

    async fn logout(&self) {
        let url = url_of(&self.base, &["com", "vmware", "cis", "session"], None);
        let _ = self
            .http
            .delete(url)
            .header(SESSION_HEADER, &self.token)
            .send()
            .await;
    }

    /// One call; `Ok(None)` when the object addressed does not exist (404).
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        action: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> Result<Option<T>> {
        let url = url_of(&self.base, path, action);
        let mut req = self
            .http
            .request(method, url.clone())
            .header(SESSION_HEADER, &self.token);
        if let Some(body) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Error::from_reqwest(url.as_str(), &e, self.tls))?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        parse(url.as_str(), resp, self.tls).await
    }

    async fn ids(&self, path: &[&str]) -> Result<Vec<String>> {
        Ok(self
            .call::<Vec<String>>(Method::GET, path, None, None)
            .await?
            .unwrap_or_default())
    }

    async fn get(&self, kind: &str, id: &str) -> Result<Option<Named>> {
        let segment = format!("id:{id}");
        self.call(
            Method::GET,
            &["com", "vmware", "cis", "tagging", kind, &segment],
            None,
            None,
        )
        .await
    }

    /// The id of the tag, or why there is none.
    async fn find_tag(&self, tag: TagRef<'_>) -> Result<std::result::Result<String, TagMiss>> {
        let tag_ids = match tag.category {
            Some(category) => {
                let Some(cat) = self.category_named(category).await? else {
                    return Ok(Err(TagMiss::NoCategory {
                        category: category.to_owned(),
                    }));
                };
                let segment = format!("id:{}", cat.id);
                self.call::<Vec<String>>(
                    Method::POST,
                    &["com", "vmware", "cis", "tagging", "tag", &segment],
                    Some("list-tags-for-category"),
                    Some(serde_json::json!({ "category_id": cat.id })),
                )
                .await?
                .unwrap_or_default()
            }
            None => {
                self.ids(&["com", "vmware", "cis", "tagging", "tag"])
                    .await?
            }
        };
        let mut matches = Vec::new();
        for id in &tag_ids {
            // A tag deleted since it was listed is simply not a match.
            if let Some(t) = self.get("tag", id).await?
                && t.name == tag.name
            {
                matches.push(t);
            }
        }
        match matches.len() {
            0 => Ok(Err(TagMiss::NoTag {
                name: tag.name.to_owned(),
                category: tag.category.map(str::to_owned),
            })),
            1 => Ok(Ok(matches.remove(0).id)),
            _ => {
                let mut categories = Vec::new();
                for t in &matches {
                    let name = match self.get("category", &t.category_id).await? {
                        Some(c) => c.name,
                        None => t.category_id.clone(),
                    };
                    categories.push(name);
                }
                categories.sort();
                Ok(Err(TagMiss::Ambiguous {
                    name: tag.name.to_owned(),
                    categories,
                }))
            }
        }
    }

    async fn category_named(&self, name: &str) -> Result<Option<Named>> {
        for id in self
            .ids(&["com", "vmware", "cis", "tagging", "category"])
            .await?
        {
            if let Some(c) = self.get("category", &id).await?
                && c.name == name
            {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// The morefs of the VMs the tag is attached to (other kinds of objects are left out).
    async fn attached(&self, tag_id: &str) -> Result<std::result::Result<Vec<String>, TagMiss>> {
        let segment = format!("id:{tag_id}");
        let objects: Option<Vec<Attached>> = self
            .call(
                Method::POST,
                &[
                    "com",
                    "vmware",
                    "cis",
                    "tagging",
                    "tag-association",
                    &segment,
                ],
                Some("list-attached-objects"),
                // What govmomi sends: vcsim decodes a JSON body here, vCenter ignores it.
                Some(serde_json::Value::Null),
            )
            .await?;
        Ok(Ok(objects
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.kind == MoTypesEnum::VirtualMachine.as_str())
            .map(|o| o.id)
            .collect()))
    }
}

/// `base` + `path` (each segment percent-encoded as a path segment; ids hold `:`), and the
/// vAPI `~action` query, written as vCenter expects it (not form-encoded).
fn url_of(base: &Url, path: &[&str], action: Option<&str>) -> Url {
    let mut url = base.clone();
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty().extend(path);
    }
    url.set_query(action.map(|a| format!("~action={a}")).as_deref());
    url
}

async fn parse<T: DeserializeOwned>(
    url: &str,
    resp: reqwest::Response,
    tls: &TlsObserver,
) -> Result<Option<T>> {
    let status = resp.status();
    if status == StatusCode::UNAUTHORIZED {
        // The session ended under us: worth a retry, as a SOAP NotAuthenticated.
        return Err(Error::Fault {
            name: "NotAuthenticated".into(),
            message: format!("the REST session was refused by {url}"),
        });
    }
    if !status.is_success() {
        return Err(Error::Http {
            status: status.as_u16(),
            url: url.to_owned(),
        });
    }
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| Error::from_reqwest(url, &e, tls))?;
    let v: Value<T> =
        serde_json::from_slice(&bytes).map_err(|e| Error::Protocol(format!("{url}: {e}")))?;
    Ok(v.value)
}

/// The names of the VMs `morefs`, in pages; a VM deleted since it was tagged is left out.
async fn vm_names(session: &Session, morefs: &[String]) -> Result<Vec<String>> {
    let mut names = Vec::with_capacity(morefs.len());
    for chunk in morefs.chunks(NAMES_PER_CALL) {
        match names_of(session, chunk).await {
            Ok(n) => names.extend(n),
            // One of them is gone (the property collector fails the whole call): ask one by one.
            Err(Error::NotFound(_)) => {
                for m in chunk {
                    match names_of(session, std::slice::from_ref(m)).await {
                        Ok(n) => names.extend(n),
                        Err(Error::NotFound(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(names)
}

async fn names_of(session: &Session, morefs: &[String]) -> Result<Vec<String>> {
    let (_, tls, client) = session.parts();
    let url = session.sdk_url().as_str();
    let pc = mo::PropertyCollector::new(
        client.clone(),
        &client.service_content().property_collector.value,
    );
    let spec = PropertyFilterSpec {
        object_set: morefs
            .iter()
            .map(|m| ObjectSpec {
                obj: ManagedObjectReference {
                    r#type: MoTypesEnum::VirtualMachine,
                    value: m.clone(),
                },
                skip: Some(false),
                select_set: None,
            })
            .collect(),
        prop_set: vec![<VmName as vim_rs::core::pc_helpers::Queriable>::prop_spec()],
        report_missing_objects_in_results: None,
    };
    let mut out = Vec::new();
    let mut page = pc
        .retrieve_properties_ex(
            &[spec],
            &RetrieveOptions {
                max_objects: Some(i32::try_from(NAMES_PER_CALL).unwrap_or(i32::MAX)),
            },
        )
        .await
        .map_err(|e| Error::from_vim(url, &e, tls))?;
    while let Some(p) = page {
        for content in p.objects {
            let vm =
                VmName::try_from(content).map_err(|e| Error::Protocol(format!("VM name: {e}")))?;
            out.extend(vm.name);
        }
        page = match p.token {
            Some(token) => pc
                .continue_retrieve_properties_ex(&token)
                .await
                .map(Some)
                .map_err(|e| Error::from_vim(url, &e, tls))?,
            None => None,
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_in_one_path_segment_and_the_action_unencoded() {
        let base = Url::parse("https://vc.example:8443/rest").unwrap_or_else(|e| panic!("{e}"));
        let u = url_of(
            &base,
            &[
                "com",
                "vmware",
                "cis",
                "tagging",
                "tag-association",
                "id:urn:vmomi:InventoryServiceTag:1/2:GLOBAL",
            ],
            Some("list-attached-objects"),
        );
        assert_eq!(
            u.as_str(),
            "https://vc.example:8443/rest/com/vmware/cis/tagging/tag-association/\
             id:urn:vmomi:InventoryServiceTag:1%2F2:GLOBAL?~action=list-attached-objects"
        );
    }

    #[test]
    fn a_miss_names_what_is_missing() {
        let cases = [
            (
                TagMiss::NoCategory {
                    category: "tier".into(),
                },
                "no tag category named \"tier\"",
            ),
            (
                TagMiss::NoTag {
                    name: "gold".into(),
                    category: Some("tier".into()),
                },
                "no tag named \"gold\" in category \"tier\"",
            ),
            (
                TagMiss::NoTag {
                    name: "gold".into(),
                    category: None,
                },
                "no tag named \"gold\" in any category",
            ),
            (
                TagMiss::Ambiguous {
                    name: "gold".into(),
                    categories: vec!["env".into(), "tier".into()],
                },
                "a tag named \"gold\" exists in categories \"env\", \"tier\"; name one in \
                 spec.selector.tag.category",
            ),
        ];
        for (miss, want) in cases {
            assert_eq!(miss.to_string(), want);
        }
    }

    #[test]
    fn an_empty_rest_list_may_be_null() {
        let v: Value<Vec<String>> =
            serde_json::from_str(r#"{"value":null}"#).unwrap_or_else(|e| panic!("{e}"));
        assert!(v.value.is_none());
        let v: Value<Vec<Attached>> =
            serde_json::from_str(r#"{"value":[{"id":"vm-42","type":"VirtualMachine"}]}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        let a = v.value.unwrap_or_default();
        assert_eq!(
            (a[0].id.as_str(), a[0].kind.as_str()),
            ("vm-42", "VirtualMachine")
        );
    }
}
