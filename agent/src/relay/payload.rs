//! The callback body the relay accepts: the same body, with the same checks, as the hub's direct
//! callback, so it is defined once in `banhub_proto::event` and only named here.

pub use banhub_proto::event::{Callback, CallbackError as PayloadError};

/// Parses and checks a callback body (see [`Callback::parse`]). `serverId` is ignored: the agent
/// knows which server it is, whatever the body claims.
pub fn parse(body: &[u8]) -> Result<Callback, PayloadError> {
    Callback::parse(body)
}
