//! Banned addresses: pages of a jail's bans with their times (ListBanned), ban and unban
//! (SetBan).
//!
//! Where the times come from, and why pages are fast: only `get <jail> banip --with-time`
//! carries ban times, and it is slow on a long list (fail2ban formats two dates per ban in
//! Python); the bare `get <jail> banned` is much cheaper. Reading fail2ban's SQLite database
//! instead was rejected: it may be `:memory:` or disabled, it lags behind the server, it also
//! holds expired bans, and reading it means a C SQLite library in the agent. So the agent keeps
//! each browsed jail's list with times ([`BanCache`]) and brings it up to date as cheaply as the
//! change allows:
//! * every page first asks `status <jail> short` (cheap); while the jail's "currently banned"
//!   and "total banned" counters are what the kept list was made with (any ban raises the
//!   total, any unban lowers the current count, so every change of the set of bans shows), the
//!   page is cut from the kept list in memory;
//! * when the counters moved, `get <jail> banned` gives the exact set now: bans that ended are
//!   dropped, kept times stay, and bans new since the list was fetched come first with times
//!   not yet known (0, which the protocol reads as "fail2ban did not say"); a full fetch with
//!   times then runs in the background for the next page;
//! * a list older than [`FRESH_FOR`] is also refreshed in the background (the times of bans
//!   already listed change only when fail2ban prolongs a ban or the jail's bantime changes);
//! * a jail nobody browsed for [`KEEP_FOR`] is forgotten; its next page fetches with times
//!   before answering.
//!
//! A ban through SetBan drops the jail's list, so the new ban shows with its time at once.
//!
//! fail2ban prints the times in its own local time, to the second; the agent reads them in the
//! host's zone (its own), which is the same zone unless one of the two runs with another `TZ`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use banhub_proto::rules::{IpOrCidr, SHARED_JAIL};
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{BanChange, BannedEntry, BannedPage, ListBanned, SetBan};
use tracing::Instrument;

use super::Context;
use super::args;
use super::failure::{Failure, Reply};
use super::pool::Fail2banPool;
use crate::fail2ban::Fail2banError;
use crate::fail2ban::client::BanRecord;
use crate::fail2ban_files::JailName;

/// Age after which a kept list is refreshed in the background.
pub const FRESH_FOR: Duration = Duration::from_secs(10);
/// A list nobody asked for this long is dropped.
pub const KEEP_FOR: Duration = Duration::from_secs(300);

/// Kept ban lists, per jail. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct BanCache {
    jails: Arc<Mutex<HashMap<String, Slot>>>,
}

#[derive(Debug)]
struct Slot {
    bans: Arc<JailBans>,
    last_used: Instant,
    /// A background fetch for this jail is running.
    refreshing: bool,
}

/// A jail's bans, newest first, and the counters they match.
#[derive(Debug)]
pub struct JailBans {
    /// When the times were fetched.
    fetched: Instant,
    currently_banned: u64,
    total_banned: u64,
    entries: Vec<BannedEntry>,
    /// Some entries (the first ones) have no times yet.
    partial: bool,
}

