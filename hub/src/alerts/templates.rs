//! The words of alert messages in every language of `alerts.language`: one table holding each
//! text with its translations side by side, from which each language's [`Messages`] is taken,
//! with `{name}` placeholders, the quotes around a rule's name, and how dates and counts are
//! written there.

use crate::settings::model::Language;

/// Every text an alert message is made of, in one language.
#[derive(Debug, Clone, Copy)]
pub struct Messages {
    /// `{n} ban` and `{n} bans`.
    pub bans: (&'static str, &'static str),
    /// `{n} server` and `{n} servers`.
    pub servers: (&'static str, &'static str),
    /// The subject after `[banhub] `: `{rule}`, `{bans}`, `{servers}`.
    pub subject: &'static str,
    /// The first line: `{rule}` (quoted), `{bans}`, `{span}`.
    pub matched: &'static str,
    /// When the bans happened: `{first}`, `{last}`.
    pub span: &'static str,
    pub by_server: &'static str,
    pub by_jail: &'static str,
    pub by_country: &'static str,
    pub top_addresses: &'static str,
    pub first_bans: &'static str,
    /// One sampled ban: `{time}`, `{ip}`, `{jail}`, `{server}`.
    pub sample: &'static str,
    /// The last line of a digest: `{id}`, `{first}`, `{last}` (event ids).
    pub digest_footer: &'static str,
    /// The last line of a notice: `{id}`.
    pub notice_footer: &'static str,
    /// The labels of a chat message's lines.
    pub chat_servers: &'static str,
    pub chat_jails: &'static str,
    pub chat_top: &'static str,
    /// The rule name of a test alert.
    pub test_rule: &'static str,
    /// What a test alert says about itself: `{channel}`.
    pub test_note: &'static str,
    /// Opening and closing quotes around a rule's name in text.
    pub quotes: (&'static str, &'static str),
    /// A date and time (chrono's format), and a time alone.
    pub date_time: &'static str,
    pub time: &'static str,
    /// What groups the thousands of a count.
    pub thousands: &'static str,
}

