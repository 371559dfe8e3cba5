//! OpenID Connect login with the `openidconnect` crate: discovery (cached, refreshed hourly and when
//! an ID token is signed with an unknown key), the authorization code flow with PKCE, `state` and `nonce`, the ID token's
//! verification, claims from the ID token and the userinfo endpoint, role mapping, and the
//! provider's end-session URL for logout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreTokenResponse};
use openidconnect::url::Url;
use openidconnect::{
    AccessTokenHash, AdditionalClaims, AuthorizationCode, ClaimsVerificationError, ClientId,
    ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, ProviderMetadataWithLogout,
    RedirectUrl, Scope, SubjectIdentifier, TokenResponse, UserInfoClaims,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::AuthError;
use crate::config::auth::{OidcConfig, RoleMap};
use crate::domain::auth::Role;

/// How long a discovery document (with its signing keys) is used before it is fetched again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// Bound on every request to the provider.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

type DiscoveredClient = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Every claim the provider sent besides the standard ones.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OtherClaims {
    #[serde(flatten)]
    rest: Map<String, Value>,
}

impl AdditionalClaims for OtherClaims {}

struct Provider {
    client: DiscoveredClient,
    end_session: Option<Url>,
    fetched: Instant,
}

/// The provider, discovered on first use.
pub struct Oidc {
    config: OidcConfig,
    http: openidconnect::reqwest::Client,
    provider: tokio::sync::Mutex<Option<Arc<Provider>>>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer_url", &self.config.issuer_url)
            .field("client_id", &self.config.client_id)
            .finish_non_exhaustive()
    }
}

/// A login about to be sent to the provider.
#[derive(Debug)]
pub struct Begin {
    pub url: Url,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// Why a login was refused, and whether the provider's keys may have changed.
enum Refusal {
    /// The ID token's signature did not verify with the keys the hub has.
    UnknownKey(AuthError),
    Other(AuthError),
}

impl From<AuthError> for Refusal {
    fn from(e: AuthError) -> Self {
        Self::Other(e)
    }
}

impl Refusal {
    fn into_error(self) -> AuthError {
        match self {
            Self::UnknownKey(e) | Self::Other(e) => e,
        }
    }
}

/// Who the provider says logged in.
#[derive(Debug)]
pub struct Identity {
    pub subject: String,
    pub name: String,
    pub email: Option<String>,
    /// The ID token and userinfo claims together (userinfo wins).
    pub claims: Map<String, Value>,
    /// The raw ID token, for the logout's `id_token_hint`.
    pub id_token: String,
}

impl Oidc {
    pub fn new(config: &OidcConfig) -> Result<Self, AuthError> {
        let http = openidconnect::reqwest::ClientBuilder::new()
            // Following redirects would let a provider's answer send the hub anywhere (SSRF).
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .map_err(|e| AuthError::Internal(format!("building the OIDC HTTP client: {e}")))?;
        Ok(Self {
            config: config.clone(),
            http,
            provider: tokio::sync::Mutex::new(None),
        })
    }

