//! Outgoing HTTP for tool components: `wasi:http/outgoing-handler`, filtered by the host.
//!
//! A request is sent only when all of these hold:
//! 1. its origin — scheme, host and port, the port defaulted from the scheme — equals one of the
//!    sandbox's `allowed_hosts` exactly ([`Origin`]);
//! 2. every address the host resolves for that host passes `check_addresses`: a public
//!    address, or a special one (loopback, private, link-local, ...) only when the operator named
//!    it — the origin's host is that IP literal, the origin is `localhost` and the address is
//!    loopback, or the address and port are those of another allowed origin's IP literal (the
//!    operator vouched for that service, not for every port of its address);
//! 3. the connection goes to exactly the checked address.
//!
//! Why 2 and 3 (DNS rebinding): an attacker who controls the DNS of an allowed name (or poisons
//! a resolver) can answer `127.0.0.1`, `169.254.169.254` (cloud metadata) or an intranet
//! address, turning the tool into a proxy into the host's network. So the host resolves once,
//! checks *every* answer (a name answering one public and one private address is refused, since
//! a connector might pick either), and connects to the checked address itself — it never hands
//! the name to a connector that would resolve again (a second lookup could answer differently:
//! the time-of-check/time-of-use gap rebinding relies on). Each request resolves afresh, so a
//! later rebinding is checked too. Redirects are not followed (the guest must issue a new
//! request, which is checked again), IPv4-mapped and NAT64 IPv6 addresses are judged by the
//! IPv4 address they carry, and the `Host` header is always the checked authority (guests
//! cannot set it). TLS verifies the certificate against the name, not the address.
//!
//! Refusals are logged and recorded for the call, so the tool error the LLM sees says what was
//! refused and why.
//!
//! An instance has at most [`MAX_CONNECTIONS`] connections open at once (from the request
//! until its connection ends, or its response is dropped); a request beyond them is refused
//! with `connection-limit-reached`, so that a guest holding requests open cannot take the
//! host's file descriptors.
//!
//! A request's body is written in chunks of at most a resource's share of the memory limit
//! (`state::resource_bytes`), and at most two of them wait in the host to be sent: bodies held
//! open without end cannot make the host hold more than the instance's memory limit.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::BodyExt;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// How long connecting (TCP and TLS) may take when the guest sets no timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first byte of the answer may take when the guest sets no timeout.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);
/// The most outgoing connections one instance may have open at once. Each is a socket (a file
/// descriptor of the host's) and connection buffers; without a bound of its own, a guest could
/// hold one for each of the many requests its resource table allows.
pub const MAX_CONNECTIONS: usize = 16;

/// A URL scheme outgoing HTTP may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `http`.
    Http,
    /// `https` (TLS, certificates verified against the web PKI roots).
    Https,
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of an origin.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// An IP literal: the only address this origin reaches.
    Ip(IpAddr),
    /// A DNS name, lowercase, without a trailing dot.
    Name(String),
}

