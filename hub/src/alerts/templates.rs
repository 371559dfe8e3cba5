//! The words of alert messages in every language of `alerts.language`: one [`Messages`] per
//! language, with `{name}` placeholders, the quotes around a rule's name, and how dates and counts
//! are written there.

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

const EN: Messages = Messages {
    bans: ("{n} ban", "{n} bans"),
    servers: ("{n} server", "{n} servers"),
    subject: "{rule}: {bans} on {servers}",
    matched: "Alert rule {rule} matched {bans} {span}.",
    span: "between {first} and {last} (UTC)",
    by_server: "By server",
    by_jail: "By jail",
    by_country: "By country",
    top_addresses: "Top addresses",
    first_bans: "First bans",
    sample: "{time} {ip} banned in {jail} on {server}",
    digest_footer: "Digest {id} (events {first} to {last}). Sent by banhub.",
    notice_footer: "Notice {id}. Sent by banhub.",
    chat_servers: "servers",
    chat_jails: "jails",
    chat_top: "top",
    test_rule: "Test alert",
    test_note: "This is a test alert from banhub sent through {channel}. If it arrived, alerts reach this channel.",
    quotes: ("\"", "\""),
    date_time: "%Y-%m-%d %H:%M:%S",
    time: "%H:%M:%S",
    thousands: ",",
};

const DE: Messages = Messages {
    bans: ("{n} Sperre", "{n} Sperren"),
    servers: ("{n} Server", "{n} Servern"),
    subject: "{rule}: {bans} auf {servers}",
    matched: "Die Alarmregel {rule} hat {span} {bans} erfasst.",
    span: "zwischen {first} und {last} (UTC)",
    by_server: "Nach Server",
    by_jail: "Nach Jail",
    by_country: "Nach Land",
    top_addresses: "Häufigste Adressen",
    first_bans: "Erste Sperren",
    sample: "{time} {ip} gesperrt in {jail} auf {server}",
    digest_footer: "Sammelmeldung {id} (Ereignisse {first} bis {last}). Gesendet von banhub.",
    notice_footer: "Hinweis {id}. Gesendet von banhub.",
    chat_servers: "Server",
    chat_jails: "Jails",
    chat_top: "häufigste",
    test_rule: "Testalarm",
    test_note: "Dies ist ein Testalarm von banhub über {channel}. Ist er angekommen, erreichen Alarme diesen Kanal.",
    quotes: ("„", "“"),
    date_time: "%d.%m.%Y %H:%M:%S",
    time: "%H:%M:%S",
    thousands: ".",
};

const FR: Messages = Messages {
    bans: ("{n} bannissement", "{n} bannissements"),
    servers: ("{n} serveur", "{n} serveurs"),
    subject: "{rule} : {bans} sur {servers}",
    matched: "La règle d'alerte {rule} a relevé {bans} {span}.",
    span: "entre le {first} et le {last} (UTC)",
    by_server: "Par serveur",
    by_jail: "Par jail",
    by_country: "Par pays",
    top_addresses: "Adresses les plus fréquentes",
    first_bans: "Premiers bannissements",
    sample: "{time} {ip} banni dans {jail} sur {server}",
    digest_footer: "Résumé {id} (événements {first} à {last}). Envoyé par banhub.",
    notice_footer: "Avis {id}. Envoyé par banhub.",
    chat_servers: "serveurs",
    chat_jails: "jails",
    chat_top: "principales",
    test_rule: "Alerte de test",
    test_note: "Ceci est une alerte de test de banhub envoyée par {channel}. Si elle est arrivée, les alertes atteignent ce canal.",
    quotes: ("« ", " »"),
    date_time: "%d/%m/%Y %H:%M:%S",
    time: "%H:%M:%S",
    thousands: "\u{202f}",
};

const ES: Messages = Messages {
    bans: ("{n} bloqueo", "{n} bloqueos"),
    servers: ("{n} servidor", "{n} servidores"),
    subject: "{rule}: {bans} en {servers}",
    matched: "La regla de alerta {rule} detectó {bans} {span}.",
    span: "entre el {first} y el {last} (UTC)",
    by_server: "Por servidor",
    by_jail: "Por jail",
    by_country: "Por país",
    top_addresses: "Direcciones más frecuentes",
    first_bans: "Primeros bloqueos",
    sample: "{time} {ip} bloqueada en {jail} en {server}",
    digest_footer: "Resumen {id} (eventos {first} a {last}). Enviado por banhub.",
    notice_footer: "Aviso {id}. Enviado por banhub.",
    chat_servers: "servidores",
    chat_jails: "jails",
    chat_top: "principales",
    test_rule: "Alerta de prueba",
    test_note: "Esta es una alerta de prueba de banhub enviada por {channel}. Si ha llegado, las alertas llegan a este canal.",
    quotes: ("«", "»"),
    date_time: "%d/%m/%Y %H:%M:%S",
    time: "%H:%M:%S",
    thousands: ".",
};