    async fn provider(&self) -> Result<Arc<Provider>, AuthError> {
        let mut cached = self.provider.lock().await;
        if let Some(provider) = cached.as_ref()
            && provider.fetched.elapsed() < DISCOVERY_TTL
        {
            return Ok(provider.clone());
        }
        let unavailable = |e: String| {
            AuthError::ProviderUnavailable(format!(
                "cannot use the OpenID provider {}: {e}",
                self.config.issuer_url
            ))
        };
        let issuer = IssuerUrl::new(self.config.issuer_url.clone())
            .map_err(|e| unavailable(e.to_string()))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &self.http)
            .await
            .map_err(|e| unavailable(error_chain(&e)))?;
        let end_session = metadata
            .additional_metadata()
            .end_session_endpoint
            .as_ref()
            .map(|u| u.url().clone());
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            self.config
                .client_secret
                .as_ref()
                .map(|s| ClientSecret::new(s.expose().to_owned())),
        );
        let provider = Arc::new(Provider {
            client,
            end_session,
            fetched: Instant::now(),
        });
        *cached = Some(provider.clone());
        tracing::info!(issuer = %self.config.issuer_url, "OpenID provider discovered");
        Ok(provider)
    }

    /// Forgets the discovery document, so that the next login fetches it (and the signing keys)
    /// again: a signature that does not verify may be a key rotation.
    async fn forget(&self) {
        *self.provider.lock().await = None;
    }

    /// The provider's authorization URL for a new login, with fresh `state`, `nonce` and PKCE
    /// verifier.
    pub async fn begin(&self, redirect_url: &str) -> Result<Begin, AuthError> {
        let provider = self.provider().await?;
        let client = provider.client.clone().set_redirect_uri(
            RedirectUrl::new(redirect_url.to_owned())
                .map_err(|e| AuthError::Internal(format!("redirect URL {redirect_url}: {e}")))?,
        );
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in self.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok(Begin {
            url,
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        })
    }

    /// Redeems the code: token request with the PKCE verifier, ID token verification (signature,
    /// issuer, audience, expiry, nonce, access token hash), then the userinfo endpoint. An ID token
    /// signed with a key the hub does not know (the provider rotated its keys) is verified once
    /// more with freshly fetched keys.
    pub async fn finish(
        &self,
        code: &str,
        redirect_url: &str,
        nonce: &str,
        pkce_verifier: &str,
    ) -> Result<Identity, AuthError> {
        let provider = self.provider().await?;
        let client = with_redirect(&provider.client, redirect_url)?;
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| {
                AuthError::ProviderUnavailable(format!("the provider has no token endpoint: {e}"))
            })?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|e| {
                failed(
                    "the provider refused the authorization code",
                    error_chain(&e),
                )
            })?;
        let (client, verified) = match verify(&client, &token, nonce) {
            Ok(verified) => (client, verified),
            Err(Refusal::UnknownKey(e)) => {
                // Only a signature refetches the keys: other refusals (a forged nonce, a used
                // code) are the caller's doing and must not make the hub call the provider.
                tracing::info!(error = %e, "ID token signature did not verify; fetching the provider's keys again");
                self.forget().await;
                let provider = self.provider().await?;
                let client = with_redirect(&provider.client, redirect_url)?;
                let verified = verify(&client, &token, nonce).map_err(Refusal::into_error)?;
                (client, verified)
            }
            Err(Refusal::Other(e)) => return Err(e),
        };
        let (subject, raw_id_token) = verified;
        // The signature was verified above; the payload's other claims (groups, roles…) are read
        // from it as they are.
        let mut merged = jwt_payload(&raw_id_token).unwrap_or_default();
        if let Ok(request) = client.user_info(
            token.access_token().clone(),
            Some(SubjectIdentifier::new(subject.clone())),
        ) {
            let info: UserInfoClaims<OtherClaims, CoreGenderClaim> = request
                .request_async(&self.http)
                .await
                .map_err(|e| failed("the userinfo endpoint", error_chain(&e)))?;
            if let Ok(Value::Object(map)) = serde_json::to_value(&info) {
                merged.extend(map);
            }
        }
        let text = |key: &str| {
            merged
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let email = text("email");
        let name = text("name")
            .or_else(|| text("preferred_username"))
            .or_else(|| email.clone())
            .unwrap_or_else(|| subject.clone());
        Ok(Identity {
            subject,
            name,
            email,
            claims: merged,
            id_token: raw_id_token,
        })
    }

    /// The provider's end-session URL with the ID token hint and where to come back to, if the
    /// provider has one.
    pub async fn logout_url(
        &self,
        id_token: Option<&str>,
        post_logout_redirect: &str,
    ) -> Option<Url> {
        let provider = self.provider().await.ok()?;
        let mut url = provider.end_session.clone()?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(hint) = id_token {
                query.append_pair("id_token_hint", hint);
            }
            query
                .append_pair("client_id", &self.config.client_id)
                .append_pair("post_logout_redirect_uri", post_logout_redirect);
        }
        Some(url)
    }

    /// The role the claims grant.
    pub fn role(&self, claims: &Map<String, Value>) -> Option<Role> {
        map_role(claims, &self.config.role_claim, &self.config.role_map)
    }

    pub fn role_claim(&self) -> &str {
        &self.config.role_claim
    }

    /// Whether `issuer` names the configured provider (discovery checked that the provider calls
    /// itself exactly that).
    pub fn is_issuer(&self, issuer: &str) -> bool {
        issuer == self.config.issuer_url
    }
}

fn failed(what: &str, e: String) -> AuthError {
    AuthError::LoginFailed(format!("{what}: {e}"))
}