impl Host {
    /// `localhost` and names under `.localhost` (RFC 6761: they resolve to loopback).
    fn is_localhost(&self) -> bool {
        matches!(self, Host::Name(n) if n == "localhost" || n.ends_with(".localhost"))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// An origin a component may call: `scheme://host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The scheme.
    pub scheme: Scheme,
    /// The host.
    pub host: Host,
    /// The port (the scheme's default when the text had none).
    pub port: u16,
}

/// Text that is not an origin; the message says which part is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OriginError(String);

impl Origin {
    /// Parses `http(s)://host[:port]` (a trailing `/` is accepted; a path, query, user info or
    /// wildcard is not: an origin is all-or-nothing).
    pub fn parse(text: &str) -> Result<Origin, OriginError> {
        let bad = |why: &str| {
            OriginError(format!(
                "`{text}` is not an origin (scheme://host[:port]): {why}"
            ))
        };
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err(bad("the scheme must be http or https"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@', '*']) {
            return Err(bad("only scheme, host and port are allowed"));
        }
        let (host, port) = split_authority(rest).ok_or_else(|| bad("bad host or port"))?;
        Ok(Origin {
            scheme,
            host,
            port: port.unwrap_or(scheme.default_port()),
        })
    }

    /// The origin of a request URI, if it has a scheme this host supports and a host.
    fn of_uri(uri: &http::Uri) -> Option<Origin> {
        let scheme = match uri.scheme_str()? {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return None,
        };
        let (host, port) = split_authority(uri.authority()?.as_str())?;
        Some(Origin {
            scheme,
            host,
            port: port.unwrap_or(scheme.default_port()),
        })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// Splits `host[:port]` (`[v6]:port` for IPv6) and normalizes the host.
fn split_authority(text: &str) -> Option<(Host, Option<u16>)> {
    if text.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = v6.parse().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        };
        let host = match name.parse::<Ipv4Addr>() {
            Ok(ip) => Host::Ip(IpAddr::V4(ip)),
            Err(_) => {
                let valid = !name.is_empty()
                    && name.len() <= 253
                    && name.split('.').all(|label| {
                        !label.is_empty()
                            && label
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    });
                if !valid {
                    return None;
                }
                Host::Name(name.to_ascii_lowercase())
            }
        };
        (host, port)
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => None,
    };
    Some((host, port))
}

/// Why an address is special (not reachable on the public internet), or `None` if it is public.
pub(crate) fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return special_v4(v4);
            }
            let s = v6.segments();
            // 64:ff9b::/96 (NAT64) carries an IPv4 address in its last 32 bits.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return special_v4(Ipv4Addr::new(a, b, c, d));
            }
            if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.is_loopback() {
                Some("loopback")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("unique-local (private)")
            } else if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
                Some("link-local")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 {
                Some("documentation")
            } else if s[..4] == [0x100, 0, 0, 0] {
                Some("discard-only")
            } else if s[..6] == [0, 0, 0, 0, 0, 0] {
                // ::/96, IPv4-compatible (deprecated): never a public destination.
                Some("IPv4-compatible")
            } else {
                None
            }
        }
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified (\"this network\")")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if a == 192 && b == 0 && c == 0 {
        Some("IETF protocol assignment")
    } else if ip.is_documentation() {
        Some("documentation")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("benchmarking")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() || a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

/// Checks every address `origin`'s host resolved to (see the module docs): `Ok` when all may be
/// connected to, else the reason for the first that may not. `allowed` are the sandbox's
/// allowed origins: those whose host is an IP literal vouch for that address on their port.
pub(crate) fn check_addresses(
    origin: &Origin,
    addrs: &[IpAddr],
    allowed: &[Origin],
) -> Result<(), String> {
    if addrs.is_empty() {
        return Err(format!("{} resolved to no address", origin.host));
    }
    for &addr in addrs {
        let Some(range) = special_range(addr) else {
            continue;
        };
        let named = match &origin.host {
            Host::Ip(ip) => *ip == addr,
            host => {
                (host.is_localhost() && addr.is_loopback())
                    || allowed
                        .iter()
                        .any(|o| o.host == Host::Ip(addr) && o.port == origin.port)
            }
        };
        if !named {
            return Err(format!(
                "{} resolved to {addr}, a {range} address; such addresses are reached only when allowed_hosts names them",
                origin.host
            ));
        }
    }
    Ok(())
}

/// The outgoing-HTTP policy of one store: the `wasi:http` hooks.
pub(crate) struct OutgoingPolicy {
    /// The allowed origins.
    origins: Arc<[Origin]>,
    /// TLS client configuration (web PKI roots), shared by the host.
    tls: Arc<rustls::ClientConfig>,
    /// The component's name, for logs.
    component: Arc<str>,
    /// Refusals of the current call, for the error the LLM sees.
    denials: Arc<Mutex<Vec<String>>>,
    /// The most bytes one write to an outgoing body may carry.
    body_chunk: usize,
    /// How many of the instance's connections are open (see [`MAX_CONNECTIONS`]).
    open: Arc<AtomicUsize>,
}

/// One of an instance's open connections, counted until dropped.
struct Open(Arc<AtomicUsize>);

impl Open {
    /// One more connection of `open`'s, unless [`MAX_CONNECTIONS`] are open already.
    fn take(open: &Arc<AtomicUsize>) -> Option<Open> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_CONNECTIONS).then_some(n + 1)
        })
        .ok()
        .map(|_| Open(Arc::clone(open)))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl OutgoingPolicy {
    /// A policy allowing `origins`, whose outgoing bodies are written in chunks of at most
    /// `body_chunk` bytes.
    pub(crate) fn new(
        origins: &[Origin],
        tls: Arc<rustls::ClientConfig>,
        component: Arc<str>,
        denials: Arc<Mutex<Vec<String>>>,
        body_chunk: usize,
    ) -> Self {
        OutgoingPolicy {
            origins: origins.into(),
            tls,
            component,
            denials,
            body_chunk,
            open: Arc::default(),
        }
    }
}

/// Records and logs a refusal.
fn refuse(component: &str, denials: &Mutex<Vec<String>>, message: String) {
    tracing::warn!(
        component.name = component,
        "outgoing HTTP refused: {message}"
    );
    let mut denials = denials.lock().unwrap_or_else(PoisonError::into_inner);
    // A guest retrying in a loop must not grow this without bound.
    if denials.len() < 16 {
        denials.push(message);
    }
}

