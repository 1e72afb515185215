//! Redaction of URL user info (`user:password@`) from text that reaches a message: status,
//! conditions, Events and logs are read by everyone who may view a migration, and a URL someone
//! wrote with its password in it must not carry that password there.

use std::borrow::Cow;

/// What stands where user info was, so a reader sees that the URL carried some.
pub const REDACTED: &str = "***";

/// `text` with the user info of every `scheme://user:password@host` in it replaced by
/// [`REDACTED`]. Pure.
///
/// # Guarantees
/// * Text without `://` followed by an `@` in the same word is returned unchanged.
/// * A URL's "word" runs to the next whitespace or quote; everything between `://` and the last
///   `@` of that word is replaced, so a password holding `/`, `#` or `?` unescaped is hidden too
///   (at the price of hiding more of a URL whose path holds an `@`).
pub fn userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let word_end = tail.find(is_word_end).unwrap_or(tail.len());
        let word = &tail[..word_end];
        match word.rfind('@') {
            Some(i) => {
                out.push_str(REDACTED);
                out.push_str(&word[i..]);
            }
            None => out.push_str(word),
        }
        rest = &tail[word_end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A value that is meant to be a URL (a spec's endpoint), for a message: its user info
/// redacted, also when it was written without a scheme (`user:pw@host`, which the vSphere URL
/// rule takes as `https://user:pw@host`). Pure.
pub fn endpoint(text: &str) -> Cow<'_, str> {
    if text.contains("://") {
        return userinfo(text);
    }
    let word_end = text.find(is_word_end).unwrap_or(text.len());
    match text[..word_end].rfind('@') {
        Some(i) => Cow::Owned(format!("{REDACTED}{}", &text[i..])),
        None => Cow::Borrowed(text),
    }
}

fn is_word_end(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// Every string in `value` passed through [`userinfo`]. Pure.
pub fn json(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(r) = userinfo(s) {
                *s = r;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(json),
        serde_json::Value::Object(o) => o.values_mut().for_each(json),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "hunter2-secret";

    #[test]
    fn user_info_is_gone_from_every_url_in_a_text() {
        for (text, want) in [
            (
                "https://user:hunter2-secret@vc.example/sdk is unreachable",
                "https://***@vc.example/sdk is unreachable",
            ),
            (
                "a \"http://ak:hunter2-secret@s3:9000\" and https://u@h:1/p",
                "a \"http://***@s3:9000\" and https://***@h:1/p",
            ),
            // Unescaped delimiters in the password: still hidden.
            ("https://u:hun/ter#2?-secret@vc/sdk", "https://***@vc/sdk"),
            (
                "(https://user:hunter2-secret@[::1]:8443)",
                "(https://***@[::1]:8443)",
            ),
        ] {
            let got = userinfo(text);
            assert_eq!(got, want);
            assert!(!got.contains(PW) && !got.contains("user:"));
        }
    }

    #[test]
    fn text_without_user_info_is_unchanged() {
        for text in [
            "",
            "https://vc.example/sdk",
            "mail ops@example.com about https://vc/sdk",
            "no url here: user:pw@host",
        ] {
            assert_eq!(userinfo(text), text);
        }
    }

    #[test]
    fn an_endpoint_without_a_scheme_is_redacted_too() {
        assert_eq!(endpoint("user:hunter2-secret@vc.example"), "***@vc.example");
        assert_eq!(endpoint("https://u:p@vc"), "https://***@vc");
        assert_eq!(endpoint("vc.example:443"), "vc.example:443");
    }

    #[test]
    fn every_string_of_a_json_value_is_redacted() {
        let mut v = serde_json::json!({"message": "at https://u:hunter2-secret@vc",
            "conditions": [{"message": "http://a:hunter2-secret@s3"}], "n": 3});
        json(&mut v);
        let text = v.to_string();
        assert!(!text.contains(PW), "{text}");
        assert_eq!(v["n"], 3);
    }

    proptest::proptest! {
        #[test]
        fn no_password_survives(
            pre in "[ -~]{0,20}",
            user in "[a-z]{1,8}",
            pw in "[!-~&&[^\"'`<>@]]{6,16}",
            host in "[a-z]{1,8}(:[0-9]{1,4})?",
            post in "( [ -~]{0,20})?",
        ) {
            let text = format!("{pre}https://{user}:{pw}@{host}{post}");
            let got = userinfo(&text);
            let found = got.contains(&format!("{user}:{pw}"));
            proptest::prop_assert!(!found, "{}", got);
        }
    }
}
