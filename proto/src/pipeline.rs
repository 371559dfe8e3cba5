//! The event pipeline's bounds that the agent and the hub must agree on, kept in one place: how
//! many events a hub stores in one transaction when an agent's batches queue up behind a commit,
//! and how many an agent keeps sent but unacknowledged, which is also how far a hub's session
//! reads ahead of its transaction in flight.

/// Most events per batch an agent sends. A batch carries what the spool holds, up to this: one
/// event when callbacks trickle in (no waiting to fill a batch), this many under a backlog, where
/// the hub's per-transaction cost and the per-batch ack are spread over more events.
pub const BATCH_EVENTS: usize = 1000;

/// Most events one ingest transaction of a session stores (eight of the agent's largest batches).
pub const COALESCE_EVENTS: usize = 8 * BATCH_EVENTS;

/// Events an agent keeps sent but unacknowledged, and a hub's session reads ahead at most: two
/// transactions' worth, so the next one fills while the previous one commits. Counted in events,
/// not batches, since batches are small while the spool is written in small groups.
pub const IN_FLIGHT_EVENTS: usize = 2 * COALESCE_EVENTS;
