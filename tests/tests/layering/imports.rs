//! Reads the crate-internal paths of one Rust source file: every `use crate::…` leaf (grouped trees,
//! `self`, `super`, globs, renames) and every inline `crate::…`, `super::…` or `self::…` path, resolved
//! to a path from the crate root, with the line it is written on. Comments, strings and character
//! literals are skipped, and inline `mod name { … }` blocks move `super` and `self` with them.

/// One path into the crate: its segments from the crate root (the named item last) and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub line: usize,
    pub path: Vec<String>,
}

/// Where a file sits: its module path from the crate root (`["store", "events"]` for
/// `store/events.rs`, `["store"]` for `store/mod.rs`) and, for a binary's `main.rs`, the name of the
/// library crate its paths start with (`banhub`), read as the crate root.
#[derive(Debug, Clone, Copy)]
pub struct FileContext<'a> {
    pub module: &'a [&'a str],
    pub library: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The references of `source`, in the order they are written.
pub fn references(source: &str, context: FileContext<'_>) -> Vec<Reference> {
    let tokens = tokenize(source);
    let mut walker = Walker {
        tokens: &tokens,
        at: 0,
        context,
        inline: Vec::new(),
        depth: 0,
        found: Vec::new(),
    };
    walker.run();
    walker.found
}

/// Splits `source` into identifiers, `::` and single punctuation, each with its line; comments,
/// string and character literals, numbers and whitespace leave nothing behind.
fn tokenize(source: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i, &mut line);
        } else if c == '"' {
            i = skip_string(&chars, i, &mut line);
        } else if c == '\'' {
            i = skip_quote(&chars, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let prefix = matches!(word.as_str(), "r" | "b" | "br" | "c" | "cr");
            if prefix
                && matches!(chars.get(i), Some('"' | '#'))
                && let Some(end) = skip_prefixed_string(&chars, i, word.contains('r'), &mut line)
            {
                i = end;
                continue;
            }
            tokens.push((line, Token::Ident(word)));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            tokens.push((line, Token::PathSep));
            i += 2;
        } else {
            tokens.push((line, Token::Punct(c)));
            i += 1;
        }
    }
    tokens
}