fn with_redirect(
    client: &DiscoveredClient,
    redirect_url: &str,
) -> Result<DiscoveredClient, AuthError> {
    Ok(client.clone().set_redirect_uri(
        RedirectUrl::new(redirect_url.to_owned())
            .map_err(|e| AuthError::Internal(format!("redirect URL {redirect_url}: {e}")))?,
    ))
}

/// Verifies the token response's ID token (signature, issuer, audience, expiry, nonce, access
/// token hash); returns its subject and the raw token.
fn verify(
    client: &DiscoveredClient,
    token: &CoreTokenResponse,
    nonce: &str,
) -> Result<(String, String), Refusal> {
    let id_token = token.id_token().ok_or_else(|| {
        AuthError::LoginFailed("the provider's answer has no ID token".to_owned())
    })?;
    let verifier = client.id_token_verifier();
    let claims = id_token
        .claims(&verifier, &Nonce::new(nonce.to_owned()))
        .map_err(|e| {
            let signature = matches!(e, ClaimsVerificationError::SignatureVerification(_));
            let error = failed("the ID token did not verify", error_chain(&e));
            if signature {
                Refusal::UnknownKey(error)
            } else {
                Refusal::Other(error)
            }
        })?;
    if let Some(expected) = claims.access_token_hash() {
        let signing_alg = id_token
            .signing_alg()
            .map_err(|e| failed("the ID token's algorithm", e.to_string()))?;
        let signing_key = id_token
            .signing_key(&verifier)
            .map_err(|e| failed("the ID token's key", e.to_string()))?;
        let actual = AccessTokenHash::from_token(token.access_token(), signing_alg, signing_key)
            .map_err(|e| failed("the access token hash", e.to_string()))?;
        if actual != *expected {
            return Err(AuthError::LoginFailed(
                "the ID token's access token hash does not match the access token".to_owned(),
            )
            .into());
        }
    }
    Ok((claims.subject().as_str().to_owned(), id_token.to_string()))
}

/// The highest role whose configured values include a value of the claim at `path` (dots reach
/// into objects). The claim may be a string or a list of strings.
pub fn map_role(claims: &Map<String, Value>, path: &str, map: &RoleMap) -> Option<Role> {
    let mut parts = path.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    let values: Vec<&str> = match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    let granted = |configured: &[String]| configured.iter().any(|c| values.contains(&c.as_str()));
    if granted(&map.admin) {
        Some(Role::Admin)
    } else if granted(&map.operator) {
        Some(Role::Operator)
    } else if granted(&map.viewer) {
        Some(Role::Viewer)
    } else {
        None
    }
}

fn jwt_payload(jwt: &str) -> Option<Map<String, Value>> {
    use base64::Engine as _;
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(claims: Value, path: &str, expected: Option<Role>) {
        let map = RoleMap {
            admin: vec!["admins".to_owned()],
            operator: vec!["ops".to_owned()],
            viewer: vec!["staff".to_owned(), "readers".to_owned()],
        };
        let Value::Object(claims) = claims else {
            panic!("claims must be an object")
        };
        assert_eq!(
            map_role(&claims, path, &map),
            expected,
            "{claims:?} at {path}"
        );
    }

    #[test]
    fn roles_come_from_the_configured_claim() {
        check(
            json!({"groups": ["staff", "ops"]}),
            "groups",
            Some(Role::Operator),
        );
        check(
            json!({"groups": ["admins", "staff"]}),
            "groups",
            Some(Role::Admin),
        );
        check(json!({"groups": "readers"}), "groups", Some(Role::Viewer));
        check(json!({"groups": ["others"]}), "groups", None);
        check(json!({"groups": []}), "groups", None);
        check(json!({"email": "admins"}), "groups", None);
        check(json!({"groups": 7}), "groups", None);
        check(
            json!({"realm_access": {"roles": ["ops"]}}),
            "realm_access.roles",
            Some(Role::Operator),
        );
        check(json!({"realm_access": ["ops"]}), "realm_access.roles", None);
    }

    #[test]
    fn jwt_payloads_are_read() {
        use base64::Engine as _;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"sub":"alice","groups":["admins"]}"#);
        let claims = jwt_payload(&format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln")).expect("payload");
        assert_eq!(claims["sub"], "alice");
        assert!(jwt_payload("not-a-jwt").is_none());
    }
}
