//! Sending e-mail with lettre over SMTP (plain, STARTTLS or implicit TLS, rustls with ring), and
//! turning every way it can fail into an error an operator can act on: the name does not resolve,
//! nothing listens, TLS fails, the login is refused, the server refuses the message, or it is too
//! slow.

use std::time::{Duration, Instant};

use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use secrecy::{ExposeSecret, SecretString};

use crate::settings::{Smtp, TlsMode};

/// An e-mail to send: a plain-text body, and an HTML one when given.
#[derive(Debug, Clone)]
pub struct Mail {
    pub to: Vec<Address>,
    pub subject: String,
    pub text: String,
    pub html: Option<String>,
}

/// The server accepted the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The server's reply, e.g. `250 2.0.0 Ok: queued as 4F2A`.
    pub reply: String,
    pub took: Duration,
}

/// Why a message was not accepted, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailError {
    #[error(
        "the SMTP host name {host:?} does not resolve ({detail}); check smtp.host and the hub's DNS"
    )]
    Dns { host: String, detail: String },
    #[error(
        "nothing accepts connections at {host}:{port} ({detail}); check smtp.host and smtp.port, \
         and that the mail server runs and a firewall lets the hub through"
    )]
    Refused {
        host: String,
        port: u16,
        detail: String,
    },
    #[error(
        "the SMTP server at {host}:{port} did not answer within {secs} s; check smtp.host, \
         smtp.port and smtp.tls (port 465 needs `tls`, 587 and 25 `starttls` or `none`)"
    )]
    Timeout { host: String, port: u16, secs: u64 },
    #[error(
        "TLS with the SMTP server failed ({detail}); check smtp.tls (port 465 needs `tls`, 587 \
         `starttls`) and that the server's certificate is valid for {host}"
    )]
    Tls { host: String, detail: String },
    #[error("the SMTP server refused the login ({detail}); check smtp.username and smtp.password")]
    Auth { detail: String },
    #[error("the SMTP server refused the message: {reply}")]
    Rejected { reply: String, permanent: bool },
    #[error("the SMTP exchange failed: {detail}")]
    Other { detail: String },
    #[error("the message cannot be built: {0}")]
    Build(String),
}

impl MailError {
    /// A stable code for the API.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Dns { .. } => "smtp_dns",
            Self::Refused { .. } => "smtp_refused",
            Self::Timeout { .. } => "smtp_timeout",
            Self::Tls { .. } => "smtp_tls",
            Self::Auth { .. } => "smtp_auth",
            Self::Rejected { .. } => "smtp_rejected",
            Self::Other { .. } => "smtp_error",
            Self::Build(_) => "smtp_message",
        }
    }

    /// Whether trying again later may succeed (a server down or busy), rather than needing a
    /// settings change.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Dns { .. } | Self::Refused { .. } | Self::Timeout { .. } | Self::Other { .. } => {
                true
            }
            Self::Rejected { permanent, .. } => !permanent,
            Self::Tls { .. } | Self::Auth { .. } | Self::Build(_) => false,
        }
    }
}

/// Sends `mail` through `smtp`.
pub async fn send(
    smtp: &Smtp,
    password: Option<&SecretString>,
    mail: &Mail,
) -> Result<Accepted, MailError> {
    let started = Instant::now();
    let message = build(&smtp.from, mail)?;
    resolve(smtp).await?;
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host.as_str())
        .port(smtp.port)
        .timeout(Some(smtp.timeout));
    builder = match smtp.tls {
        TlsMode::None => builder.tls(Tls::None),
        TlsMode::Starttls => builder.tls(Tls::Required(tls_parameters(smtp)?)),
        TlsMode::Tls => builder.tls(Tls::Wrapper(tls_parameters(smtp)?)),
    };
    if let Some(user) = &smtp.username {
        let secret = password
            .map(|p| p.expose_secret().to_owned())
            .unwrap_or_default();
        builder = builder.credentials(Credentials::new(user.clone(), secret));
    }
    let transport = builder.build();
    // lettre bounds each read and write; this bounds the whole exchange.
    let whole = smtp.timeout.saturating_mul(4);
    let response = match tokio::time::timeout(whole, transport.send(message)).await {
        Err(_) => return Err(timeout(smtp)),
        Ok(result) => result.map_err(|e| classify(smtp, &e))?,
    };
    let lines: Vec<&str> = response.message().collect();
    Ok(Accepted {
        reply: format!("{} {}", response.code(), lines.join(" "))
            .trim()
            .to_owned(),
        took: started.elapsed(),
    })
}

fn build(from: &Mailbox, mail: &Mail) -> Result<Message, MailError> {
    let mut builder = Message::builder()
        .from(from.clone())
        .subject(mail.subject.clone());
    for to in &mail.to {
        builder = builder.to(Mailbox::new(None, to.clone()));
    }
    let result = match &mail.html {
        Some(html) => builder.multipart(MultiPart::alternative_plain_html(
            mail.text.clone(),
            html.clone(),
        )),
        None => builder.body(mail.text.clone()),
    };
    result.map_err(|e| MailError::Build(e.to_string()))
}