impl BanCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.jails.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept list, marked as used.
    fn get(&self, jail: &str) -> Option<Arc<JailBans>> {
        let mut jails = self.lock();
        let slot = jails.get_mut(jail)?;
        slot.last_used = Instant::now();
        Some(Arc::clone(&slot.bans))
    }

    /// Keeps `bans`, and forgets lists nobody asked for in a while.
    fn put(&self, jail: &str, bans: Arc<JailBans>) {
        let mut jails = self.lock();
        jails.retain(|_, slot| slot.last_used.elapsed() < KEEP_FOR);
        let refreshing = jails.get(jail).is_some_and(|s| s.refreshing);
        jails.insert(
            jail.to_owned(),
            Slot {
                bans,
                last_used: Instant::now(),
                refreshing,
            },
        );
    }

    /// Marks a background fetch as started; `false` when one already runs (or the jail's list
    /// was dropped meanwhile).
    fn start_refresh(&self, jail: &str) -> bool {
        match self.lock().get_mut(jail) {
            Some(slot) if !slot.refreshing => {
                slot.refreshing = true;
                true
            }
            _ => false,
        }
    }

    fn end_refresh(&self, jail: &str) {
        if let Some(slot) = self.lock().get_mut(jail) {
            slot.refreshing = false;
        }
    }

    /// Forgets one jail's list (after a ban there).
    pub fn invalidate(&self, jail: &str) {
        self.lock().remove(jail);
    }

    /// Forgets every list (after a reload or a restart).
    pub fn clear(&self) {
        self.lock().clear();
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

/// The jail's bans, from the kept list brought up to date (see the module's comment).
async fn bans_of(context: &Context, jail: &JailName) -> Result<Arc<JailBans>, Failure> {
    let mut socket = context.fail2ban.lease().await?;
    // Also answers NOT_FOUND for a jail fail2ban does not run.
    let status = socket.jail_status(jail.as_str()).await?;
    let counters = (status.currently_banned, status.total_banned);
    let Some(kept) = context.bans.get(jail.as_str()) else {
        drop(socket);
        let bans = Arc::new(fetch(&context.fail2ban, jail.as_str()).await?);
        context.bans.put(jail.as_str(), Arc::clone(&bans));
        return Ok(bans);
    };
    let bans = if (kept.currently_banned, kept.total_banned) == counters {
        kept
    } else {
        let current = socket.banned(jail.as_str()).await?;
        let merged = Arc::new(merge(&kept, &current, counters));
        context.bans.put(jail.as_str(), Arc::clone(&merged));
        merged
    };
    if bans.partial || bans.fetched.elapsed() >= FRESH_FOR {
        refresh_in_background(context, jail);
    }
    Ok(bans)
}

/// Every ban of the jail with its times.
async fn fetch(pool: &Fail2banPool, jail: &str) -> Result<JailBans, Fail2banError> {
    let mut socket = pool.lease().await?;
    let fetched = Instant::now();
    let status = socket.jail_status(jail).await?;
    let records = socket.banned_with_time(jail).await?;
    Ok(JailBans {
        fetched,
        currently_banned: status.currently_banned,
        total_banned: status.total_banned,
        entries: entries(&records, &chrono::Local),
        partial: false,
    })
}

/// Fetches the jail's list with times beside the commands, once at a time per jail.
fn refresh_in_background(context: &Context, jail: &JailName) {
    if !context.bans.start_refresh(jail.as_str()) {
        return;
    }
    let (pool, cache, jail) = (
        context.fail2ban.clone(),
        context.bans.clone(),
        jail.to_string(),
    );
    tokio::spawn(
        async move {
            match fetch(&pool, &jail).await {
                Ok(bans) => cache.put(&jail, Arc::new(bans)),
                Err(e) => tracing::debug!(%jail, error = %e, "refreshing a ban list failed"),
            }
            cache.end_refresh(&jail);
        }
        .in_current_span(),
    );
}

/// The kept list made to match `current` (fail2ban's `get <jail> banned`, oldest ban first):
/// ended bans dropped, new ones first (newest first) without times.
fn merge(kept: &JailBans, current: &[String], counters: (u64, u64)) -> JailBans {
    let known: HashSet<&str> = kept.entries.iter().map(|e| e.ip.as_str()).collect();
    let present: HashSet<&str> = current.iter().map(String::as_str).collect();
    let mut entries: Vec<BannedEntry> = current
        .iter()
        .rev()
        .filter(|ip| !known.contains(ip.as_str()))
        .map(|ip| BannedEntry {
            ip: ip.clone(),
            banned_at_unix: 0,
            expires_at_unix: 0,
        })
        .collect();
    let new = !entries.is_empty();
    entries.extend(
        kept.entries
            .iter()
            .filter(|e| present.contains(e.ip.as_str()))
            .cloned(),
    );
    JailBans {
        fetched: kept.fetched,
        currently_banned: counters.0,
        total_banned: counters.1,
        entries,
        partial: kept.partial || new,
    }
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
    let address = if request.ban {
        args::ban_address(&request.ip, request.guard_override)?
    } else {
        args::address(&request.ip)?
    }
    .to_string();
    let jail = match request.jail.as_str() {
        "" if request.ban => {
            return Err(Failure::invalid(
                "a ban needs a jail; only an unban may leave the jail empty (every jail)",
            ));
        }
        "" => None,
        raw => Some(args::jail(raw)?),
    };
    if request.ban && jail.as_ref().is_some_and(|j| j.as_str() == SHARED_JAIL) {
        return Err(Failure::invalid(format!(
            "jail {SHARED_JAIL} holds the shared bans the hub's sharing policies send; ban in \
             another jail"
        )));
    }
    if !request.ban && jail.as_ref().is_none_or(|j| j.as_str() == SHARED_JAIL) {
        forget_shared(context, &address).await?;
    }
    let mut socket = context.fail2ban.lease().await?;
    let change = match jail {
        Some(jail) => {
            let changed = if request.ban {
                socket.ban(jail.as_str(), &address).await?
            } else {
                socket.unban(jail.as_str(), &address).await?
            };
            if request.ban {
                // The new ban (or a prolonged one) shows with its time on the next page; an
                // unban shows through the counters without a new fetch.
                context.bans.invalidate(jail.as_str());
            }
            BanChange {
                changed,
                jails: vec![jail.to_string()],
            }
        }
        None => {
            let jails = socket.jails_banning(&address).await?;
            let lifted = socket.unban_everywhere(&address).await?;
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

/// An operator's unban of `address` in the shared jail or everywhere also ends its shared ban,
/// which the agent would otherwise put back.
async fn forget_shared(context: &Context, address: &str) -> Result<(), Failure> {
    let (Ok(shared), Ok(ip)) = (context.shared_bans(), IpOrCidr::parse(address)) else {
        return Ok(());
    };
    if shared
        .forget(&ip)
        .await
        .map_err(|e| Failure::internal(e.to_string()))?
    {
        tracing::info!(%ip, "an operator's unban ends the shared ban of this address");
    }
    Ok(())
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

    fn kept(ips: &[(&str, i64)], partial: bool) -> JailBans {
        JailBans {
            fetched: Instant::now(),
            currently_banned: u64::try_from(ips.len()).expect("len"),
            total_banned: 10,
            entries: ips
                .iter()
                .map(|(ip, at)| BannedEntry {
                    ip: (*ip).to_owned(),
                    banned_at_unix: *at,
                    expires_at_unix: at + 600,
                })
                .collect(),
            partial,
        }
    }

    #[test]
    fn merging_drops_ended_bans_and_puts_new_ones_first() {
        let old = kept(
            &[("192.0.2.3", 30), ("192.0.2.2", 20), ("192.0.2.1", 10)],
            false,
        );
        // fail2ban's order is oldest first; .2 ended, .4 and .5 are new (.5 the newest).
        let current = ["192.0.2.1", "192.0.2.3", "192.0.2.4", "192.0.2.5"].map(str::to_owned);
        let merged = merge(&old, &current, (4, 12));
        let got: Vec<(&str, i64)> = merged
            .entries
            .iter()
            .map(|e| (e.ip.as_str(), e.banned_at_unix))
            .collect();
        assert_eq!(
            got,
            [
                ("192.0.2.5", 0),
                ("192.0.2.4", 0),
                ("192.0.2.3", 30),
                ("192.0.2.1", 10)
            ]
        );
        assert!(merged.partial);
        assert_eq!((merged.currently_banned, merged.total_banned), (4, 12));
        assert_eq!(merged.entries[2].expires_at_unix, 630);

        // Only removals: the merged list stays complete.
        let merged = merge(&old, &["192.0.2.3".to_owned()], (1, 10));
        assert!(!merged.partial);
        assert_eq!(merged.entries.len(), 1);
        // Entries still without times stay so until the next full fetch.
        let merged = merge(
            &kept(&[("192.0.2.9", 0)], true),
            &["192.0.2.9".to_owned()],
            (1, 10),
        );
        assert!(merged.partial);
    }

    #[test]
    fn the_cache_keeps_lists_and_single_flights_refreshes() {
        let cache = BanCache::default();
        cache.put("a", Arc::new(kept(&[("192.0.2.1", 1)], false)));
        assert_eq!(cache.get("a").map(|b| b.entries.len()), Some(1));
        assert!(cache.get("b").is_none());
        assert!(cache.start_refresh("a"));
        assert!(!cache.start_refresh("a"), "one refresh at a time");
        assert!(!cache.start_refresh("b"), "nothing to refresh");
        // A list stored meanwhile keeps the flag; the refresh's end clears it.
        cache.put("a", Arc::new(kept(&[], false)));
        assert!(!cache.start_refresh("a"));
        cache.end_refresh("a");
        assert!(cache.start_refresh("a"));
        cache.invalidate("a");
        assert!(cache.get("a").is_none());
        cache.put("c", Arc::new(kept(&[], false)));
        if let Some(old) = Instant::now().checked_sub(KEEP_FOR) {
            cache.lock().get_mut("c").expect("c").last_used = old;
            cache.put("d", Arc::new(kept(&[], false)));
            assert!(cache.get("c").is_none(), "unused lists are dropped");
        }
        cache.clear();
        assert!(cache.get("d").is_none());
    }
}
