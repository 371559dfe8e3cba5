//! The events' query builder: the `WHERE` conditions of every filter (server, jail, address or
//! network, kinds, sources, time range, text) and the keyset cursor, appended to a [`Sql`], and the
//! merge of the newest events of several addresses. Shared by the page reads and the text searches.

use sea_orm::DbBackend;

use super::super::sql::Sql;
use super::text;
use crate::domain::events::{Cursor, EventFilter, IpOrCidr, ip_key, ip_key_range};

/// ` AND (occurred_at, id) < cursor`: strictly older than where the previous page ended.
pub(super) fn push_cursor(sql: &mut Sql, after: Option<Cursor>) {
    if let Some(cursor) = after {
        sql.push(" AND (occurred_at, id) < (")
            .bind(cursor.occurred_at_ms)
            .push(", ")
            .bind(cursor.id.0)
            .push(")");
    }
}

/// Appends `AND …` for every filter that is set.
pub(super) fn push_filter(sql: &mut Sql, filter: &EventFilter) {
    if let Some(server) = filter.server {
        sql.push(" AND server_id = ").bind(server.to_string());
    }
    if let Some(jail) = &filter.jail {
        sql.push(" AND jail = ").bind(jail.as_str().to_owned());
    } else {
        // The end-to-end probe's events only when asked for by their jail (gaps have no jail).
        sql.push(" AND (jail IS NULL OR jail <> ")
            .bind(banhub_proto::rules::PROBE_JAIL.to_owned())
            .push(")");
    }
    match &filter.ip {
        Some(ip @ IpOrCidr::Ip(_)) => {
            sql.push(" AND ip_key = ").bind(ip_key(ip).to_vec());
        }
        Some(net @ IpOrCidr::Net(_)) => {
            let (lo, hi) = ip_key_range(net);
            sql.push(" AND ip_key BETWEEN ")
                .bind(lo.to_vec())
                .push(" AND ")
                .bind(hi.to_vec());
        }
        None => {}
    }
    if !filter.kinds.is_empty() {
        // Literals, not bound values: only then can the database see that `kind = 'gap'` selects
        // the rows of the partial index made for it (M0008). The values are the enum's own names.
        let kinds: Vec<String> = filter
            .kinds
            .iter()
            .map(|k| format!("'{}'", k.as_str()))
            .collect();
        match kinds.as_slice() {
            [one] => sql.push(&format!(" AND kind = {one}")),
            many => sql.push(&format!(" AND kind IN ({})", many.join(", "))),
        };
    }
    if !filter.sources.is_empty() {
        sql.push(" AND source IN ")
            .tuple(filter.sources.iter().map(|s| s.as_str().into()));
    }
    push_range(sql, filter);
    if let Some(text) = &filter.text {
        push_text(sql, text.as_str());
    }
}

/// The body of `… FROM (<here>`: for each address key, the newest `wanted` events after the cursor
/// that pass `filter` (which appends `AND …` conditions), merged into `… ) m` and cut to the newest
/// `wanted`; the outer select names `id` (and may order by `occurred_at`).
pub(super) fn push_newest_of_keys(
    sql: &mut Sql,
    keys: &[Vec<u8>],
    filter: impl Fn(&mut Sql),
    after: Option<Cursor>,
    wanted: i64,
) {
    if sql.backend() == DbBackend::Postgres {
        // One lateral subquery over a list of the keys: PostgreSQL plans a `UNION ALL` of one
        // branch per address anew every time, and planning a long union costs more than reading
        // it; this form plans fast (SQLite has no `LATERAL`, and plans the union fast).
        sql.push("SELECT x.id, x.occurred_at FROM (VALUES ");
        for (i, key) in keys.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.push("(").bind(key.clone()).push("::bytea)");
        }
        sql.push(
            ") k(key) CROSS JOIN LATERAL (SELECT id, occurred_at FROM events WHERE ip_key = k.key",
        );
        filter(sql);
        push_cursor(sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(") x) m ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted);
        return;
    }
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            sql.push(" UNION ALL ");
        }
        sql.push("SELECT id, occurred_at FROM (SELECT id, occurred_at FROM events WHERE ip_key = ")
            .bind(key.clone());
        filter(sql);
        push_cursor(sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(&format!(") a{i}"));
    }
    sql.push(") m ORDER BY occurred_at DESC, id DESC LIMIT ")
        .bind(wanted);
}

/// ` AND occurred_at …` for the time range of `filter`, if any.
pub(super) fn push_range(sql: &mut Sql, filter: &EventFilter) {
    if let Some(from) = filter.from {
        sql.push(" AND occurred_at >= ")
            .bind(from.timestamp_millis());
    }
    if let Some(to) = filter.to {
        sql.push(" AND occurred_at < ").bind(to.timestamp_millis());
    }
}

/// ` AND logs LIKE '%text%'`: the text anywhere in an event's log lines, ASCII case ignored
/// (SQLite's `LIKE`; PostgreSQL's `ILIKE` ignores all case).
pub(super) fn push_text(sql: &mut Sql, text: &str) {
    // Logs are stored as a JSON list, so the text is searched in its JSON-escaped form.
    let inner = text::stored_form(text);
    let mut pattern = String::with_capacity(inner.len() + 2);
    pattern.push('%');
    for c in inner.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    if sql.backend() == DbBackend::Postgres {
        // A literal, not a bound value: PostgreSQL plans a prepared statement once for any value
        // after a few runs, and a plan made without the pattern cannot judge how rare the text
        // is (with a trigram index, as M0010 made and M0012 dropped, the choice between it and
        // the newest rows first depends on that). An `E''` string with its quotes and
        // backslashes escaped holds any text.
        let literal = pattern.replace('\\', "\\\\").replace('\'', "''");
        sql.push(&format!(" AND logs ILIKE E'{literal}' ESCAPE '\\'"));
    } else {
        sql.push(" AND logs LIKE ")
            .bind(pattern)
            .push(" ESCAPE '\\'");
    }
}
