//! fail2ban's own reading of the config directory (`fail2ban-client -c <dir> -d`, the commands
//! it would send to start every jail): the failure expressions each jail's filter gives, after
//! fail2ban's interpolation and before it expands the `<HOST>`-like tags.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use super::tools::Fail2banTools;

/// The failure expressions of every jail the config directory starts, by jail; `Err` carries
/// why fail2ban could not read the configuration.
pub(crate) async fn fail_regexes(
    tools: &Fail2banTools,
    config_dir: &Path,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let args: Vec<OsString> = vec!["-c".into(), config_dir.into(), "-d".into()];
    let output = tools
        .client(&args, tools.timeout)
        .await
        .map_err(|e| e.to_string())?;
    if !output.success() {
        return Err(output.stderr.trim().to_owned());
    }
    Ok(parse_fail_regexes(&output.stdout))
}

/// `['set', jail, 'addfailregex', regex]` and `['multi-set', jail, 'addfailregex', [regex, …]]`
/// lines of a dump; other lines are skipped.
fn parse_fail_regexes(dump: &str) -> BTreeMap<String, Vec<String>> {
    let mut regexes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in dump.lines().filter(|l| l.contains("'addfailregex'")) {
        let Some(Literal::List(items)) = Parser::new(line.trim()).value() else {
            continue;
        };
        match items.as_slice() {
            [
                Literal::Str(verb),
                Literal::Str(jail),
                Literal::Str(key),
                value,
            ] if key == "addfailregex" => {
                let entry = regexes.entry(jail.clone()).or_default();
                match (verb.as_str(), value) {
                    ("set", Literal::Str(regex)) => entry.push(regex.clone()),
                    ("multi-set", Literal::List(list)) => {
                        entry.extend(list.iter().filter_map(|v| match v {
                            Literal::Str(s) => Some(s.clone()),
                            _ => None,
                        }));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    regexes
}

/// The subset of Python literals a dump line holds.
#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Str(String),
    List(Vec<Literal>),
    /// Numbers, `True`, `None` and the like, kept as written.
    Other(String),
}

/// A parser of one Python `repr` of a list.
struct Parser<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            chars: text.chars().peekable(),
        }
    }

    fn value(&mut self) -> Option<Literal> {
        self.skip_space();
        match *self.chars.peek()? {
            '[' => {
                self.chars.next();
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    if self.chars.peek() == Some(&']') {
                        self.chars.next();
                        return Some(Literal::List(items));
                    }
                    items.push(self.value()?);
                    self.skip_space();
                    match self.chars.next()? {
                        ',' => {}
                        ']' => return Some(Literal::List(items)),
                        _ => return None,
                    }
                }
            }
            q @ ('\'' | '"') => {
                self.chars.next();
                self.string(q).map(Literal::Str)
            }
            _ => {
                let mut atom = String::new();
                while let Some(&c) = self.chars.peek() {
                    if c == ',' || c == ']' || c.is_whitespace() {
                        break;
                    }
                    atom.push(c);
                    self.chars.next();
                }
                (!atom.is_empty()).then_some(Literal::Other(atom))
            }
        }
    }

    /// The rest of a string opened by `quote`, with Python's escapes resolved.
    fn string(&mut self, quote: char) -> Option<String> {
        let mut text = String::new();
        loop {
            match self.chars.next()? {
                c if c == quote => return Some(text),
                '\\' => match self.chars.next()? {
                    'n' => text.push('\n'),
                    't' => text.push('\t'),
                    'r' => text.push('\r'),
                    'x' => text.push(self.hex(2)?),
                    'u' => text.push(self.hex(4)?),
                    'U' => text.push(self.hex(8)?),
                    c @ ('\\' | '\'' | '"') => text.push(c),
                    other => {
                        text.push('\\');
                        text.push(other);
                    }
                },
                c => text.push(c),
            }
        }
    }

    fn hex(&mut self, digits: usize) -> Option<char> {
        let code: String = (0..digits).map_while(|_| self.chars.next()).collect();
        char::from_u32(u32::from_str_radix(&code, 16).ok()?)
    }

    fn skip_space(&mut self) {
        while self.chars.peek().is_some_and(|c| c.is_whitespace()) {
            self.chars.next();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_expressions_are_read_from_set_and_multi_set_lines() {
        let dump = r#"['set', 'loglevel', 'INFO']
['add', 'testauth', 'auto']
['set', 'testauth', 'addfailregex', '^\\s*Failed login for \\S+ from <HOST>$']
['set', 'testauth', 'maxretry', 3]
['multi-set', 'sshd', 'addfailregex', ['^a <HOST> \'x\'$', "^b it's <F-USER>.+</F-USER> \x41\u00e9 \\d$"]]
['multi-set', 'sshd', 'action', 'noop', [['actionban', ''], ['name', 'sshd']]]
"#;
        let regexes = parse_fail_regexes(dump);
        assert_eq!(
            regexes["testauth"],
            [r"^\s*Failed login for \S+ from <HOST>$"]
        );
        assert_eq!(
            regexes["sshd"],
            [
                "^a <HOST> 'x'$".to_owned(),
                "^b it's <F-USER>.+</F-USER> A\u{e9} \\d$".to_owned()
            ]
        );
        assert_eq!(regexes.len(), 2);
    }

    #[test]
    fn broken_lines_are_skipped() {
        for line in [
            "['set', 'x', 'addfailregex', 'unterminated]",
            "['set', 'x', 'addfailregex'",
            "not a list 'addfailregex'",
        ] {
            assert!(parse_fail_regexes(line).is_empty(), "{line}");
        }
    }
}
