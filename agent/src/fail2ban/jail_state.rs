//! What a running jail actually uses, read back from fail2ban: its actions, ignore settings,
//! thresholds and watched logs (`get <jail> <setting>`).

use super::pickle::Value;
use super::socket::{Fail2banError, Fail2banSocket};

/// The settings of one running jail as fail2ban reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningJail {
    /// Action names (`actname` when the configuration gave one), in fail2ban's order.
    pub actions: Vec<String>,
    /// Addresses and networks as fail2ban normalized them (`127.0.0.1/8` → `127.0.0.0/8`).
    pub ignore_ip: Vec<String>,
    /// `None` when the jail runs no ignore command.
    pub ignore_command: Option<String>,
    pub max_retry: i64,
    pub find_time: i64,
    pub ban_time: i64,
    /// Files a file backend watches (empty for the systemd backend).
    pub log_paths: Vec<String>,
    /// The filter's failure expressions, `<HOST>`-like tags expanded.
    pub fail_regex: Vec<String>,
}

impl Fail2banSocket {
    /// Reads what `jail` runs with, one `get` per setting.
    pub async fn running_jail(&mut self, jail: &str) -> Result<RunningJail, Fail2banError> {
        Ok(RunningJail {
            actions: self.get_list(jail, "actions").await?,
            ignore_ip: self.get_list(jail, "ignoreip").await?,
            ignore_command: self.get_optional_str(jail, "ignorecommand").await?,
            max_retry: self.get_int(jail, "maxretry").await?,
            find_time: self.get_int(jail, "findtime").await?,
            ban_time: self.get_int(jail, "bantime").await?,
            log_paths: self.get_list(jail, "logpath").await?,
            fail_regex: self.get_list(jail, "failregex").await?,
        })
    }

    async fn get_list(&mut self, jail: &str, key: &str) -> Result<Vec<String>, Fail2banError> {
        let args = ["get", jail, key];
        let reply = self.call(&args).await?;
        str_list(reply).map_err(|detail| unexpected(&args, detail))
    }

    async fn get_int(&mut self, jail: &str, key: &str) -> Result<i64, Fail2banError> {
        let args = ["get", jail, key];
        let reply = self.call(&args).await?;
        reply
            .as_int()
            .ok_or_else(|| unexpected(&args, format!("{reply} is not an int")))
    }

    async fn get_optional_str(
        &mut self,
        jail: &str,
        key: &str,
    ) -> Result<Option<String>, Fail2banError> {
        let args = ["get", jail, key];
        let reply = self.call(&args).await?;
        optional_str(reply).map_err(|detail| unexpected(&args, detail))
    }
}

/// A list (or set) of str.
fn str_list(reply: Value) -> Result<Vec<String>, String> {
    let description = reply.type_name();
    reply
        .into_list()
        .ok_or_else(|| format!("a {description} instead of a list"))?
        .into_iter()
        .map(|item| match item {
            Value::Str(s) => Ok(s),
            other => Err(format!("list item {other} is not a str")),
        })
        .collect()
}

/// A str, where `None`, `False` and the empty string mean "not set" (fail2ban answers `False`
/// for an ignore command never set, and keeps whatever a reload last set).
fn optional_str(reply: Value) -> Result<Option<String>, String> {
    match reply {
        Value::None | Value::Bool(false) => Ok(None),
        Value::Str(s) if s.trim().is_empty() => Ok(None),
        Value::Str(s) => Ok(Some(s)),
        other => Err(format!("{other} is not a str")),
    }
}

fn unexpected(args: &[&str], detail: String) -> Fail2banError {
    Fail2banError::UnexpectedReply {
        command: args.join(" "),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_ignore_command_reads_as_none() {
        let check = |reply: Value, expected: Option<&str>| {
            assert_eq!(
                optional_str(reply.clone()).expect("a str or nothing"),
                expected.map(str::to_owned),
                "{reply:?}"
            );
        };
        check(Value::Bool(false), None);
        check(Value::None, None);
        check(Value::Str("  ".into()), None);
        check(Value::Str("/bin/true".into()), Some("/bin/true"));
        assert!(optional_str(Value::Int(1)).is_err());
    }

    #[test]
    fn lists_hold_str_only() {
        let list = Value::List(vec![
            Value::Str("filelog".into()),
            Value::Str("banhub".into()),
        ]);
        assert_eq!(str_list(list).expect("a list"), ["filelog", "banhub"]);
        assert!(str_list(Value::List(vec![Value::Int(1)])).is_err());
        assert!(str_list(Value::Str("filelog".into())).is_err());
    }
}
