//! The insights of `GET /api/events/bans/insights` put together: the events service's counts (top
//! addresses, jails and servers, repeat offenders), the places the bans came from (countries and
//! networks, [`places`](super::places)), the country of each address shown, and the names of the
//! servers counted. It lives here because the GeoIP database and the places tally are this
//! service's, and this service may use the events service (not the other way round).

use std::collections::HashMap;
use std::net::IpAddr;

use chrono::{DateTime, Utc};

use super::Alerts;
use super::places::PlaceCount;
use crate::domain::ServerId;
use crate::domain::events::{Insights, InsightsQuery};
use crate::events::EventsError;

/// The insights with their places and names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedInsights {
    pub insights: Insights,
    /// The names of the servers there are (a server deleted since has none).
    pub server_names: HashMap<ServerId, String>,
    /// The country (ISO 3166 code) of each address shown that the GeoIP database knows.
    pub countries_of: HashMap<String, String>,
    /// Bans and addresses per country, most bans first, at most `limit`; empty without a GeoIP
    /// database.
    pub countries: Vec<(String, PlaceCount)>,
    /// The same per network.
    pub networks: Vec<(String, PlaceCount)>,
    /// When the places were counted; `None` while the first count runs in the background.
    pub places_counted_at: Option<DateTime<Utc>>,
}

impl Alerts {
    /// The insights `query` asks for at `now`, with their places and names.
    #[tracing::instrument(skip_all, err(level = "info"))]
    pub async fn insights(
        &self,
        query: &InsightsQuery,
        now: DateTime<Utc>,
    ) -> Result<LocatedInsights, EventsError> {
        let insights = self.0.events.insights(query, now).await?;
        let server_names = self
            .0
            .store
            .list_servers()
            .await?
            .into_iter()
            .map(|s| (s.id, s.name.to_string()))
            .collect();
        let (places, places_counted_at) = self.places(query.server).await?;
        let countries_of = shown_addresses(&insights)
            .filter_map(|ip| {
                let country = self.country(address_of(ip)?)?;
                Some((ip.to_owned(), country))
            })
            .collect();
        Ok(LocatedInsights {
            insights,
            server_names,
            countries_of,
            countries: places.countries.into_iter().take(query.limit).collect(),
            networks: places.networks.into_iter().take(query.limit).collect(),
            places_counted_at,
        })
    }
}

/// The addresses the insights show: the top ones, the repeat offenders and the one asked about.
fn shown_addresses(insights: &Insights) -> impl Iterator<Item = &str> {
    insights
        .top_ips
        .iter()
        .chain(&insights.repeat_offenders)
        .chain(insights.ip.iter().map(|(summary, _)| summary))
        .map(|summary| summary.ip.as_str())
}

/// The address to look a banned address or network up by: a network's first address.
fn address_of(ip: &str) -> Option<IpAddr> {
    ip.parse::<IpAddr>()
        .ok()
        .or_else(|| ip.parse::<ipnet::IpNet>().ok().map(|net| net.network()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_is_located_by_its_first_address() {
        let check = |raw: &str, expected: Option<&str>| {
            assert_eq!(
                address_of(raw),
                expected.map(|e| e.parse().expect("address")),
                "{raw}"
            );
        };
        check("192.0.2.7", Some("192.0.2.7"));
        check("198.51.100.0/24", Some("198.51.100.0"));
        check("2001:db8::/48", Some("2001:db8::"));
        check("not an address", None);
    }
}
