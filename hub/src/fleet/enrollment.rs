//! `Enrollment.Enroll`: an agent trades a one-time token and a CSR for its client certificate.

use banhub_proto::v1::enrollment_server::Enrollment;
use banhub_proto::v1::{EnrollRequest, EnrollResponse};
use tonic::{Request, Response, Status};

use super::Fleet;
use crate::domain::AgentFacts;
use crate::store::EnrollOutcome;

/// The tonic service; a thin shell around [`Fleet`].
#[derive(Debug, Clone)]
pub struct EnrollmentService {
    pub(super) fleet: Fleet,
}

fn bounded<'a>(value: &'a str, field: &str, max: usize) -> Result<&'a str, Status> {
    if value.len() > max || value.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!(
            "{field} is longer than {max} bytes or holds control characters"
        )));
    }
    Ok(value)
}

#[tonic::async_trait]
impl Enrollment for EnrollmentService {
    async fn enroll(
        &self,
        request: Request<EnrollRequest>,
    ) -> Result<Response<EnrollResponse>, Status> {
        let address = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let req = request.into_inner();
        let token_id = bounded(&req.token_id, "token_id", 64)?;
        let secret = bounded(&req.secret, "secret", 128)?;
        let facts = AgentFacts {
            agent_version: bounded(&req.agent_version, "agent_version", 64)?.to_owned(),
            fail2ban_version: String::new(),
            hostname: bounded(&req.hostname, "hostname", 255)?.to_owned(),
            address,
        };
        if req.csr_pem.len() > 16 * 1024 {
            return Err(Status::invalid_argument(
                "the certificate signing request is larger than 16 KiB",
            ));
        }
        let fleet = &self.fleet;
        let days = fleet.certificate_days();
        let ca = fleet.ca();
        let (outcome, superseded) = fleet
            .store()
            .enroll(token_id, secret, &facts, |server, agent| {
                ca.sign_agent_csr(&req.csr_pem, agent, server.name.as_str(), days)
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "enrollment failed in the store");
                Status::internal("the hub could not record the enrollment; see the hub's log")
            })?;
        match outcome {
            EnrollOutcome::Enrolled(server, cert, agent) => {
                fleet.revoke_everywhere(&superseded).await;
                // An older agent of this server is cut off, on whichever replica holds it: one
                // agent per server.
                fleet
                    .cut_off(
                        server.id,
                        Some(agent),
                        "another agent enrolled for this server",
                    )
                    .await;
                fleet.metrics().enrollments.inc();
                tracing::info!(server_id = %server.id, server = %server.name, %agent, hostname = %facts.hostname, "agent enrolled");
                Ok(Response::new(EnrollResponse {
                    agent_id: agent.to_string(),
                    server_id: server.id.to_string(),
                    server_name: server.name.to_string(),
                    certificate_pem: cert.pem,
                    ca_pem: ca.cert_pem().to_owned(),
                }))
            }
            EnrollOutcome::Refused(refusal) => {
                tracing::warn!(token_id, reason = %refusal, address = %facts.address, "enrollment refused");
                Err(Status::permission_denied(refusal.to_string()))
            }
            EnrollOutcome::SignFailed(e) => Err(Status::invalid_argument(e.to_string())),
        }
    }
}
