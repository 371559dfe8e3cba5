//! The test e-mail (`POST /api/settings/test-email`): sends one short message through the saved
//! SMTP settings, or through SMTP settings an admin is about to save, to the given recipients or
//! the saved alert recipients, and reports the mail server's reply.

use std::time::Duration;

use lettre::Address;

use super::Alerts;
use super::mail::{self, Mail, MailError};
use crate::settings::model::parse_address;
use crate::settings::{FieldError, SettingsError, Smtp, SmtpDocument};

/// The subject of every test e-mail.
pub const TEST_SUBJECT: &str = "banhub test e-mail";

/// What to send a test e-mail with.
#[derive(Debug, Default)]
pub struct TestMailRequest {
    /// Recipients as typed; empty: `alerts.recipients` of the saved settings.
    pub to: Vec<String>,
    /// SMTP settings to try before saving them; `None`: the saved ones. A password left out is the
    /// saved one.
    pub smtp: Option<SmtpDocument>,
}

/// The mail server took the test e-mail.
#[derive(Debug, Clone)]
pub struct TestMailSent {
    /// The server's final reply, e.g. `250 2.0.0 Ok: queued as 4F2A`.
    pub reply: String,
    pub to: Vec<Address>,
    pub from: String,
    pub subject: String,
    pub took: Duration,
}

/// Why no test e-mail was sent, or why the mail server did not take it.
#[derive(Debug, thiserror::Error)]
pub enum TestMailError {
    /// The SMTP settings sent with the test break a rule, or the stored ones cannot be read.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("no SMTP server is configured: save one in the settings or send `smtp` with the test")]
    NoSmtp,
    /// A recipient that is not an e-mail address (the field names it, e.g. `to[1]`).
    #[error(transparent)]
    Recipient(FieldError),
    #[error("no recipient: give `to` or save alerts.recipients in the settings")]
    NoRecipient,
    /// The mail server could not be reached or refused the message.
    #[error(transparent)]
    Mail(#[from] MailError),
}

impl Alerts {
    /// Sends a test e-mail as `request` says and answers with the mail server's reply.
    #[tracing::instrument(skip_all, err(level = "info"))]
    pub async fn send_test_mail(
        &self,
        request: TestMailRequest,
    ) -> Result<TestMailSent, TestMailError> {
        let settings = &self.0.settings;
        let (smtp, password) = settings
            .smtp_for_test(request.smtp)?
            .ok_or(TestMailError::NoSmtp)?;
        let mut to = recipients(&request.to).map_err(TestMailError::Recipient)?;
        if to.is_empty() {
            to.clone_from(&settings.current().settings.alerts.recipients);
        }
        if to.is_empty() {
            return Err(TestMailError::NoRecipient);
        }
        let message = test_message(&smtp, to);
        let accepted = mail::send(&smtp, password.as_ref(), &message).await?;
        tracing::info!(reply = %accepted.reply, recipients = message.to.len(), "test e-mail accepted");
        Ok(TestMailSent {
            reply: accepted.reply,
            to: message.to,
            from: smtp.from.to_string(),
            subject: message.subject,
            took: accepted.took,
        })
    }
}

/// The recipients as typed, each checked; the first that is no address is the error.
fn recipients(raw: &[String]) -> Result<Vec<Address>, FieldError> {
    raw.iter()
        .enumerate()
        .map(|(i, raw)| parse_address(raw, &format!("to[{i}]")))
        .collect()
}

/// The test message to `to`, naming the SMTP server it went through.
fn test_message(smtp: &Smtp, to: Vec<Address>) -> Mail {
    let server = format!("{}:{}", smtp.host, smtp.port);
    Mail {
        to,
        subject: TEST_SUBJECT.to_owned(),
        text: format!(
            "This is a test e-mail from banhub (SMTP server {server}).\n\
             If it arrived, alert e-mails will reach this address.\n"
        ),
        html: Some(format!(
            "<html><body><p>This is a test e-mail from banhub (SMTP server {server}).</p>\
             <p>If it arrived, alert e-mails will reach this address.</p></body></html>"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::TlsMode;

    #[test]
    fn recipients_are_checked_and_the_bad_one_named() {
        let ok = recipients(&["a@example.org".to_owned(), "b@example.org".to_owned()])
            .expect("addresses");
        assert_eq!(ok.len(), 2);
        assert!(recipients(&[]).expect("none").is_empty());
        let bad = recipients(&["a@example.org".to_owned(), "not an address".to_owned()])
            .expect_err("refused");
        assert_eq!(bad.field, "to[1]");
    }

    #[test]
    fn the_test_message_names_its_smtp_server() {
        let smtp = Smtp {
            host: "mail.example.org".to_owned(),
            port: 587,
            tls: TlsMode::default(),
            username: None,
            from: "banhub <hub@example.org>".parse().expect("mailbox"),
            timeout: Duration::from_secs(10),
        };
        let to: Address = "ops@example.org".parse().expect("address");
        let message = test_message(&smtp, vec![to.clone()]);
        assert_eq!(message.to, [to]);
        assert_eq!(message.subject, TEST_SUBJECT);
        assert!(message.text.contains("SMTP server mail.example.org:587"));
        let html = message.html.expect("html part");
        assert!(html.contains("SMTP server mail.example.org:587"), "{html}");
    }
}
