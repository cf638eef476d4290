//! URLs made from templates and values. A value is percent-encoded for the part of the URL it
//! lands in, so that what the LLM, a remote session or a feed supplies cannot change the URL's
//! shape: name another host, add a query, or leave the path the template gives (`..`, which
//! would walk around a bound parameter placed before it).
//!
//! - A hole that starts the template is the URL's beginning (`{settings.base_url}/…`), and a
//!   hole that reads nothing but `settings` is the operator's (a host, a password in the user
//!   info): both are inserted as they are.
//! - In the authority and in a path segment every byte but RFC 3986's unreserved characters is
//!   encoded; a hole that ends the path (nothing but a query or fragment after it) may span
//!   segments: its `/` are kept, each segment encoded.
//! - In the query and the fragment every byte but the unreserved characters is encoded.
//! - A URL whose path has a `.` or `..` segment (in any spelling URL parsers accept) is refused.

use agentmesh_expr::{Activation, Expression, Rendered, Template};

/// `template` rendered with each value encoded for where it lands (see the module's docs).
pub(crate) fn render(template: &Template, act: &Activation) -> Result<String, String> {
    let pieces = template.render_pieces(act).map_err(|e| e.to_string())?;
    let mut url = String::new();
    for (i, piece) in pieces.iter().enumerate() {
        match piece {
            Rendered::Text(text) => url.push_str(text),
            Rendered::Value(value, hole) if i == 0 || operators(hole) => url.push_str(value),
            Rendered::Value(value, _) => match part_at_end(&url) {
                Part::Authority | Part::Query => url.push_str(&encode(value)),
                Part::Path => {
                    let ends_path = match pieces.get(i + 1) {
                        None => true,
                        Some(Rendered::Text(next)) => next.starts_with(['?', '#']),
                        Some(Rendered::Value(..)) => false,
                    };
                    if ends_path {
                        let segments: Vec<String> = value.split('/').map(encode).collect();
                        url.push_str(&segments.join("/"));
                    } else {
                        url.push_str(&encode(value));
                    }
                }
            },
        }
    }
    no_dot_segments(&url)?;
    Ok(url)
}

/// Whether a hole's value is the operator's: it reads nothing but `settings` (a base URL, a
/// host, a password in the user info), so it is inserted as it is.
fn operators(hole: &Expression) -> bool {
    hole.roots().iter().all(|root| root.name == "settings")
}

/// The part of a URL that text appended to `url` would be in.
enum Part {
    Authority,
    Path,
    /// The query or the fragment.
    Query,
}

fn part_at_end(url: &str) -> Part {
    if url.contains(['?', '#']) {
        return Part::Query;
    }
    match url.split_once("://") {
        Some((_, rest)) if !rest.contains(['/', '\\']) => Part::Authority,
        _ => Part::Path,
    }
}

/// `text` percent-encoded but for RFC 3986's unreserved characters: as one path segment it
/// cannot add segments or a query; as a query value it cannot add parameters.
pub(crate) fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, NOT_UNRESERVED).to_string()
}

/// Every byte but RFC 3986's unreserved ones (ASCII letters, digits and `-._~`).
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Refuses a URL whose path has a `.` or `..` segment, which URL parsers remove together with
/// the segment before it (`%2e` counts as a dot, `\` as a slash, as they read them).
pub(crate) fn no_dot_segments(url: &str) -> Result<(), String> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let path = match path.split_once("://") {
        Some((_, rest)) => rest.find(['/', '\\']).map_or("", |at| &rest[at..]),
        None => path,
    };
    let dots = path.split(['/', '\\']).any(|segment| {
        let segment = segment.to_ascii_lowercase().replace("%2e", ".");
        segment == "." || segment == ".."
    });
    if dots {
        return Err(format!(
            "`{url}`: a `.` or `..` path segment is not allowed (it would leave the path the \
             template gives)"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn url(template: &str, parameters: serde_json::Value) -> Result<String, String> {
        let mut act = Activation::new();
        act.set("parameters", parameters);
        act.set("settings", json!({"base": "https://api.example/v1"}));
        render(&Template::parse(template).unwrap(), &act)
    }

    #[test]
    fn values_cannot_leave_the_path_the_template_gives() {
        let t = "{settings.base}/repos/{parameters.owner}/{parameters.repo}/contents/{parameters.path}?ref=main";
        let p = |path: &str| json!({"owner": "o", "repo": "r", "path": path});
        assert_eq!(
            url(t, p("src/lib.rs")).unwrap(),
            "https://api.example/v1/repos/o/r/contents/src/lib.rs?ref=main"
        );
        for climbing in [
            "../../../victim/private/contents/x",
            "a/..",
            "%2e%2E/x",
            ".%2e",
            "..\\x",
            "./x",
        ] {
            // Refused, or kept below the bound repository's contents.
            let made = url(t, p(climbing));
            let kept = made.as_ref().is_ok_and(|u| {
                reqwest::Url::parse(u)
                    .unwrap()
                    .path()
                    .starts_with("/v1/repos/o/r/contents/")
            });
            let refused = made.as_ref().is_err_and(|e| e.contains("path segment"));
            assert!(kept || refused, "{climbing}: {made:?}");
        }
        assert!(url(t, p("..")).is_err());
        // A value before the end of the path is one segment.
        assert_eq!(
            url(
                t,
                json!({"owner": "victim/private/contents", "repo": "r", "path": "x"})
            )
            .unwrap(),
            "https://api.example/v1/repos/victim%2Fprivate%2Fcontents/r/contents/x?ref=main"
        );
    }

    #[test]
    fn values_cannot_add_to_the_query_or_cut_the_url_short() {
        let t = "{settings.base}/search?q={parameters.q}&limit=5";
        assert_eq!(
            url(t, json!({"q": "a b&limit=1000#x"})).unwrap(),
            "https://api.example/v1/search?q=a%20b%26limit%3D1000%23x&limit=5"
        );
        assert_eq!(
            url(
                "{settings.base}/items/{parameters.id}?full=1",
                json!({"id": "7?admin=1#"})
            )
            .unwrap(),
            "https://api.example/v1/items/7%3Fadmin%3D1%23?full=1"
        );
    }

    #[test]
    fn a_value_in_the_host_cannot_name_another_host() {
        let made = url(
            "https://{parameters.region}.api.example/x",
            json!({"region": "evil.example/"}),
        )
        .unwrap();
        assert_eq!(made, "https://evil.example%2F.api.example/x");
        assert!(reqwest::Url::parse(&made).is_err());
        assert_eq!(
            url(
                "https://{parameters.region}.api.example/x",
                json!({"region": "eu"})
            )
            .unwrap(),
            "https://eu.api.example/x"
        );
    }

    #[test]
    fn a_value_that_starts_the_template_or_reads_only_settings_is_as_it_is() {
        assert_eq!(
            url("{settings.base}/x", json!({})).unwrap(),
            "https://api.example/v1/x"
        );
        let mut act = Activation::new();
        act.set(
            "settings",
            json!({"pw": "p@ss:w", "host": "127.0.0.1:8080"}),
        );
        act.set("parameters", json!({"host": "127.0.0.1:8080"}));
        let made = |t: &str| render(&Template::parse(t).unwrap(), &act);
        assert_eq!(
            made("http://ops:{settings.pw}@{settings.host}/x").unwrap(),
            "http://ops:p@ss:w@127.0.0.1:8080/x"
        );
        assert_eq!(
            made("http://{parameters.host}/x").unwrap(),
            "http://127.0.0.1%3A8080/x"
        );
    }
}
