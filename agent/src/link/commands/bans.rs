//! Banned addresses: pages of a jail's bans with their times (ListBanned), ban and unban
//! (SetBan).
//!
//! Where the times come from: only `get <jail> banip --with-time` carries them, and for 10,000
//! bans it is several times slower than the bare `get <jail> banned` (fail2ban formats two
//! dates per ban in Python). Reading fail2ban's SQLite database instead was rejected: it may be
//! `:memory:` or disabled, it lags behind the server, it also holds expired bans, and reading
//! it means a C SQLite library in the agent. So the agent fetches the with-time list and keeps
//! it for a short while per jail ([`BanCache`]), which makes paging and searching a big jail
//! one `status <jail> short` round trip plus in-memory work. A kept list is used only while
//! the jail's "currently banned" and "total banned" counters are what they were when it was
//! fetched (any ban raises the total, any unban lowers the current count, so every change of
//! the set of bans shows) and for at most [`CACHE_TTL`]: the times of bans already in the list
//! change only when fail2ban prolongs one or its bantime is changed, and those show within
//! that bound. SetBan drops the jail's list at once.
//!
//! fail2ban prints the times in its own local time, to the second; the agent reads them in the
//! host's zone (its own), which is the same zone unless one of the two runs with another `TZ`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{BanChange, BannedEntry, BannedPage, ListBanned, SetBan};

use super::Context;
use super::args;
use super::failure::{Failure, Reply};
use crate::config::JailName;
use crate::fail2ban::client::BanRecord;

/// How long a fetched list of bans with times is used while the jail's counters are unchanged.
pub const CACHE_TTL: Duration = Duration::from_secs(10);

/// Recently fetched ban lists, per jail.
#[derive(Debug, Default)]
pub struct BanCache {
    jails: Mutex<HashMap<String, Arc<JailBans>>>,
}

/// A jail's bans, newest first, and the counters they were fetched with.
#[derive(Debug)]
pub struct JailBans {
    fetched: Instant,
    currently_banned: u64,
    total_banned: u64,
    entries: Vec<BannedEntry>,
}

impl BanCache {
    fn get(&self, jail: &str, currently_banned: u64, total_banned: u64) -> Option<Arc<JailBans>> {
        let jails = self.jails.lock().unwrap_or_else(|e| e.into_inner());
        jails
            .get(jail)
            .filter(|b| {
                b.fetched.elapsed() < CACHE_TTL
                    && b.currently_banned == currently_banned
                    && b.total_banned == total_banned
            })
            .cloned()
    }

    /// Keeps `bans`, and forgets lists too old to be used (so memory holds only the jails
    /// browsed in the last seconds).
    fn put(&self, jail: &str, bans: Arc<JailBans>) {
        let mut jails = self.jails.lock().unwrap_or_else(|e| e.into_inner());
        jails.retain(|_, b| b.fetched.elapsed() < CACHE_TTL);
        jails.insert(jail.to_owned(), bans);
    }

    /// Forgets one jail's list (after a ban or unban there).
    pub fn invalidate(&self, jail: &str) {
        self.jails
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(jail);
    }

