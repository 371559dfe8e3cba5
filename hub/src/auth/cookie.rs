//! The two cookies of the login: the session (`banhub_session`, `<id>.<secret>`) and the OIDC login
//! in progress (`banhub_login`, the `state`, for `/auth/callback` only). Both `HttpOnly`,
//! `SameSite=Lax` (the provider's redirect back is a top-level navigation, which Lax allows),
//! `Secure` when the hub is reached over HTTPS.

use axum::http::{HeaderMap, HeaderValue, header};

pub const SESSION_COOKIE: &str = "banhub_session";
pub const LOGIN_COOKIE: &str = "banhub_login";
/// The login cookie is sent only to the callback.
pub const LOGIN_COOKIE_PATH: &str = "/auth/callback";

/// The value of the first cookie called `name`.
pub fn read(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"').to_owned())
}

/// A `Set-Cookie` value. `max_age_secs = 0` deletes the cookie.
pub fn set(name: &str, value: &str, path: &str, max_age_secs: u64, secure: bool) -> HeaderValue {
    let mut text =
        format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax");
    if secure {
        text.push_str("; Secure");
    }
    // Names, values (base64url, hex, '.', '_') and paths are ASCII without control characters.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A `Set-Cookie` value that deletes the cookie.
pub fn clear(name: &str, path: &str, secure: bool) -> HeaderValue {
    set(name, "", path, 0, secure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_by_name() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; banhub_session=abc.def"),
        );
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("banhub_login=\"st\""),
        );
        assert_eq!(read(&headers, SESSION_COOKIE).as_deref(), Some("abc.def"));
        assert_eq!(read(&headers, LOGIN_COOKIE).as_deref(), Some("st"));
        assert_eq!(read(&headers, "banhub"), None);
    }

    #[test]
    fn set_cookie_has_the_flags() {
        let value = set(SESSION_COOKIE, "x.y", "/", 60, true);
        assert_eq!(
            value.to_str().expect("ascii"),
            "banhub_session=x.y; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure"
        );
        let cleared = clear(LOGIN_COOKIE, LOGIN_COOKIE_PATH, false);
        assert!(cleared.to_str().expect("ascii").contains("Max-Age=0"));
        assert!(!cleared.to_str().expect("ascii").contains("Secure"));
    }
}