/// The future `send_request` returns.
type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for OutgoingPolicy {
    /// One chunk written but not yet sent, besides the one being sent: an outgoing body, its
    /// stream and its request (three resources) hold at most two chunks.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    /// wasi:http's default is 1 MiB, whatever the instance's memory limit.
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        self.body_chunk
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        let component = self.component.clone();
        let denials = self.denials.clone();
        let origin = Origin::of_uri(request.uri());
        let Some(origin) = origin.filter(|o| self.origins.contains(o)) else {
            let allowed = if self.origins.is_empty() {
                "none".to_owned()
            } else {
                let list: Vec<String> = self.origins.iter().map(Origin::to_string).collect();
                list.join(", ")
            };
            let why = match Origin::of_uri(request.uri()) {
                Some(o) => format!("its origin {o} is not in allowed_hosts ({allowed})"),
                None => "it has no http(s) origin".to_owned(),
            };
            let shown = request.uri().to_string();
            refuse(
                &component,
                &denials,
                format!("request to {shown} refused: {why}"),
            );
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        };
        let Some(open) = Open::take(&self.open) else {
            refuse(
                &component,
                &denials,
                format!(
                    "request to {origin} refused: {MAX_CONNECTIONS} connections are open \
                     already, the most one instance may hold"
                ),
            );
            return Box::new(async { Err(HttpError::ConnectionLimitReached) });
        };
        let allowed = self.origins.clone();
        let tls = self.tls.clone();
        Box::new(async move {
            let addrs = resolve(&origin).await.inspect_err(|e| {
                refuse(
                    &component,
                    &denials,
                    format!("request to {origin} refused: {e}"),
                );
            });
            let addrs = addrs.map_err(|e| HttpError::DnsError {
                rcode: Some(e),
                info_code: None,
            })?;
            if let Err(why) = check_addresses(&origin, &addrs, &allowed) {
                refuse(
                    &component,
                    &denials,
                    format!("request to {origin} refused: {why}"),
                );
                return Err(HttpError::DestinationIpProhibited);
            }
            tracing::debug!(component.name = &*component, %origin, "outgoing HTTP request");
            let (response, io) = send(request, &origin, &addrs, &tls, options).await?;
            // The connection counts until it ends (or the guest drops the response).
            let io: Box<dyn Future<Output = Result<(), HttpError>> + Send> = Box::new(async move {
                let _open = open;
                Box::into_pin(io).await
            });
            Ok((response, io))
        })
    }
}

/// The addresses of `origin`'s host, looked up once.
async fn resolve(origin: &Origin) -> Result<Vec<IpAddr>, String> {
    match &origin.host {
        Host::Ip(ip) => Ok(vec![*ip]),
        Host::Name(name) => {
            let found = tokio::net::lookup_host((name.as_str(), origin.port))
                .await
                .map_err(|e| format!("cannot resolve {name}: {e}"))?;
            Ok(found.map(|a| a.ip()).collect())
        }
    }
}

/// Sends `request` over a connection to one of `addrs` (already checked).
async fn send(
    mut request: http::Request<WasiBody>,
    origin: &Origin,
    addrs: &[IpAddr],
    tls: &Arc<rustls::ClientConfig>,
    options: Option<RequestOptions>,
) -> Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
> {
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(CONNECT_TIMEOUT);
    let first_byte_timeout = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(FIRST_BYTE_TIMEOUT);

    let mut last_error = None;
    let mut stream = None;
    for &ip in addrs {
        match tokio::time::timeout(
            connect_timeout,
            TcpStream::connect(SocketAddr::new(ip, origin.port)),
        )
        .await
        {
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(e)) => last_error = Some(HttpError::Connect(e)),
            Err(_) => last_error = Some(HttpError::ConnectionTimeout),
        }
    }
    let stream = match stream {
        Some(s) => s,
        None => return Err(last_error.unwrap_or(HttpError::DestinationUnavailable)),
    };

    // The request line carries only the path: the authority went into the `Host` header.
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(|| http::uri::PathAndQuery::from_static("/"), Clone::clone);
    *request.uri_mut() = http::Uri::from(path);

    let (mut sender, io) = match origin.scheme {
        Scheme::Http => handshake(stream, connect_timeout).await?,
        Scheme::Https => {
            let name = match &origin.host {
                Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
                Host::Name(n) => {
                    ServerName::try_from(n.clone()).map_err(|_| HttpError::HttpRequestUriInvalid)?
                }
            };
            let connector = tokio_rustls::TlsConnector::from(tls.clone());
            let stream = tokio::time::timeout(connect_timeout, connector.connect(name, stream))
                .await
                .map_err(|_| HttpError::ConnectionTimeout)?
                .map_err(HttpError::Tls)?;
            handshake(stream, connect_timeout).await?
        }
    };
    let response = tokio::time::timeout(first_byte_timeout, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)?
        .map_err(HttpError::from)?;
    let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
    Ok((response, io))
}

