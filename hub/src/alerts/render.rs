//! What a digest (or a notice, a digest without events) says: the subject, a plain-text and an
//! HTML body for e-mail, a short text for chat tools, and a JSON document for generic webhooks.
//! Everything an attacker could have chosen (host names) is escaped in HTML.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::domain::alerts::Digest;

/// Top addresses listed in a message.
const TOP_IPS: usize = 10;

/// One digest, rendered for every channel.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub subject: String,
    pub text: String,
    pub html: String,
    /// A few lines for chat tools.
    pub chat: String,
    pub json: serde_json::Value,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Renders `digest`; `servers` names servers by id.
pub fn render(digest: &Digest, servers: &HashMap<String, String>) -> Rendered {
    if let Some(notice) = &digest.summary.notice {
        return render_notice(digest, notice);
    }
    let s = &digest.summary;
    let name = |id: &str| servers.get(id).cloned().unwrap_or_else(|| id.to_owned());
    let subject = format!(
        "[banhub] {}: {} on {}",
        digest.rule_name,
        plural(digest.events, "ban", "bans"),
        plural(s.by_server.len() as u64, "server", "servers")
    );
    let span = match (s.first_at, s.last_at) {
        (Some(first), Some(last)) => format!(
            "between {} and {} (UTC)",
            first.format("%Y-%m-%d %H:%M:%S"),
            last.format("%Y-%m-%d %H:%M:%S")
        ),
        _ => String::new(),
    };
    let by_server: Vec<(String, u64)> = s.by_server.iter().map(|(k, v)| (name(k), *v)).collect();
    let by_jail: Vec<(String, u64)> = s.by_jail.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let by_country: Vec<(String, u64)> =
        s.by_country.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let top = s.top_ips(TOP_IPS);

    let mut text = format!(
        "Alert rule \"{}\" matched {} {span}.\n",
        digest.rule_name,
        plural(digest.events, "ban", "bans")
    );
    let mut section = |title: &str, rows: &[(String, u64)]| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(text, "\n{title}:");
        for (k, v) in rows {
            let _ = writeln!(text, "  {k}: {v}");
        }
    };
    section("By server", &by_server);
    section("By jail", &by_jail);
    section("By country", &by_country);
    let top_rows: Vec<(String, u64)> = top.iter().map(|(ip, n)| ((*ip).to_owned(), *n)).collect();
    section("Top addresses", &top_rows);
    if !s.samples.is_empty() {
        let _ = writeln!(text, "\nFirst bans:");
        for m in &s.samples {
            let _ = writeln!(
                text,
                "  {} {} banned in {} on {}{}",
                m.occurred_at.format("%H:%M:%S"),
                m.ip,
                m.jail,
                name(&m.server_id),
                m.country
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(
        text,
        "\nDigest {} (events {} to {}). Sent by banhub.",
        digest.id, digest.first_event_id, digest.last_event_id
    );

    let table = |title: &str, rows: &[(String, u64)]| -> String {
        if rows.is_empty() {
            return String::new();
        }
        let mut out = format!("<h3>{}</h3><table>", escape(title));
        for (k, v) in rows {
            let _ = write!(out, "<tr><td>{}</td><td>{v}</td></tr>", escape(k));
        }
        out.push_str("</table>");
        out
    };
    let mut html = format!(
        "<html><body><p>Alert rule <b>{}</b> matched {} {}.</p>",
        escape(&digest.rule_name),
        plural(digest.events, "ban", "bans"),
        escape(&span)
    );
    html.push_str(&table("By server", &by_server));
    html.push_str(&table("By jail", &by_jail));
    html.push_str(&table("By country", &by_country));
    html.push_str(&table("Top addresses", &top_rows));
    if !s.samples.is_empty() {
        html.push_str("<h3>First bans</h3><table>");
        for m in &s.samples {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                m.occurred_at.format("%H:%M:%S"),
                escape(&m.ip),
                escape(&m.jail),
                escape(&name(&m.server_id))
            );
        }
        html.push_str("</table>");
    }
    let _ = write!(
        html,
        "<p>Digest {} (events {} to {}). Sent by banhub.</p></body></html>",
        digest.id, digest.first_event_id, digest.last_event_id
    );

    let mut chat = format!(
        "*{}*: {} {span}",
        digest.rule_name,
        plural(digest.events, "ban", "bans")
    );
    if !by_server.is_empty() {
        let list: Vec<String> = by_server.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = write!(chat, "\nservers: {}", list.join(", "));
    }
    if !by_jail.is_empty() {
        let list: Vec<String> = by_jail.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = write!(chat, "\njails: {}", list.join(", "));
    }
    if !top.is_empty() {
        let list: Vec<String> = top.iter().map(|(ip, n)| format!("{ip} ({n})")).collect();
        let _ = write!(chat, "\ntop: {}", list.join(", "));
    }

    let json = json!({
        "type": "banhub.alert.digest",
        "digestId": digest.id,
        "rule": {"id": digest.rule_id, "name": digest.rule_name},
        "events": digest.events,
        "firstEventId": digest.first_event_id,
        "lastEventId": digest.last_event_id,
        "firstAt": s.first_at,
        "lastAt": s.last_at,
        "byServer": by_server.iter().map(|(k, v)| json!({"server": k, "bans": v})).collect::<Vec<_>>(),
        "byJail": s.by_jail,
        "byCountry": s.by_country,
        "topIps": top.iter().map(|(ip, n)| json!({"ip": ip, "bans": n})).collect::<Vec<_>>(),
        "samples": s.samples,
    });
    Rendered {
        subject,
        text,
        html,
        chat,
        json,
    }
}

/// A notice (a digest without events, see `notice.rs`) rendered for every channel; its title is
/// the digest's rule name.
fn render_notice(digest: &Digest, notice: &str) -> Rendered {
    let title = &digest.rule_name;
    Rendered {
        subject: format!("[banhub] {title}"),
        text: format!("{notice}\n\nNotice {}. Sent by banhub.\n", digest.id),
        html: format!(
            "<html><body><p><b>{}</b></p><p>{}</p><p>Notice {}. Sent by banhub.</p></body></html>",
            escape(title),
            escape(notice),
            digest.id
        ),
        chat: format!("*{title}*\n{notice}"),
        json: json!({
            "type": "banhub.alert.notice",
            "digestId": digest.id,
            "rule": {"id": digest.rule_id, "name": title},
            "notice": notice,
            "at": digest.opened_at,
        }),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::domain::alerts::DigestSummary;

    #[test]
    fn a_notice_renders_its_title_and_text_escaped() {
        let digest = Digest {
            id: 7,
            rule_id: "sharing-paused".to_owned(),
            rule_name: "Sharing paused for <web-1>".to_owned(),
            opened_at: Utc::now(),
            due_at: Utc::now(),
            closed_at: Some(Utc::now()),
            events: 0,
            first_event_id: 0,
            last_event_id: 0,
            summary: DigestSummary {
                notice: Some("601 shared bans & more".to_owned()),
                ..DigestSummary::default()
            },
        };
        let rendered = render(&digest, &HashMap::new());
        assert_eq!(rendered.subject, "[banhub] Sharing paused for <web-1>");
        assert!(rendered.text.starts_with("601 shared bans & more"));
        assert!(rendered.html.contains("&lt;web-1&gt;"));
        assert!(rendered.html.contains("601 shared bans &amp; more"));
        assert_eq!(rendered.json["type"], "banhub.alert.notice");
        assert_eq!(rendered.json["rule"]["id"], "sharing-paused");
    }
}
