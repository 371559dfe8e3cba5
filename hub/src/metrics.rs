//! Prometheus metrics the hub exposes at `/metrics`: what operators graph about the fleet and the API.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// Why an agent session ended, as `fleet::SessionEnd::as_str` names it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionEndLabels {
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    pub status: u16,
}

/// Every metric of the hub; cheap to clone (each metric is an `Arc` inside).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub agents_connected: Gauge,
    pub agent_sessions: Counter,
    pub agent_sessions_ended: Family<SessionEndLabels, Counter>,
    pub enrollments: Counter,
    pub events_ingested: Counter,
    pub events_rejected: Counter,
    pub commands: Family<CommandLabels, Counter>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub sharing_paused_sources: Gauge,
}

impl Metrics {
    /// Renders every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut registry = Registry::with_prefix("banhub");
        registry.register(
            "agents_connected",
            "Agents holding a live session with this hub",
            self.agents_connected.clone(),
        );
        registry.register(
            "agent_sessions",
            "Agent sessions accepted since start",
            self.agent_sessions.clone(),
        );
        registry.register(
            "agent_sessions_ended",
            "Agent sessions ended since start, by reason",
            self.agent_sessions_ended.clone(),
        );
        registry.register(
            "enrollments",
            "Agents enrolled since start",
            self.enrollments.clone(),
        );
        registry.register(
            "events_ingested",
            "Events from agents stored (re-sent duplicates included)",
            self.events_ingested.clone(),
        );
        registry.register(
            "events_rejected",
            "Events from agents dropped because they break the rules",
            self.events_rejected.clone(),
        );
        registry.register(
            "commands",
            "Commands sent to agents, by kind and outcome",
            self.commands.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests answered, by method and status",
            self.http_requests.clone(),
        );
        registry.register(
            "sharing_paused_sources",
            "Source servers whose sharing the storm breaker paused, not yet resumed",
            self.sharing_paused_sources.clone(),
        );
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_sessions_are_counted_by_reason() {
        let metrics = Metrics::default();
        let ended = |reason| {
            metrics
                .agent_sessions_ended
                .get_or_create(&SessionEndLabels { reason })
                .inc();
        };
        ended("timeout");
        ended("timeout");
        ended("superseded");
        let text = metrics.render();
        assert!(
            text.contains("banhub_agent_sessions_ended_total{reason=\"timeout\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("banhub_agent_sessions_ended_total{reason=\"superseded\"} 1"),
            "{text}"
        );
    }
}