/// The HTTP/1 handshake; the connection is driven by a task that ends with the response
/// (dropping the returned future aborts it).
async fn handshake<S>(
    stream: S,
    timeout: Duration,
) -> Result<
    (
        hyper::client::conn::http1::SendRequest<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = tokio::time::timeout(
        timeout,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)??;
    let driver = wasmtime_wasi::runtime::spawn(async move { conn.await.map_err(HttpError::from) });
    Ok((sender, Box::new(driver)))
}

/// The TLS configuration outgoing HTTPS uses: the web PKI roots, ring, TLS 1.2 and 1.3.
pub(crate) fn tls_config() -> Result<rustls::ClientConfig, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn origins_default_the_port_and_normalize_the_host() {
        let o = Origin::parse("https://API.github.com").unwrap();
        assert_eq!(o.to_string(), "https://api.github.com:443");
        assert_eq!(
            Origin::parse("http://127.0.0.1:8080/").unwrap().to_string(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            Origin::parse("http://[::1]:81").unwrap().to_string(),
            "http://[::1]:81"
        );
    }

    #[test]
    fn origins_refuse_paths_wildcards_and_user_info() {
        for bad in [
            "api.github.com",
            "ftp://x.example",
            "https://x.example/api",
            "https://*.example",
            "https://user@x.example",
            "https://x.example:0",
            "https://x.example:99999",
            "https://",
            "https://x..example",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn a_request_matches_only_its_exact_origin() {
        let allowed = Origin::parse("https://api.github.com").unwrap();
        let of = |u: &str| Origin::of_uri(&u.parse::<http::Uri>().unwrap());
        assert_eq!(of("https://api.github.com/repos"), Some(allowed.clone()));
        assert_eq!(of("https://api.github.com:443/x"), Some(allowed.clone()));
        assert_ne!(of("http://api.github.com/repos"), Some(allowed.clone()));
        assert_ne!(
            of("https://api.github.com:8443/repos"),
            Some(allowed.clone())
        );
        assert_ne!(of("https://api.github.com.evil.example/"), Some(allowed));
    }

    #[test]
    fn special_ranges_are_recognized() {
        for special in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(special_range(ip(special)).is_some(), "{special} is special");
        }
        for public in ["140.82.112.6", "8.8.8.8", "2606:4700::1111"] {
            assert_eq!(special_range(ip(public)), None, "{public} is public");
        }
    }

    #[test]
    fn a_name_that_rebinds_to_a_private_address_is_refused() {
        let github = Origin::parse("https://api.github.com").unwrap();
        assert!(check_addresses(&github, &[ip("140.82.112.6")], &[]).is_ok());
        let err = check_addresses(&github, &[ip("127.0.0.1")], &[]).unwrap_err();
        assert!(err.contains("loopback"), "{err}");
        // One bad answer among good ones is enough to refuse.
        let err = check_addresses(&github, &[ip("140.82.112.6"), ip("169.254.169.254")], &[])
            .unwrap_err();
        assert!(err.contains("link-local"), "{err}");
        assert!(check_addresses(&github, &[], &[]).is_err());
    }

    #[test]
    fn addresses_the_operator_named_are_allowed() {
        let literal = Origin::parse("http://127.0.0.1:8080").unwrap();
        assert!(check_addresses(&literal, &[ip("127.0.0.1")], &[]).is_ok());
        let localhost = Origin::parse("http://localhost:8080").unwrap();
        assert!(check_addresses(&localhost, &[ip("127.0.0.1"), ip("::1")], &[]).is_ok());
        assert!(check_addresses(&localhost, &[ip("10.0.0.1")], &[]).is_err());
        let internal = Origin::parse("https://ghe.corp.example").unwrap();
        assert!(check_addresses(&internal, &[ip("10.0.0.5")], &[]).is_err());
        let vouching = Origin::parse("https://10.0.0.5").unwrap();
        assert!(check_addresses(&internal, &[ip("10.0.0.5")], &[vouching]).is_ok());
    }

    #[test]
    fn an_address_is_vouched_for_on_its_port_only() {
        // The operator allowed one service of an intranet address: a name answering that
        // address must not reach its other ports through it.
        let service = Origin::parse("http://10.0.0.5:8080").unwrap();
        let internal = Origin::parse("https://ghe.corp.example").unwrap();
        let err = check_addresses(&internal, &[ip("10.0.0.5")], std::slice::from_ref(&service))
            .unwrap_err();
        assert!(err.contains("private"), "{err}");
        let same_port = Origin::parse("http://ghe.corp.example:8080").unwrap();
        assert!(check_addresses(&same_port, &[ip("10.0.0.5")], &[service]).is_ok());
    }
}
