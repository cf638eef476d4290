//! Browser sessions of the inspector: a token is typed once on the login page and traded for a
//! random session id, kept in an `HttpOnly`, `SameSite=Strict` cookie scoped to `/ui/` (never
//! in a URL, never readable by a script). Each session has its own CSRF token, which every
//! form that changes something carries in a hidden field and [`Sessions::check_csrf`]
//! compares in constant time.
//!
//! The session keeps the token itself, not who it named: every request checks it against the
//! tokens in force, so a token removed or rotated by a reload ends its sessions at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

/// The cookie that carries the session id.
pub const COOKIE: &str = "agentmesh_ui";

/// A session unused this long is forgotten (the user logs in again).
const IDLE: Duration = Duration::from_secs(12 * 3600);

/// Sessions kept at once. Logging in needs a valid token, so only holders of one can add
/// sessions; the bound keeps a script that logs in in a loop from growing the map without
/// end: past it, the least recently used session goes.
const MAX_SESSIONS: usize = 10_000;

/// A session: the token it was opened with and its CSRF token.
#[derive(Clone)]
pub struct Session {
    /// The API token typed on the login page.
    pub token: String,
    /// The value every state-changing form must carry.
    pub csrf: String,
    last_used: Instant,
}

/// The open sessions, by id.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes in hex; `None` if the system has no randomness to give.
fn random_id() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Sessions {
    /// Opens a session for `token`: its id, or `None` when no random id could be made.
    pub fn open(&self, token: &str) -> Option<String> {
        let id = random_id()?;
        let session = Session {
            token: token.to_owned(),
            csrf: random_id()?,
            last_used: Instant::now(),
        };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        map.retain(|_, s| now.duration_since(s.last_used) < IDLE);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(id.clone(), session);
        Some(id)
    }

    /// Session `id`, if open and not idle too long (its use is noted).
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let session = map.get_mut(id)?;
        let now = Instant::now();
        if now.duration_since(session.last_used) >= IDLE {
            map.remove(id);
            return None;
        }
        session.last_used = now;
        Some(session.clone())
    }

    /// Ends session `id`.
    pub fn close(&self, id: &str) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// Whether `presented` is `session`'s CSRF token (compared in constant time).
    pub fn check_csrf(session: &Session, presented: &str) -> bool {
        !presented.is_empty() && bool::from(session.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// The session id in a `Cookie` header, if any.
pub fn id_in_cookies(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value that keeps session `id` in the browser: sent only to `/ui/`, never
/// to a script, never with a request another site starts.
pub fn cookie_for(id: &str) -> String {
    format!("{COOKIE}={id}; Path=/ui/; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn cookie_cleared() -> String {
    format!("{COOKIE}=; Path=/ui/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_cookie_and_checks_its_csrf_token() {
        let sessions = Sessions::default();
        let id = sessions.open("secret").unwrap();
        let header = format!("other=1; {COOKIE}={id}; x=y");
        let found = sessions.get(id_in_cookies(&header).unwrap()).unwrap();
        assert_eq!(found.token, "secret");
        assert!(Sessions::check_csrf(&found, &found.csrf.clone()));
        assert!(!Sessions::check_csrf(&found, "forged"));
        assert!(!Sessions::check_csrf(&found, ""));
        sessions.close(&id);
        assert!(sessions.get(&id).is_none());
    }

    #[test]
    fn session_ids_are_random_and_distinct() {
        let sessions = Sessions::default();
        let a = sessions.open("t").unwrap();
        let b = sessions.open("t").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}