    /// Forgets every list (after an unban in every jail, a reload or a restart).
    pub fn clear(&self) {
        self.jails.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// `ListBanned`: one page of the jail's bans matching the search, newest ban first.
pub async fn list_banned(context: &Context, request: ListBanned) -> Reply {
    let jail = args::jail(&request.jail)?;
    let search = args::search(&request.search)?;
    let limit = usize::try_from(args::page_limit(request.limit)?).unwrap_or(usize::MAX);
    let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
    let bans = bans_of(context, &jail).await?;
    let mut total = 0u64;
    let mut entries = Vec::with_capacity(limit.min(bans.entries.len()));
    for entry in bans.entries.iter().filter(|e| search.matches(&e.ip)) {
        if usize::try_from(total).is_ok_and(|n| n >= offset) && entries.len() < limit {
            entries.push(entry.clone());
        }
        total += 1;
    }
    Ok(Outcome::Banned(BannedPage {
        jail: jail.to_string(),
        total,
        entries,
    }))
}

/// The jail's bans: the kept list while it is current, else fetched afresh.
async fn bans_of(context: &Context, jail: &JailName) -> Result<Arc<JailBans>, Failure> {
    let mut socket = context.fail2ban.lease().await?;
    // Also answers NOT_FOUND for a jail fail2ban does not run.
    let status = socket.jail_status(jail.as_str()).await?;
    if let Some(bans) =
        context
            .bans
            .get(jail.as_str(), status.currently_banned, status.total_banned)
    {
        return Ok(bans);
    }
    let fetched = Instant::now();
    let records = socket.banned_with_time(jail.as_str()).await?;
    drop(socket);
    let bans = Arc::new(JailBans {
        fetched,
        currently_banned: status.currently_banned,
        total_banned: status.total_banned,
        entries: entries(&records, &chrono::Local),
    });
    context.bans.put(jail.as_str(), Arc::clone(&bans));
    Ok(bans)
}

/// The entries of `records` with Unix times read in `zone`, newest ban first (fail2ban lists
/// soonest expiry first; bans of the same second keep that order).
fn entries<Z: chrono::TimeZone>(records: &[BanRecord], zone: &Z) -> Vec<BannedEntry> {
    let mut entries: Vec<BannedEntry> = records
        .iter()
        .map(|record| {
            let (banned_at_unix, expires_at_unix) = record.unix_times(zone).unwrap_or((0, 0));
            BannedEntry {
                ip: record.ip.clone(),
                banned_at_unix,
                expires_at_unix,
            }
        })
        .collect();
    entries.sort_by_key(|e| std::cmp::Reverse(e.banned_at_unix));
    entries
}

/// `SetBan`: ban in a jail, unban in a jail, or (no jail) unban in every jail.
pub async fn set_ban(context: &Context, request: SetBan) -> Reply {
    let address = args::address(&request.ip)?.to_string();
    let jail = match request.jail.as_str() {
        "" if request.ban => {
            return Err(Failure::invalid(
                "a ban needs a jail; only an unban may leave the jail empty (every jail)",
            ));
        }
        "" => None,
        raw => Some(args::jail(raw)?),
    };
    let mut socket = context.fail2ban.lease().await?;
    let change = match jail {
        Some(jail) => {
            let changed = if request.ban {
                socket.ban(jail.as_str(), &address).await?
            } else {
                socket.unban(jail.as_str(), &address).await?
            };
            // Even an unchanged ban may have prolonged the existing one.
            context.bans.invalidate(jail.as_str());
            BanChange {
                changed,
                jails: vec![jail.to_string()],
            }
        }
        None => {
            let jails = socket.jails_banning(&address).await?;
            let lifted = socket.unban_everywhere(&address).await?;
            context.bans.clear();
            BanChange {
                changed: lifted > 0,
                jails: if lifted > 0 { jails } else { Vec::new() },
            }
        }
    };
    tracing::info!(
        ip = %address,
        ban = request.ban,
        changed = change.changed,
        jails = ?change.jails,
        "ban changed"
    );
    Ok(Outcome::BanChange(change))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDateTime;

    fn record(ip: &str, start: &str, secs: i64) -> BanRecord {
        let at = |t: &str| NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").expect("time");
        BanRecord {
            ip: ip.to_owned(),
            banned_at: at(start),
            duration_secs: secs,
            ends_at: if secs < 0 {
                at("9999-12-31 23:59:59")
            } else {
                at(start) + chrono::Duration::seconds(secs)
            },
        }
    }

    #[test]
    fn entries_are_newest_first_with_unix_times() {
        let records = [
            record("192.0.2.1", "2026-11-23 10:00:00", 600),
            record("192.0.2.2", "2026-11-23 10:05:00", 60),
            record("192.0.2.3", "2026-11-23 09:00:00", -1),
        ];
        let entries = entries(&records, &chrono::Utc);
        let ips: Vec<&str> = entries.iter().map(|e| e.ip.as_str()).collect();
        assert_eq!(ips, ["192.0.2.2", "192.0.2.1", "192.0.2.3"]);
        let base = 1_795_428_000; // 2026-11-23 10:00:00 UTC
        assert_eq!(
            (entries[1].banned_at_unix, entries[1].expires_at_unix),
            (base, base + 600)
        );
        assert_eq!(entries[2].expires_at_unix, -1);
    }

    #[test]
    fn the_cache_follows_counters_and_age() {
        let cache = BanCache::default();
        let bans = |fetched| {
            Arc::new(JailBans {
                fetched,
                currently_banned: 2,
                total_banned: 5,
                entries: Vec::new(),
            })
        };
        cache.put("a", bans(Instant::now()));
        assert!(cache.get("a", 2, 5).is_some());
        assert!(cache.get("a", 1, 5).is_none(), "an unban shows");
        assert!(cache.get("a", 2, 6).is_none(), "a ban shows");
        assert!(cache.get("b", 2, 5).is_none());
        cache.invalidate("a");
        assert!(cache.get("a", 2, 5).is_none());
        if let Some(old) = Instant::now().checked_sub(CACHE_TTL) {
            cache.put("old", bans(old));
            assert!(cache.get("old", 2, 5).is_none(), "too old");
            cache.put("a", bans(Instant::now()));
            assert!(
                !cache.jails.lock().expect("lock").contains_key("old"),
                "old lists are dropped"
            );
        }
        cache.clear();
        assert!(cache.get("a", 2, 5).is_none());
    }
}
