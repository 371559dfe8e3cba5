//! What a digest (or a notice, a digest without events) says: the subject, a plain-text and an
//! HTML body for e-mail, a short text for chat tools, and a JSON document for generic webhooks.
//! Everything an attacker could have chosen (host names) is escaped in HTML.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::json;

use super::templates::{Messages, fill, messages};
use crate::domain::alerts::Digest;
use crate::settings::model::Language;

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

/// Renders `digest` in `language`; `servers` names servers by id.
pub fn render(digest: &Digest, servers: &HashMap<String, String>, language: Language) -> Rendered {
    let m = messages(language);
    if let Some(notice) = &digest.summary.notice {
        return render_notice(digest, notice, m);
    }
    let s = &digest.summary;
    let name = |id: &str| servers.get(id).cloned().unwrap_or_else(|| id.to_owned());
    let bans = m.count(digest.events, m.bans);
    let subject = format!(
        "[banhub] {}",
        fill(
            m.subject,
            &[
                ("rule", &digest.rule_name),
                ("bans", &bans),
                ("servers", &m.count(s.by_server.len() as u64, m.servers)),
            ]
        )
    );
    let span = match (s.first_at, s.last_at) {
        (Some(first), Some(last)) => fill(
            m.span,
            &[
                ("first", &first.format(m.date_time).to_string()),
                ("last", &last.format(m.date_time).to_string()),
            ],
        ),
        _ => String::new(),
    };
    let headline = |rule: &str, span: &str| {
        fill(
            m.matched,
            &[("rule", rule), ("bans", &bans), ("span", span)],
        )
    };
    let by_server: Vec<(String, u64)> = s.by_server.iter().map(|(k, v)| (name(k), *v)).collect();
    let by_jail: Vec<(String, u64)> = s.by_jail.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let by_country: Vec<(String, u64)> =
        s.by_country.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let top = s.top_ips(TOP_IPS);
    let footer = fill(
        m.digest_footer,
        &[
            ("id", &digest.id.to_string()),
            ("first", &digest.first_event_id.to_string()),
            ("last", &digest.last_event_id.to_string()),
        ],
    );
    let sample = |time: &str, ip: &str, jail: &str, server: &str| {
        fill(
            m.sample,
            &[
                ("time", time),
                ("ip", ip),
                ("jail", jail),
                ("server", server),
            ],
        )
    };

    let mut text = format!("{}\n", headline(&m.quoted(&digest.rule_name), &span));
    let mut section = |title: &str, rows: &[(String, u64)]| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(text, "\n{title}:");
        for (k, v) in rows {
            let _ = writeln!(text, "  {k}: {}", m.number(*v));
        }
    };
    section(m.by_server, &by_server);
    section(m.by_jail, &by_jail);
    section(m.by_country, &by_country);
    let top_rows: Vec<(String, u64)> = top.iter().map(|(ip, n)| ((*ip).to_owned(), *n)).collect();
    section(m.top_addresses, &top_rows);
    if !s.samples.is_empty() {
        let _ = writeln!(text, "\n{}:", m.first_bans);
        for x in &s.samples {
            let _ = writeln!(
                text,
                "  {}{}",
                sample(
                    &x.occurred_at.format(m.time).to_string(),
                    &x.ip,
                    &x.jail,
                    &name(&x.server_id)
                ),
                x.country
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(text, "\n{footer}");

    let table = |title: &str, rows: &[(String, u64)]| -> String {
        if rows.is_empty() {
            return String::new();
        }
        let mut out = format!("<h3>{}</h3><table>", escape(title));
        for (k, v) in rows {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                escape(k),
                escape(&m.number(*v))
            );
        }
        out.push_str("</table>");
        out
    };
    let mut html = format!(
        "<html><body><p>{}</p>",
        headline(
            &format!("<b>{}</b>", escape(&digest.rule_name)),
            &escape(&span)
        )
    );
    html.push_str(&table(m.by_server, &by_server));
    html.push_str(&table(m.by_jail, &by_jail));
    html.push_str(&table(m.by_country, &by_country));
    html.push_str(&table(m.top_addresses, &top_rows));
    if !s.samples.is_empty() {
        let _ = write!(html, "<h3>{}</h3><table>", escape(m.first_bans));
        for x in &s.samples {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                x.occurred_at.format(m.time),
                escape(&x.ip),
                escape(&x.jail),
                escape(&name(&x.server_id))
            );
        }
        html.push_str("</table>");
    }
    let _ = write!(html, "<p>{}</p></body></html>", escape(&footer));

    let mut chat = format!("*{}*: {bans} {span}", digest.rule_name)
        .trim_end()
        .to_owned();
    if !by_server.is_empty() {
        let list: Vec<String> = by_server.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = write!(chat, "\n{}: {}", m.chat_servers, list.join(", "));
    }
    if !by_jail.is_empty() {
        let list: Vec<String> = by_jail.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = write!(chat, "\n{}: {}", m.chat_jails, list.join(", "));
    }
    if !top.is_empty() {
        let list: Vec<String> = top.iter().map(|(ip, n)| format!("{ip} ({n})")).collect();
        let _ = write!(chat, "\n{}: {}", m.chat_top, list.join(", "));
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
        "language": language.as_str(),
        "subject": subject,
        "text": text,
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
fn render_notice(digest: &Digest, notice: &str, m: &Messages) -> Rendered {
    let title = &digest.rule_name;
    let footer = fill(m.notice_footer, &[("id", &digest.id.to_string())]);
    Rendered {
        subject: format!("[banhub] {title}"),
        text: format!("{notice}\n\n{footer}\n"),
        html: format!(
            "<html><body><p><b>{}</b></p><p>{}</p><p>{}</p></body></html>",
            escape(title),
            escape(notice),
            escape(&footer)
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
        let rendered = render(&digest, &HashMap::new(), Language::En);
        assert_eq!(rendered.subject, "[banhub] Sharing paused for <web-1>");
        assert!(rendered.text.starts_with("601 shared bans & more"));
        assert!(rendered.html.contains("&lt;web-1&gt;"));
        assert!(rendered.html.contains("601 shared bans &amp; more"));
        assert_eq!(rendered.json["type"], "banhub.alert.notice");
        assert_eq!(rendered.json["rule"]["id"], "sharing-paused");
    }
}