/// Every text of [`Messages`] in every language, one row per text with its translations side by
/// side in the order of [`Language::ALL`]: en, de, fr, es, it, ja, zh.
struct Table {
    bans: [(&'static str, &'static str); LANGUAGES],
    servers: [(&'static str, &'static str); LANGUAGES],
    subject: [&'static str; LANGUAGES],
    matched: [&'static str; LANGUAGES],
    span: [&'static str; LANGUAGES],
    by_server: [&'static str; LANGUAGES],
    by_jail: [&'static str; LANGUAGES],
    by_country: [&'static str; LANGUAGES],
    top_addresses: [&'static str; LANGUAGES],
    first_bans: [&'static str; LANGUAGES],
    sample: [&'static str; LANGUAGES],
    digest_footer: [&'static str; LANGUAGES],
    notice_footer: [&'static str; LANGUAGES],
    chat_servers: [&'static str; LANGUAGES],
    chat_jails: [&'static str; LANGUAGES],
    chat_top: [&'static str; LANGUAGES],
    test_rule: [&'static str; LANGUAGES],
    test_note: [&'static str; LANGUAGES],
    quotes: [(&'static str, &'static str); LANGUAGES],
    date_time: [&'static str; LANGUAGES],
    time: [&'static str; LANGUAGES],
    thousands: [&'static str; LANGUAGES],
}

const LANGUAGES: usize = Language::ALL.len();

const TABLE: Table = Table {
    bans: [
        ("{n} ban", "{n} bans"),
        ("{n} Sperre", "{n} Sperren"),
        ("{n} bannissement", "{n} bannissements"),
        ("{n} bloqueo", "{n} bloqueos"),
        ("{n} blocco", "{n} blocchi"),
        ("{n} 件のBAN", "{n} 件のBAN"),
        ("{n} 次封禁", "{n} 次封禁"),
    ],
    servers: [
        ("{n} server", "{n} servers"),
        ("{n} Server", "{n} Servern"),
        ("{n} serveur", "{n} serveurs"),
        ("{n} servidor", "{n} servidores"),
        ("{n} server", "{n} server"),
        ("{n} 台のサーバー", "{n} 台のサーバー"),
        ("{n} 台服务器", "{n} 台服务器"),
    ],
    subject: [
        "{rule}: {bans} on {servers}",
        "{rule}: {bans} auf {servers}",
        "{rule} : {bans} sur {servers}",
        "{rule}: {bans} en {servers}",
        "{rule}: {bans} su {servers}",
        "{rule}: {servers}で{bans}",
        "{rule}:{servers}上共{bans}",
    ],
    matched: [
        "Alert rule {rule} matched {bans} {span}.",
        "Die Alarmregel {rule} hat {span} {bans} erfasst.",
        "La règle d'alerte {rule} a relevé {bans} {span}.",
        "La regla de alerta {rule} detectó {bans} {span}.",
        "La regola di avviso {rule} ha rilevato {bans} {span}.",
        "アラートルール{rule}が{span}に{bans}を検出しました。",
        "告警规则{rule}在{span}匹配了{bans}。",
    ],
    span: [
        "between {first} and {last} (UTC)",
        "zwischen {first} und {last} (UTC)",
        "entre le {first} et le {last} (UTC)",
        "entre el {first} y el {last} (UTC)",
        "tra il {first} e il {last} (UTC)",
        "{first}から{last}まで(UTC)",
        "{first} 至 {last}(UTC)",
    ],
    by_server: [
        "By server",
        "Nach Server",
        "Par serveur",
        "Por servidor",
        "Per server",
        "サーバー別",
        "按服务器",
    ],
    by_jail: [
        "By jail",
        "Nach Jail",
        "Par jail",
        "Por jail",
        "Per jail",
        "jail別",
        "按 jail",
    ],
    by_country: [
        "By country",
        "Nach Land",
        "Par pays",
        "Por país",
        "Per paese",
        "国別",
        "按国家",
    ],
    top_addresses: [
        "Top addresses",
        "Häufigste Adressen",
        "Adresses les plus fréquentes",
        "Direcciones más frecuentes",
        "Indirizzi più frequenti",
        "上位のアドレス",
        "最常见的地址",
    ],
    first_bans: [
        "First bans",
        "Erste Sperren",
        "Premiers bannissements",
        "Primeros bloqueos",
        "Primi blocchi",
        "最初のBAN",
        "最早的封禁",
    ],
    sample: [
        "{time} {ip} banned in {jail} on {server}",
        "{time} {ip} gesperrt in {jail} auf {server}",
        "{time} {ip} banni dans {jail} sur {server}",
        "{time} {ip} bloqueada en {jail} en {server}",
        "{time} {ip} bloccato in {jail} su {server}",
        "{time} {ip} を {server} の {jail} でBAN",
        "{time} {ip} 在 {server} 的 {jail} 中被封禁",
    ],
    digest_footer: [
        "Digest {id} (events {first} to {last}). Sent by banhub.",
        "Sammelmeldung {id} (Ereignisse {first} bis {last}). Gesendet von banhub.",
        "Résumé {id} (événements {first} à {last}). Envoyé par banhub.",
        "Resumen {id} (eventos {first} a {last}). Enviado por banhub.",
        "Riepilogo {id} (eventi da {first} a {last}). Inviato da banhub.",
        "ダイジェスト {id}(イベント {first}〜{last})。banhub から送信。",
        "摘要 {id}(事件 {first} 至 {last})。由 banhub 发送。",
    ],
    notice_footer: [
        "Notice {id}. Sent by banhub.",
        "Hinweis {id}. Gesendet von banhub.",
        "Avis {id}. Envoyé par banhub.",
        "Aviso {id}. Enviado por banhub.",
        "Avviso {id}. Inviato da banhub.",
        "お知らせ {id}。banhub から送信。",
        "通知 {id}。由 banhub 发送。",
    ],
    chat_servers: [
        "servers",
        "Server",
        "serveurs",
        "servidores",
        "server",
        "サーバー",
        "服务器",
    ],
    chat_jails: ["jails", "Jails", "jails", "jails", "jail", "jail", "jail"],
    chat_top: [
        "top",
        "häufigste",
        "principales",
        "principales",
        "principali",
        "上位",
        "最多",
    ],
    test_rule: [
        "Test alert",
        "Testalarm",
        "Alerte de test",
        "Alerta de prueba",
        "Avviso di prova",
        "テストアラート",
        "测试告警",
    ],
    test_note: [
        "This is a test alert from banhub sent through {channel}. If it arrived, alerts reach this channel.",
        "Dies ist ein Testalarm von banhub über {channel}. Ist er angekommen, erreichen Alarme diesen Kanal.",
        "Ceci est une alerte de test de banhub envoyée par {channel}. Si elle est arrivée, les alertes atteignent ce canal.",
        "Esta es una alerta de prueba de banhub enviada por {channel}. Si ha llegado, las alertas llegan a este canal.",
        "Questo è un avviso di prova di banhub inviato tramite {channel}. Se è arrivato, gli avvisi raggiungono questo canale.",
        "これは {channel} 経由で送信された banhub のテストアラートです。届いていれば、アラートはこのチャネルに届きます。",
        "这是 banhub 通过 {channel} 发送的测试告警。如果收到了它,告警就能送达此渠道。",
    ],
    quotes: [
        ("\"", "\""),
        ("„", "“"),
        ("« ", " »"),
        ("«", "»"),
        ("«", "»"),
        ("「", "」"),
        ("“", "”"),
    ],
    date_time: [
        "%Y-%m-%d %H:%M:%S",
        "%d.%m.%Y %H:%M:%S",
        "%d/%m/%Y %H:%M:%S",
        "%d/%m/%Y %H:%M:%S",
        "%d/%m/%Y %H:%M:%S",
        "%Y/%m/%d %H:%M:%S",
        "%Y年%m月%d日 %H:%M:%S",
    ],
    time: [
        "%H:%M:%S", "%H:%M:%S", "%H:%M:%S", "%H:%M:%S", "%H:%M:%S", "%H:%M:%S", "%H:%M:%S",
    ],
    thousands: [",", ".", "\u{202f}", ".", ".", ",", ","],
};

/// The column of one language.
const fn column(i: usize) -> Messages {
    Messages {
        bans: TABLE.bans[i],
        servers: TABLE.servers[i],
        subject: TABLE.subject[i],
        matched: TABLE.matched[i],
        span: TABLE.span[i],
        by_server: TABLE.by_server[i],
        by_jail: TABLE.by_jail[i],
        by_country: TABLE.by_country[i],
        top_addresses: TABLE.top_addresses[i],
        first_bans: TABLE.first_bans[i],
        sample: TABLE.sample[i],
        digest_footer: TABLE.digest_footer[i],
        notice_footer: TABLE.notice_footer[i],
        chat_servers: TABLE.chat_servers[i],
        chat_jails: TABLE.chat_jails[i],
        chat_top: TABLE.chat_top[i],
        test_rule: TABLE.test_rule[i],
        test_note: TABLE.test_note[i],
        quotes: TABLE.quotes[i],
        date_time: TABLE.date_time[i],
        time: TABLE.time[i],
        thousands: TABLE.thousands[i],
    }
}

/// The messages of every language, in the order of [`Language::ALL`].
const BY_LANGUAGE: [Messages; LANGUAGES] = [
    column(0),
    column(1),
    column(2),
    column(3),
    column(4),
    column(5),
    column(6),
];

/// The messages of `language`.
pub fn messages(language: Language) -> &'static Messages {
    let i = Language::ALL
        .iter()
        .position(|l| *l == language)
        .unwrap_or(0);
    &BY_LANGUAGE[i]
}

/// `template` with each `{name}` of `values` replaced; placeholders without a value stay.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

impl Messages {
    /// `n` with its thousands grouped.
    pub fn number(&self, n: u64) -> String {
        let digits = n.to_string();
        let mut out = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push_str(self.thousands);
            }
            out.push(c);
        }
        out
    }

    /// `n` bans or servers: the singular or plural form of `forms`.
    pub fn count(&self, n: u64, forms: (&str, &str)) -> String {
        let form = if n == 1 { forms.0 } else { forms.1 };
        fill(form, &[("n", &self.number(n))])
    }

    /// `name` between this language's quotes.
    pub fn quoted(&self, name: &str) -> String {
        format!("{}{name}{}", self.quotes.0, self.quotes.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each placeholder a template must hold.
    fn placeholders(m: &Messages) -> Vec<(&'static str, &'static [&'static str])> {
        vec![
            (m.bans.0, &["{n}"]),
            (m.bans.1, &["{n}"]),
            (m.servers.0, &["{n}"]),
            (m.servers.1, &["{n}"]),
            (m.subject, &["{rule}", "{bans}", "{servers}"]),
            (m.matched, &["{rule}", "{bans}", "{span}"]),
            (m.span, &["{first}", "{last}"]),
            (m.sample, &["{time}", "{ip}", "{jail}", "{server}"]),
            (m.digest_footer, &["{id}", "{first}", "{last}"]),
            (m.notice_footer, &["{id}"]),
            (m.test_note, &["{channel}"]),
        ]
    }

    #[test]
    fn every_language_has_every_template_with_its_placeholders() {
        for language in Language::ALL {
            let m = messages(language);
            for (template, needed) in placeholders(m) {
                for p in needed {
                    assert!(
                        template.contains(p),
                        "{}: {template:?} lacks {p}",
                        language.as_str()
                    );
                }
            }
            for text in [
                m.by_server,
                m.by_jail,
                m.by_country,
                m.top_addresses,
                m.first_bans,
                m.chat_servers,
                m.chat_jails,
                m.chat_top,
                m.test_rule,
                m.date_time,
                m.time,
                m.thousands,
            ] {
                assert!(!text.is_empty(), "{}: an empty text", language.as_str());
            }
            let when = chrono::DateTime::from_timestamp(1_790_000_000, 0).expect("a time");
            assert!(
                when.format(m.date_time).to_string().contains("2026"),
                "{}",
                language.as_str()
            );
        }
    }

    #[test]
    fn languages_other_than_english_are_translated() {
        let english = messages(Language::En);
        for language in Language::ALL {
            if language == Language::En {
                continue;
            }
            let m = messages(language);
            assert_ne!(m.subject, english.subject, "{}", language.as_str());
            assert_ne!(m.test_rule, english.test_rule, "{}", language.as_str());
            assert_ne!(m.by_server, english.by_server, "{}", language.as_str());
        }
    }

    #[test]
    fn counts_are_grouped_and_take_their_form() {
        let de = messages(Language::De);
        assert_eq!(de.count(1, de.bans), "1 Sperre");
        assert_eq!(de.count(12_345, de.bans), "12.345 Sperren");
        let en = messages(Language::En);
        assert_eq!(en.count(3, en.bans), "3 bans");
        assert_eq!(en.count(1_000_000, en.servers), "1,000,000 servers");
        assert_eq!(en.number(999), "999");
    }
}