const IT: Messages = Messages {
    bans: ("{n} blocco", "{n} blocchi"),
    servers: ("{n} server", "{n} server"),
    subject: "{rule}: {bans} su {servers}",
    matched: "La regola di avviso {rule} ha rilevato {bans} {span}.",
    span: "tra il {first} e il {last} (UTC)",
    by_server: "Per server",
    by_jail: "Per jail",
    by_country: "Per paese",
    top_addresses: "Indirizzi più frequenti",
    first_bans: "Primi blocchi",
    sample: "{time} {ip} bloccato in {jail} su {server}",
    digest_footer: "Riepilogo {id} (eventi da {first} a {last}). Inviato da banhub.",
    notice_footer: "Avviso {id}. Inviato da banhub.",
    chat_servers: "server",
    chat_jails: "jail",
    chat_top: "principali",
    test_rule: "Avviso di prova",
    test_note: "Questo è un avviso di prova di banhub inviato tramite {channel}. Se è arrivato, gli avvisi raggiungono questo canale.",
    quotes: ("«", "»"),
    date_time: "%d/%m/%Y %H:%M:%S",
    time: "%H:%M:%S",
    thousands: ".",
};

const JA: Messages = Messages {
    bans: ("{n} 件のBAN", "{n} 件のBAN"),
    servers: ("{n} 台のサーバー", "{n} 台のサーバー"),
    subject: "{rule}: {servers}で{bans}",
    matched: "アラートルール{rule}が{span}に{bans}を検出しました。",
    span: "{first}から{last}まで(UTC)",
    by_server: "サーバー別",
    by_jail: "jail別",
    by_country: "国別",
    top_addresses: "上位のアドレス",
    first_bans: "最初のBAN",
    sample: "{time} {ip} を {server} の {jail} でBAN",
    digest_footer: "ダイジェスト {id}(イベント {first}〜{last})。banhub から送信。",
    notice_footer: "お知らせ {id}。banhub から送信。",
    chat_servers: "サーバー",
    chat_jails: "jail",
    chat_top: "上位",
    test_rule: "テストアラート",
    test_note: "これは {channel} 経由で送信された banhub のテストアラートです。届いていれば、アラートはこのチャネルに届きます。",
    quotes: ("「", "」"),
    date_time: "%Y/%m/%d %H:%M:%S",
    time: "%H:%M:%S",
    thousands: ",",
};

const ZH: Messages = Messages {
    bans: ("{n} 次封禁", "{n} 次封禁"),
    servers: ("{n} 台服务器", "{n} 台服务器"),
    subject: "{rule}:{servers}上共{bans}",
    matched: "告警规则{rule}在{span}匹配了{bans}。",
    span: "{first} 至 {last}(UTC)",
    by_server: "按服务器",
    by_jail: "按 jail",
    by_country: "按国家",
    top_addresses: "最常见的地址",
    first_bans: "最早的封禁",
    sample: "{time} {ip} 在 {server} 的 {jail} 中被封禁",
    digest_footer: "摘要 {id}(事件 {first} 至 {last})。由 banhub 发送。",
    notice_footer: "通知 {id}。由 banhub 发送。",
    chat_servers: "服务器",
    chat_jails: "jail",
    chat_top: "最多",
    test_rule: "测试告警",
    test_note: "这是 banhub 通过 {channel} 发送的测试告警。如果收到了它,告警就能送达此渠道。",
    quotes: ("“", "”"),
    date_time: "%Y年%m月%d日 %H:%M:%S",
    time: "%H:%M:%S",
    thousands: ",",
};

/// The messages of `language`.
pub fn messages(language: Language) -> &'static Messages {
    match language {
        Language::En => &EN,
        Language::De => &DE,
        Language::Fr => &FR,
        Language::Es => &ES,
        Language::It => &IT,
        Language::Ja => &JA,
        Language::Zh => &ZH,
    }
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
        for language in Language::ALL {
            if language == Language::En {
                continue;
            }
            let m = messages(language);
            assert_ne!(m.subject, EN.subject, "{}", language.as_str());
            assert_ne!(m.test_rule, EN.test_rule, "{}", language.as_str());
            assert_ne!(m.by_server, EN.by_server, "{}", language.as_str());
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
