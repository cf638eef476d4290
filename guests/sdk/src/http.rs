//! A small blocking HTTP client over `wasi:http/outgoing-handler`.
//!
//! The host sends a request only to an origin in the tool manifest's `allowed_hosts`; it
//! refuses any other. That refusal, like every other failure here (a bad URL, a connection
//! error, an answer over the size bound), is an [`Error::Recoverable`] naming the request, so
//! the LLM hears why and the task goes on. A status of 4xx or 5xx is not an error here: the
//! [`Response`] says it.
//!
//! ```ignore
//! let answer = http::Request::get("https://api.example.com/items?limit=5")
//!     .header("accept", "application/json")
//!     .send()?;
//! let items: Vec<Item> = answer.json()?;
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, Method as WasiMethod, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;

/// The largest answer [`Request::send`] reads unless [`Request::max_response`] says otherwise.
pub const DEFAULT_MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// An HTTP method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Method {
    /// The method's name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }

    fn wasi(self) -> WasiMethod {
        match self {
            Method::Get => WasiMethod::Get,
            Method::Head => WasiMethod::Head,
            Method::Post => WasiMethod::Post,
            Method::Put => WasiMethod::Put,
            Method::Patch => WasiMethod::Patch,
            Method::Delete => WasiMethod::Delete,
        }
    }
}

/// A request being built; [`Request::send`] sends it.
#[must_use = "a request does nothing until it is sent"]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    /// The body, or why it could not be serialized.
    body: Result<Vec<u8>, String>,
    max_response: usize,
}

impl Request {
    /// A `method` request to `url` (`http(s)://host[:port][/path][?query]`).
    pub fn new(method: Method, url: &str) -> Request {
        Request {
            method,
            url: url.to_owned(),
            headers: Vec::new(),
            body: Ok(Vec::new()),
            max_response: DEFAULT_MAX_RESPONSE,
        }
    }

    /// A GET request to `url`.
    pub fn get(url: &str) -> Request {
        Request::new(Method::Get, url)
    }

    /// A POST request to `url`.
    pub fn post(url: &str) -> Request {
        Request::new(Method::Post, url)
    }

    /// A PUT request to `url`.
    pub fn put(url: &str) -> Request {
        Request::new(Method::Put, url)
    }

    /// A PATCH request to `url`.
    pub fn patch(url: &str) -> Request {
        Request::new(Method::Patch, url)
    }

    /// A DELETE request to `url`.
    pub fn delete(url: &str) -> Request {
        Request::new(Method::Delete, url)
    }

    /// Adds the header `name: value`.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// Sets the body to `bytes`.
    pub fn body(mut self, bytes: impl Into<Vec<u8>>) -> Request {
        self.body = Ok(bytes.into());
        self
    }

    /// Sets the body to `value` as JSON, with `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Request {
        let mut request = self.header("content-type", "application/json");
        request.body = serde_json::to_vec(value).map_err(|e| format!("the JSON body: {e}"));
        request
    }

    /// Bounds the answer's body to `bytes`: a larger one is an error, not an out-of-memory trap.
    pub fn max_response(mut self, bytes: usize) -> Request {
        self.max_response = bytes;
        self
    }

    /// Sends the request and reads the whole answer.
    pub fn send(self) -> Result<Response, Error> {
        let what = format!("{} {}", self.method.name(), self.url);
        self.exchange()
            .map_err(|reason| Error::recoverable(format!("{what}: {reason}")))
    }

    fn exchange(self) -> Result<Response, String> {
        let url = Url::parse(&self.url)?;
        let body = self.body?;
        let mut fields = self.headers;
        if !body.is_empty() {
            fields.push((
                "content-length".to_owned(),
                body.len().to_string().into_bytes(),
            ));
        }
        let fields = Fields::from_list(&fields).map_err(|e| format!("bad header: {e:?}"))?;
        let request = OutgoingRequest::new(fields);
        let scheme = if url.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        request
            .set_method(&self.method.wasi())
            .map_err(|()| "bad method")?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| "bad scheme")?;
        request
            .set_authority(Some(&url.authority))
            .map_err(|()| "bad host")?;
        request
            .set_path_with_query(Some(&url.path_and_query))
            .map_err(|()| "bad path")?;
        let outgoing = request.body().map_err(|()| "request body already taken")?;

        let pending = outgoing_handler::handle(request, None).map_err(describe)?;
        {
            let stream = outgoing
                .write()
                .map_err(|()| "request body stream already taken")?;
            for chunk in body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| format!("writing the body: {e:?}"))?;
            }
        }
        OutgoingBody::finish(outgoing, None).map_err(describe)?;

        let response = loop {
            match pending.get() {
                Some(answer) => break answer,
                None => pending.subscribe().block(),
            }
        };
        let response = response
            .map_err(|()| "the response was already taken".to_owned())?
            .map_err(describe)?;
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|()| "response body already taken")?;
        let mut out = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| "response body stream already taken")?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => {
                        if out.len() + chunk.len() > self.max_response {
                            return Err(format!(
                                "the answer is larger than {} bytes",
                                self.max_response
                            ));
                        }
                        out.extend_from_slice(&chunk);
                    }
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(format!("reading the answer: {}", e.to_debug_string()));
                    }
                }
            }
        }
        Ok(Response {
            status,
            headers,
            body: out,
        })
    }
}

/// What a wasi:http error means to the tool's author.
fn describe(error: ErrorCode) -> String {
    match error {
        ErrorCode::HttpRequestDenied => "denied by the host".to_owned(),
        other => other.to_string(),
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of the header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON `T`; a body that does not parse is a recoverable error.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::recoverable(format!(
                "the answer ({}) is not the JSON expected: {e}",
                self.status
            ))
        })
    }
}

/// A URL split the way `wasi:http` wants it.
struct Url {
    https: bool,
    authority: String,
    path_and_query: String,
}

impl Url {
    /// Parses `http(s)://host[:port][/path][?query]`; user info is refused, a fragment dropped.
    fn parse(text: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("not an http(s) URL".to_owned());
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() || authority.contains('@') {
            return Err("not a URL of the form http(s)://host[:port][/path]".to_owned());
        }
        let path_and_query = match path.strip_prefix('?') {
            Some(query) => format!("/?{query}"),
            None if path.is_empty() => "/".to_owned(),
            None => path.to_owned(),
        };
        Ok(Url {
            https,
            authority: authority.to_owned(),
            path_and_query,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Url;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        let url = Url::parse("https://api.github.com:8443/repos/a/b?state=open#top").unwrap();
        assert!(url.https);
        assert_eq!(url.authority, "api.github.com:8443");
        assert_eq!(url.path_and_query, "/repos/a/b?state=open");
        let bare = Url::parse("http://127.0.0.1:9").unwrap();
        assert!(!bare.https);
        assert_eq!(bare.path_and_query, "/");
        assert_eq!(Url::parse("http://h?q=1").unwrap().path_and_query, "/?q=1");
    }

    #[test]
    fn urls_that_are_not_http_or_carry_user_info_are_refused() {
        for bad in ["ftp://h/x", "https://", "https://user@h/x", "h/x"] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }
}