/// Skips a block comment starting at `start` (they nest in Rust); returns the index after it.
fn skip_block_comment(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            if chars[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// Skips a `"…"` literal whose opening quote is at `start`; returns the index after its closing quote.
fn skip_string(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            c => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

/// Skips a raw (`r"…"`, `r#"…"#`) or byte (`b"…"`) string whose prefix ends at `start`; `None` when
/// what follows is not a string after all (the raw identifier `r#name`).
fn skip_prefixed_string(
    chars: &[char],
    start: usize,
    raw: bool,
    line: &mut usize,
) -> Option<usize> {
    if !raw {
        return (chars.get(start) == Some(&'"')).then(|| skip_string(chars, start, line));
    }
    let mut i = start;
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    if chars.get(i) != Some(&'"') {
        return None;
    }
    i += 1;
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return Some(i + 1 + hashes);
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    Some(i)
}

/// Skips a character literal (`'x'`, `'\n'`, `'\''`, `'{'`) at `start`, or only the quote of a
/// lifetime (`'a`, `'static`).
fn skip_quote(chars: &[char], start: usize) -> usize {
    if chars.get(start + 1) == Some(&'\\') {
        // The escaped character may itself be a quote: search from the one after it.
        let mut i = start + 3;
        while i < chars.len() && chars[i] != '\'' {
            i += 1;
        }
        return i + 1;
    }
    if chars.get(start + 2) == Some(&'\'') {
        return start + 3;
    }
    start + 1
}

struct Walker<'t, 'c> {
    tokens: &'t [(usize, Token)],
    at: usize,
    context: FileContext<'c>,
    /// The inline `mod name {` blocks around the cursor, each with the brace depth inside it.
    inline: Vec<(String, usize)>,
    depth: usize,
    found: Vec<Reference>,
}

impl<'t> Walker<'t, '_> {
    fn run(&mut self) {
        let tokens = self.tokens;
        while self.at < tokens.len() {
            let previous = self.at.checked_sub(1).map(|i| &tokens[i].1);
            match &tokens[self.at].1 {
                Token::Punct('{') => {
                    self.depth += 1;
                    self.at += 1;
                }
                Token::Punct('}') => {
                    if self
                        .inline
                        .last()
                        .is_some_and(|(_, depth)| *depth == self.depth)
                    {
                        self.inline.pop();
                    }
                    self.depth = self.depth.saturating_sub(1);
                    self.at += 1;
                }
                Token::Ident(word) if word == "mod" => {
                    if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                        (self.peek(1), self.peek(2))
                    {
                        self.depth += 1;
                        self.inline.push((name.clone(), self.depth));
                        self.at += 3;
                    } else {
                        self.at += 1;
                    }
                }
                Token::Ident(word) if word == "use" => {
                    self.at += 1;
                    self.use_tree(Vec::new(), true);
                }
                Token::Ident(word)
                    if previous != Some(&Token::PathSep)
                        && self.peek(1) == Some(&Token::PathSep) =>
                {
                    match self.root(word) {
                        Some(path) => self.inline_path(path),
                        None => self.at += 1,
                    }
                }
                _ => self.at += 1,
            }
        }
    }

    fn peek(&self, ahead: usize) -> Option<&'t Token> {
        let tokens = self.tokens;
        tokens.get(self.at + ahead).map(|(_, token)| token)
    }

    /// Reads the rest of an inline path whose first segment (at the cursor) resolved to `path`.
    fn inline_path(&mut self, mut path: Vec<String>) {
        let mut line = self.tokens[self.at].0;
        self.at += 1;
        while let (Some(Token::PathSep), Some(Token::Ident(segment))) = (self.peek(0), self.peek(1))
        {
            line = self.tokens[self.at + 1].0;
            push_segment(&mut path, segment);
            self.at += 2;
        }
        self.found.push(Reference { line, path });
    }

    /// The module `self` names at the cursor: the file's module and the inline blocks around it.
    fn here(&self) -> Vec<String> {
        let mut path: Vec<String> = self.context.module.iter().map(|s| s.to_string()).collect();
        path.extend(self.inline.iter().map(|(name, _)| name.clone()));
        path
    }

    /// The absolute path a path's first segment stands for, or `None` when the path leaves the crate
    /// (another crate) or starts at a name of this module (which stays in it).
    fn root(&self, word: &str) -> Option<Vec<String>> {
        match word {
            // In a binary's main.rs, `crate` is the binary itself.
            "crate" if self.context.library.is_some() => {
                Some(self.context.module.iter().map(|s| s.to_string()).collect())
            }
            "crate" => Some(Vec::new()),
            "self" => Some(self.here()),
            "super" => {
                let mut path = self.here();
                path.pop();
                Some(path)
            }
            _ if Some(word) == self.context.library => Some(Vec::new()),
            _ => None,
        }
    }

    /// Reads one use tree at the cursor, below `prefix`. At the tree's root (`start`), its first
    /// segment decides whether it is a path into the crate at all. Leaves the cursor after the tree
    /// (at `,`, `}` or `;`).
    fn use_tree(&mut self, prefix: Vec<String>, start: bool) {
        let mut path = prefix;
        let mut inside = !start;
        let mut first = start;
        if self.peek(0) == Some(&Token::PathSep) {
            // `use ::name::…`: always another crate.
            inside = false;
            first = false;
            self.at += 1;
        }
        loop {
            match self.peek(0) {
                Some(Token::Ident(word)) => {
                    let line = self.tokens[self.at].0;
                    self.at += 1;
                    if first {
                        first = false;
                        match self.root(word) {
                            Some(root) => {
                                path = root;
                                inside = true;
                            }
                            None => inside = false,
                        }
                    } else {
                        push_segment(&mut path, word);
                    }
                    if self.peek(0) == Some(&Token::PathSep) {
                        self.at += 1;
                        continue;
                    }
                    if matches!(self.peek(0), Some(Token::Ident(word)) if word == "as") {
                        // `as name` only renames the leaf.
                        self.at += 2;
                    }
                    self.leaf(inside, path, line);
                    return;
                }
                Some(Token::Punct('*')) => {
                    let line = self.tokens[self.at].0;
                    self.at += 1;
                    self.leaf(inside, path, line);
                    return;
                }
                Some(Token::Punct('{')) => {
                    self.at += 1;
                    loop {
                        match self.peek(0) {
                            Some(Token::Punct('}')) => {
                                self.at += 1;
                                return;
                            }
                            Some(Token::Punct(',')) => self.at += 1,
                            None => return,
                            Some(_) if inside || first => self.use_tree(path.clone(), first),
                            Some(_) => self.skip_tree(),
                        }
                    }
                }
                _ => return,
            }
        }
    }

    fn leaf(&mut self, inside: bool, path: Vec<String>, line: usize) {
        if inside {
            self.found.push(Reference { line, path });
        }
    }

    /// Skips one use tree of another crate, `{…}` groups included.
    fn skip_tree(&mut self) {
        let mut depth = 0usize;
        while let Some(token) = self.peek(0) {
            match token {
                Token::Punct('{') => depth += 1,
                Token::Punct('}') if depth == 0 => return,
                Token::Punct('}') => depth -= 1,
                Token::Punct(',' | ';') if depth == 0 => return,
                _ => {}
            }
            self.at += 1;
        }
    }
}

/// Appends `segment` to `path`, where `super` steps back one module and `self` stays.
fn push_segment(path: &mut Vec<String>, segment: &str) {
    match segment {
        "super" => {
            path.pop();
        }
        "self" => {}
        _ => path.push(segment.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The references of `source` in `module` of a library, as `line: a::b::c`.
    fn check(module: &[&str], source: &str, expected: &[&str]) {
        check_in(
            FileContext {
                module,
                library: None,
            },
            source,
            expected,
        );
    }

    fn check_in(context: FileContext<'_>, source: &str, expected: &[&str]) {
        let found: Vec<String> = references(source, context)
            .into_iter()
            .map(|r| format!("{}: {}", r.line, r.path.join("::")))
            .collect();
        assert_eq!(found, expected, "references of {source:?}");
    }

    #[test]
    fn plain_and_renamed_uses() {
        check(&["api"], "use crate::store::Store;", &["1: store::Store"]);
        check(
            &["api"],
            "use crate::store::Store as Db;",
            &["1: store::Store"],
        );
        check(
            &["api"],
            "pub(crate) use crate::app::AppState;",
            &["1: app::AppState"],
        );
        check(
            &["api"],
            "use crate::{store::Store as Db, app::AppState as _, domain};",
            &["1: store::Store", "1: app::AppState", "1: domain"],
        );
    }

    #[test]
    fn grouped_and_nested_uses() {
        check(
            &["api"],
            "use crate::{app::AppState, store::{self, Store}, domain::*};",
            &[
                "1: app::AppState",
                "1: store",
                "1: store::Store",
                "1: domain",
            ],
        );
        check(
            &["api"],
            "use crate::{\n    auth::{\n        policy::{self, Policy},\n    },\n    fleet,\n};",
            &["3: auth::policy", "3: auth::policy::Policy", "5: fleet"],
        );
        check(
            &["api"],
            "use {crate::fleet::Fleet, std::sync::Arc};",
            &["1: fleet::Fleet"],
        );
    }

    #[test]
    fn other_crates_are_not_references() {
        check(
            &["api"],
            "use std::sync::Arc;\nuse axum::{Router, extract::{State, Path}};\nuse ::tokio::spawn;",
            &[],
        );
        check(
            &["api"],
            "let x = std::mem::take(&mut y); Self::new(); foo::bar::baz(); self.go();",
            &[],
        );
        check(&["api"], "use error::ApiError;\nmod error;", &[]);
    }

    #[test]
    fn super_and_self_resolve_from_the_file_module() {
        check(
            &["alerts", "webhook"],
            "use super::model::Rule;",
            &["1: alerts::model::Rule"],
        );
        check(
            &["alerts", "webhook"],
            "let host = super::super::settings::model::url_host(&url);",
            &["1: settings::model::url_host"],
        );
        check(
            &["store"],
            "use self::events::Rows;",
            &["1: store::events::Rows"],
        );
        check(
            &["app"],
            "use super::config::Config;",
            &["1: config::Config"],
        );
        check(
            &["store", "events"],
            "use crate::store::{super::domain::Ban};",
            &["1: domain::Ban"],
        );
    }

    #[test]
    fn inline_modules_move_super_and_self() {
        let source = "mod tests {\n    use super::*;\n    mod deeper { use super::super::Thing; }\n}\nuse self::x::Y;";
        check(
            &["store", "events"],
            source,
            &[
                "2: store::events",
                "3: store::events::Thing",
                "5: store::events::x::Y",
            ],
        );
        // A declared (not inline) module changes nothing.
        check(
            &["store"],
            "mod events;\nuse super::domain::Id;",
            &["2: domain::Id"],
        );
    }

    #[test]
    fn inline_paths_are_references() {
        check(
            &["fleet"],
            "let s = crate::store::Store::open(\n    crate::config::DEFAULT,\n);",
            &["1: store::Store::open", "2: config::DEFAULT"],
        );
        check(
            &["fleet"],
            "fn f() -> crate::domain::ServerId { todo!() }",
            &["1: domain::ServerId"],
        );
        check(
            &["fleet"],
            "pub(crate) fn f() {}\npub(in crate::fleet) fn g() {}",
            &["2: fleet"],
        );
        check(
            &["fleet"],
            "let k = super::config::Kind::A;",
            &["1: config::Kind::A"],
        );
    }

    #[test]
    fn comments_and_literals_are_skipped() {
        let source = concat!(
            "// use crate::store::Store;\n",
            "/* crate::api::X /* nested crate::app */ still crate::ui */\n",
            "let a = \"crate::auth::Y \\\" crate::cluster\";\n",
            "let b = r#\"crate::events \"quoted\" crate::fleet\"#;\n",
            "let c = b\"crate::pki\"; let d = '\"'; let e = '\\''; let f = '{';\n",
            "fn f<'a>(x: &'a str) -> crate::domain::Id { todo!() }\n",
            "/// Calls [`crate::settings::load`].\n",
            "//! Owns crate::alerts.\n",
        );
        check(&["metrics"], source, &["6: domain::Id"]);
    }

    #[test]
    fn a_binary_reads_the_library_as_the_crate_root() {
        check_in(
            FileContext {
                module: &["main"],
                library: Some("banhub_agent"),
            },
            "use banhub_agent::{action, link::{self, LinkExit}};\nuse crate::cli::Args;\nbanhub_agent::relay::run();",
            &[
                "1: action",
                "1: link",
                "1: link::LinkExit",
                "2: main::cli::Args",
                "3: relay::run",
            ],
        );
    }
}
