//! The comparison at the heart of reconciliation: what fail2ban bans now against what the agent
//! believes it bans.

use std::collections::BTreeSet;

/// One ban: `(jail, address)` as fail2ban names them.
pub type Key = (String, String);

/// What one comparison found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Banned in fail2ban, unknown to the agent: to report as observed bans.
    pub bans: Vec<Key>,
    /// Known to the agent, no longer banned in fail2ban: to report as observed unbans.
    pub unbans: Vec<Key>,
    /// More differences than `cap`; the rest wait for the next pass.
    pub capped: bool,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.bans.is_empty() && self.unbans.is_empty()
    }

    pub fn len(&self) -> usize {
        self.bans.len() + self.unbans.len()
    }
}

/// Compares `believed` with `actual`, for the jails in `answered` only: a jail fail2ban did not
/// list or did not answer for (stopped, starting, reloading) says nothing about its bans, so its
/// believed bans are neither confirmed nor reported as lifted. At most `cap` differences are
/// returned, bans first.
pub fn diff(
    believed: &BTreeSet<Key>,
    actual: &BTreeSet<Key>,
    answered: &BTreeSet<String>,
    cap: usize,
) -> Diff {
    let mut out = Diff::default();
    let mut room = cap;
    for key in actual.difference(believed) {
        if room == 0 {
            out.capped = true;
            return out;
        }
        out.bans.push(key.clone());
        room -= 1;
    }
    for key in believed.difference(actual) {
        if !answered.contains(&key.0) {
            continue;
        }
        if room == 0 {
            out.capped = true;
            return out;
        }
        out.unbans.push(key.clone());
        room -= 1;
    }
    out
}

/// Keeps only the differences found by both `first` and `second` (two looks some time apart):
/// a ban the action is about to report, or one fail2ban is still restoring, shows in one only.
pub fn confirmed(first: &Diff, second: &Diff) -> Diff {
    let keep = |a: &[Key], b: &[Key]| -> Vec<Key> {
        let b: BTreeSet<&Key> = b.iter().collect();
        a.iter().filter(|k| b.contains(k)).cloned().collect()
    };
    Diff {
        bans: keep(&first.bans, &second.bans),
        unbans: keep(&first.unbans, &second.unbans),
        capped: first.capped || second.capped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[(&str, &str)]) -> BTreeSet<Key> {
        items
            .iter()
            .map(|(j, ip)| ((*j).to_owned(), (*ip).to_owned()))
            .collect()
    }

    fn keys(items: &[(&str, &str)]) -> Vec<Key> {
        set(items).into_iter().collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        believed: &[(&str, &str)],
        actual: &[(&str, &str)],
        answered: &[&str],
        cap: usize,
        bans: &[(&str, &str)],
        unbans: &[(&str, &str)],
        capped: bool,
    ) {
        let answered = answered.iter().map(|s| (*s).to_owned()).collect();
        let got = diff(&set(believed), &set(actual), &answered, cap);
        assert_eq!(
            got,
            Diff {
                bans: keys(bans),
                unbans: keys(unbans),
                capped
            },
            "believed {believed:?}, actual {actual:?}"
        );
    }

    const A: (&str, &str) = ("sshd", "192.0.2.1");
    const B: (&str, &str) = ("sshd", "192.0.2.2");
    const C: (&str, &str) = ("web", "192.0.2.1");

    #[test]
    fn table() {
        // Same sets (e.g. fail2ban restarted and restored its bans): nothing.
        check(
            &[A, B, C],
            &[A, B, C],
            &["sshd", "web"],
            100,
            &[],
            &[],
            false,
        );
        // Banned behind the agent's back.
        check(&[A], &[A, B], &["sshd"], 100, &[B], &[], false);
        // Unbanned behind its back.
        check(&[A, B], &[A], &["sshd"], 100, &[], &[B], false);
        // Both at once, across jails.
        check(&[A, C], &[B, C], &["sshd", "web"], 100, &[B], &[A], false);
        // A jail that did not answer (stopped, starting) reports no unbans.
        check(&[A, C], &[A], &["sshd"], 100, &[], &[], false);
        // Empty belief, empty fail2ban.
        check(&[], &[], &[], 100, &[], &[], false);
        // The same address in two jails is two bans.
        check(&[], &[A, C], &["sshd", "web"], 100, &[A, C], &[], false);
        // Capped: bans first, then unbans, flagged.
        check(&[C], &[A, B], &["sshd", "web"], 2, &[A, B], &[], true);
        check(&[C], &[A, B], &["sshd", "web"], 1, &[A], &[], true);
        check(&[A, C], &[B], &["sshd", "web"], 2, &[B], &[A], true);
        check(&[], &[A], &["sshd"], 0, &[], &[], true);
        // Exactly at the cap is not capped.
        check(&[], &[A, B], &["sshd"], 2, &[A, B], &[], false);
    }

    #[test]
    fn only_what_both_looks_found_is_confirmed() {
        let first = Diff {
            bans: keys(&[A, B]),
            unbans: keys(&[C]),
            capped: false,
        };
        let second = Diff {
            bans: keys(&[B]),
            unbans: keys(&[]),
            capped: false,
        };
        assert_eq!(
            confirmed(&first, &second),
            Diff {
                bans: keys(&[B]),
                unbans: vec![],
                capped: false
            }
        );
    }
}
