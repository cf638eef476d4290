//! A small blocking HTTP client over `wasi:http/outgoing-handler`.

use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    Fields, Method as WasiMethod, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;

/// Largest response body read; a bigger answer is an error, not an out-of-memory trap.
const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// The HTTP methods this tool uses.
#[derive(Clone, Copy)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
}

impl Method {
    /// The method's name, for logs.
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// A base URL: `scheme://authority[/path-prefix]`.
pub struct Url {
    https: bool,
    authority: String,
    prefix: String,
}

impl Url {
    /// Parses `http(s)://host[:port][/prefix]`; a query or fragment is refused.
    pub fn parse(text: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!("`{text}` is not an http(s) URL"));
        };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.is_empty() || prefix.contains(['?', '#']) || authority.contains('@') {
            return Err(format!(
                "`{text}` is not a base URL (scheme://host[:port][/path])"
            ));
        }
        Ok(Url {
            https,
            authority: authority.to_owned(),
            prefix: prefix.trim_end_matches('/').to_owned(),
        })
    }
}

/// A response: its status and body.
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The body, at most [`MAX_RESPONSE`] bytes.
    pub body: Vec<u8>,
}

/// Sends `method {base}{path}` with `headers` and `body`, and reads the whole answer.
pub fn send(
    method: Method,
    base: &Url,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&[u8]>,
) -> Result<Response, String> {
    let mut fields: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect();
    if let Some(body) = body {
        fields.push((
            "content-length".to_owned(),
            body.len().to_string().into_bytes(),
        ));
    }
    let fields = Fields::from_list(&fields).map_err(|e| format!("bad header: {e:?}"))?;
    let request = OutgoingRequest::new(fields);
    let method = match method {
        Method::Get => WasiMethod::Get,
        Method::Post => WasiMethod::Post,
    };
    let scheme = if base.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let path = format!("{}{path}", base.prefix);
    request.set_method(&method).map_err(|()| "bad method")?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| "bad scheme")?;
    request
        .set_authority(Some(&base.authority))
        .map_err(|()| "bad authority")?;
    request
        .set_path_with_query(Some(&path))
        .map_err(|()| "bad path")?;
    let outgoing = request.body().map_err(|()| "request body already taken")?;

    let pending = outgoing_handler::handle(request, None).map_err(|e| e.to_string())?;
    {
        let stream = outgoing
            .write()
            .map_err(|()| "request body stream already taken")?;
        for chunk in body.unwrap_or_default().chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("writing the body: {e:?}"))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| e.to_string())?;

    let response = loop {
        match pending.get() {
            Some(answer) => break answer,
            None => pending.subscribe().block(),
        }
    };
    let response = response
        .map_err(|()| "the response was already taken".to_owned())?
        .map_err(|e| e.to_string())?;
    let status = response.status();
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
                    if out.len() + chunk.len() > MAX_RESPONSE {
                        return Err(format!("the response is larger than {MAX_RESPONSE} bytes"));
                    }
                    out.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(format!("reading the response: {}", e.to_debug_string()));
                }
            }
        }
    }
    Ok(Response { status, body: out })
}
