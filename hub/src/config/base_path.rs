//! `BasePath`: the URL prefix the whole HTTP surface lives under (`http.base_path`, e.g. `/banhub`
//! behind a reverse proxy). `serve::mount` serves the router under it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A URL path prefix: empty (the root), or `/segment[/segment…]` with no trailing slash. Segments use
/// only unreserved URL characters, so the prefix can be pasted into a `Location` or a cookie `Path`
/// as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BasePath(String);

/// Why a base path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0}; a base path is empty (the root) or like /banhub or /tools/banhub: segments of letters, \
     digits, '-', '_', '.' and '~', no trailing slash"
)]
pub struct BasePathError(&'static str);

impl BasePath {
    /// The root: no prefix.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// Parses a prefix. `""` and `"/"` are the root; one trailing slash is dropped (`/banhub/` is
    /// `/banhub`), since operators write it both ways.
    pub fn parse(text: &str) -> Result<Self, BasePathError> {
        let text = text.trim();
        if text.is_empty() || text == "/" {
            return Ok(Self::root());
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(BasePathError("the base path must start with '/'"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.len() > 200 {
            return Err(BasePathError("the base path is longer than 200 characters"));
        }
        for segment in rest.split('/') {
            if segment.is_empty() {
                return Err(BasePathError("the base path has an empty segment ('//')"));
            }
            if segment == "." || segment == ".." {
                return Err(BasePathError("the base path has a '.' or '..' segment"));
            }
            let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
            if !segment.chars().all(allowed) {
                return Err(BasePathError(
                    "the base path has a character that is not allowed",
                ));
            }
        }
        Ok(Self(format!("/{rest}")))
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The prefix, `""` for the root.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `path` (which starts with `/`) under the prefix: `/api/x` → `/banhub/api/x`.
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }

    /// The prefix with a trailing slash (`/` for the root): the UI's home and `<base href>`.
    pub fn home(&self) -> String {
        self.join("/")
    }
}

impl fmt::Display for BasePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_root() { "/" } else { &self.0 })
    }
}

impl TryFrom<String> for BasePath {
    type Error = BasePathError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<BasePath> for String {
    fn from(path: BasePath) -> Self {
        path.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<&str, ()>) {
        let parsed = BasePath::parse(input);
        match expected {
            Ok(prefix) => assert_eq!(parsed.expect(input).as_str(), prefix, "{input:?}"),
            Err(()) => assert!(parsed.is_err(), "{input:?} was accepted"),
        }
    }

    #[test]
    fn parse_accepts_prefixes_and_refuses_the_rest() {
        check("", Ok(""));
        check("/", Ok(""));
        check("/banhub", Ok("/banhub"));
        check("/banhub/", Ok("/banhub"));
        check(" /tools/ban-hub_2.x~ ", Ok("/tools/ban-hub_2.x~"));
        check("banhub", Err(()));
        check("//banhub", Err(()));
        check("/a//b", Err(()));
        check("/a/../b", Err(()));
        check("/a/./b", Err(()));
        check("/ban hub", Err(()));
        check("/banhub?x=1", Err(()));
        check("/banhub#x", Err(()));
        check("/b%41", Err(()));
        check(&format!("/{}", "a".repeat(201)), Err(()));
    }

    #[test]
    fn join_and_home() {
        let base = BasePath::parse("/banhub").expect("valid");
        assert_eq!(base.join("/api/servers"), "/banhub/api/servers");
        assert_eq!(base.home(), "/banhub/");
        assert_eq!(BasePath::root().home(), "/");
        assert_eq!(BasePath::root().join("/api"), "/api");
    }
}