fn tls_parameters(smtp: &Smtp) -> Result<TlsParameters, MailError> {
    TlsParameters::new(smtp.host.clone()).map_err(|e| MailError::Tls {
        host: smtp.host.clone(),
        detail: e.to_string(),
    })
}

fn timeout(smtp: &Smtp) -> MailError {
    MailError::Timeout {
        host: smtp.host.clone(),
        port: smtp.port,
        secs: smtp.timeout.as_secs(),
    }
}

/// Resolves the host first, so a DNS failure is reported as one (lettre folds it into "connection
/// error").
async fn resolve(smtp: &Smtp) -> Result<(), MailError> {
    if smtp.host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let dns = |detail: String| MailError::Dns {
        host: smtp.host.clone(),
        detail,
    };
    match tokio::time::timeout(
        smtp.timeout,
        tokio::net::lookup_host((smtp.host.as_str(), smtp.port)),
    )
    .await
    {
        Err(_) => Err(dns("no answer in time".to_owned())),
        Ok(Err(e)) => Err(dns(e.to_string())),
        Ok(Ok(mut addrs)) => match addrs.next() {
            Some(_) => Ok(()),
            None => Err(dns("no address".to_owned())),
        },
    }
}

/// The causes of an error, outermost first, as text.
fn chain(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        out.push(s.to_string());
        source = s.source();
    }
    out
}

fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = s.source();
    }
    None
}

fn has_rustls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        source = s.source();
    }
    false
}

fn classify(smtp: &Smtp, e: &lettre::transport::smtp::Error) -> MailError {
    let causes = chain(e);
    let detail = causes.last().cloned().unwrap_or_default();
    let all = causes.join(": ").to_ascii_lowercase();
    let host = smtp.host.clone();
    if let Some(code) = e.status() {
        let reply = format!("{code} {}", causes.join(": "));
        let code = code.to_string();
        if ["530", "534", "535", "538"].contains(&code.as_str()) {
            return MailError::Auth { detail: reply };
        }
        return MailError::Rejected {
            reply,
            permanent: e.is_permanent(),
        };
    }
    if e.is_timeout() || io_kind(e) == Some(std::io::ErrorKind::TimedOut) {
        return timeout(smtp);
    }
    if e.is_tls()
        || has_rustls(e)
        || all.contains("starttls")
        || all.contains("certificate")
        || all.contains("handshake")
        || all.contains("corrupt message")
        || all.contains("tls")
    {
        return MailError::Tls { host, detail };
    }
    if all.contains("authentication") || all.contains("mechanism") {
        return MailError::Auth { detail };
    }
    match io_kind(e) {
        Some(
            std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::HostUnreachable
            | std::io::ErrorKind::NetworkUnreachable
            | std::io::ErrorKind::AddrNotAvailable,
        ) => MailError::Refused {
            host,
            port: smtp.port,
            detail,
        },
        _ if all.contains("refused") => MailError::Refused {
            host,
            port: smtp.port,
            detail,
        },
        _ => MailError::Other {
            detail: causes.join(": "),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smtp(port: u16, tls: TlsMode) -> Smtp {
        Smtp {
            host: "127.0.0.1".to_owned(),
            port,
            tls,
            username: None,
            from: "banhub <hub@example.test>".parse().expect("mailbox"),
            timeout: Duration::from_secs(2),
        }
    }

    fn mail() -> Mail {
        Mail {
            to: vec!["ops@example.test".parse().expect("address")],
            subject: "s".to_owned(),
            text: "t".to_owned(),
            html: Some("<p>t</p>".to_owned()),
        }
    }

    #[tokio::test]
    async fn nothing_listening_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let err = send(&smtp(port, TlsMode::None), None, &mail())
            .await
            .expect_err("nothing listens");
        assert_eq!(err.code(), "smtp_refused", "{err}");
        assert!(err.is_transient());
    }

    #[tokio::test]
    async fn an_unknown_host_is_a_dns_error() {
        let mut s = smtp(25, TlsMode::None);
        s.host = "no-such-host.invalid".to_owned();
        let err = send(&s, None, &mail()).await.expect_err("no such host");
        assert_eq!(err.code(), "smtp_dns", "{err}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // Accepts and never says a word.
        let keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let mut s = smtp(port, TlsMode::None);
        s.timeout = Duration::from_millis(300);
        let err = send(&s, None, &mail()).await.expect_err("silent");
        assert_eq!(err.code(), "smtp_timeout", "{err}");
        keep.abort();
    }

    #[tokio::test]
    async fn implicit_tls_against_a_plain_server_is_a_tls_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut socket, _)) = listener.accept().await {
                let _ = socket.write_all(b"220 plain.example ESMTP\r\n").await;
            }
        });
        let err = send(&smtp(port, TlsMode::Tls), None, &mail())
            .await
            .expect_err("not TLS");
        assert_eq!(err.code(), "smtp_tls", "{err}");
        server.abort();
    }
}
