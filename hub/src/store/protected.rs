//! Repository functions of the lockout guard: the networks an admin protected, and the client
//! address each operator credential was last used from, through sea-orm's entities; and the
//! protected networks each host's `ignoreip` was last given (M0019), in hand-written SQL.

use std::collections::HashMap;
use std::net::IpAddr;

use chrono::{DateTime, Utc};
use ipnet::IpNet;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set, Value};

use super::entities::{operator_address, protected_network};
use super::servers::is_unique_violation;
use super::sql::get;
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;
use crate::domain::protected::{OperatorAddress, ProtectedNetwork, parse_network};

fn to_network(row: protected_network::Model) -> Result<ProtectedNetwork, StoreError> {
    let network = parse_network(&row.network).ok_or_else(|| {
        StoreError::Corrupt(format!("protected network {}: {:?}", row.id, row.network))
    })?;
    Ok(ProtectedNetwork {
        id: row.id,
        network,
        note: row.note,
        created_by: row.created_by,
        created_at: to_time(row.created_at),
    })
}

fn to_address(row: operator_address::Model) -> Result<OperatorAddress, StoreError> {
    let ip = row.ip.parse().map_err(|_| {
        StoreError::Corrupt(format!("operator address {}: {:?}", row.credential, row.ip))
    })?;
    Ok(OperatorAddress {
        credential: row.credential,
        ip,
        name: row.name,
        seen_at: to_time(row.seen_at),
    })
}

impl Store {
    /// The protected networks last pushed into the `ignoreip` of each of `servers` that had one.
    pub async fn ignoreip_pushes(
        &self,
        servers: &[ServerId],
    ) -> Result<HashMap<ServerId, Vec<IpNet>>, StoreError> {
        let mut pushed = HashMap::new();
        for chunk in servers.chunks(256) {
            let mut sql =
                self.sql("SELECT server_id, list FROM ignoreip_pushes WHERE server_id IN ");
            sql.tuple(chunk.iter().map(|s| Value::from(s.to_string())));
            for row in self.rows(sql).await? {
                let server: String = get(&row, 0)?;
                let list: String = get(&row, 1)?;
                let corrupt =
                    || StoreError::Corrupt(format!("ignoreip push of {server}: {list:?}"));
                let server = ServerId::parse(&server).map_err(|_| corrupt())?;
                let list = list
                    .lines()
                    .map(|line| parse_network(line).ok_or_else(corrupt))
                    .collect::<Result<Vec<_>, _>>()?;
                pushed.insert(server, list);
            }
        }
        Ok(pushed)
    }

    /// Records that `server`'s `ignoreip` now carries `list`.
    pub async fn record_ignoreip_push(
        &self,
        server: ServerId,
        list: &[IpNet],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let text: Vec<String> = list.iter().map(ToString::to_string).collect();
        let mut sql = self.sql("INSERT INTO ignoreip_pushes (server_id, list, pushed_at) VALUES ");
        sql.tuple([
            Value::from(server.to_string()),
            Value::from(text.join("\n")),
            Value::from(at.timestamp_millis()),
        ])
        .push(
            " ON CONFLICT (server_id) DO UPDATE SET list = excluded.list, \
             pushed_at = excluded.pushed_at",
        );
        self.exec(sql).await?;
        Ok(())
    }

    /// Every protected network, oldest first.
    pub async fn protected_networks(&self) -> Result<Vec<ProtectedNetwork>, StoreError> {
        protected_network::Entity::find()
            .order_by_asc(protected_network::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_network)
            .collect()
    }

    /// Protects a network; `None` when it is protected already.
    pub async fn insert_protected_network(
        &self,
        network: ipnet::IpNet,
        note: &str,
        created_by: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<ProtectedNetwork>, StoreError> {
        let inserted = protected_network::ActiveModel {
            network: Set(network.to_string()),
            note: Set(note.to_owned()),
            created_by: Set(created_by.to_owned()),
            created_at: Set(at.timestamp_millis()),
            ..Default::default()
        }
        .insert(&self.db)
        .await;
        match inserted {
            Ok(row) => to_network(row).map(Some),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Lifts a protection; the network it protected, or `None` when there was no such entry.
    pub async fn delete_protected_network(
        &self,
        id: i64,
    ) -> Result<Option<ProtectedNetwork>, StoreError> {
        let Some(row) = protected_network::Entity::find_by_id(id)
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let deleted = protected_network::Entity::delete_by_id(id)
            .exec(&self.db)
            .await?;
        if deleted.rows_affected == 0 {
            return Ok(None);
        }
        to_network(row).map(Some)
    }

    /// Records the client address an operator credential (`session:<id>`, `token:<id>`) was used
    /// from at `at`, replacing the one recorded before.
    pub async fn record_operator_address(
        &self,
        credential: &str,
        ip: IpAddr,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        operator_address::Entity::insert(operator_address::ActiveModel {
            credential: Set(credential.to_owned()),
            ip: Set(ip.to_string()),
            name: Set(name.to_owned()),
            seen_at: Set(at.timestamp_millis()),
        })
        .on_conflict(
            OnConflict::column(operator_address::Column::Credential)
                .update_columns([
                    operator_address::Column::Ip,
                    operator_address::Column::Name,
                    operator_address::Column::SeenAt,
                ])
                .to_owned(),
        )
        .exec(&self.db)
        .await?;
        Ok(())
    }

    /// The operator addresses recorded since `since`.
    pub async fn operator_addresses(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<OperatorAddress>, StoreError> {
        operator_address::Entity::find()
            .filter(operator_address::Column::SeenAt.gte(since.timestamp_millis()))
            .order_by_asc(operator_address::Column::Credential)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_address)
            .collect()
    }

    /// Forgets the operator addresses last recorded before `before`.
    pub async fn prune_operator_addresses(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = operator_address::Entity::delete_many()
            .filter(operator_address::Column::SeenAt.lt(before.timestamp_millis()))
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn memory_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        (dir, store)
    }

    #[tokio::test]
    async fn networks_are_added_once_listed_and_deleted() {
        let (_dir, store) = memory_store().await;
        let net = parse_network("203.0.113.0/24").expect("network");
        let at = Utc::now();
        let added = store
            .insert_protected_network(net, "office VPN", "admin", at)
            .await
            .expect("insert")
            .expect("new");
        assert_eq!(added.network, net);
        assert_eq!(added.note, "office VPN");
        let again = store
            .insert_protected_network(net, "twice", "admin", at)
            .await
            .expect("insert");
        assert_eq!(again, None, "a network is protected once");
        let listed = store.protected_networks().await.expect("list");
        assert_eq!(listed, vec![added.clone()]);
        assert_eq!(
            store
                .delete_protected_network(added.id)
                .await
                .expect("delete"),
            Some(added.clone())
        );
        assert_eq!(
            store
                .delete_protected_network(added.id)
                .await
                .expect("delete"),
            None
        );
        assert!(store.protected_networks().await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn an_operator_address_is_replaced_and_pruned() {
        let (_dir, store) = memory_store().await;
        let then = Utc::now() - chrono::TimeDelta::hours(2);
        let now = Utc::now();
        let ip = |raw: &str| raw.parse::<IpAddr>().expect("ip");
        store
            .record_operator_address("session:a", ip("198.51.100.7"), "alice", then)
            .await
            .expect("record");
        store
            .record_operator_address("session:a", ip("198.51.100.8"), "alice", now)
            .await
            .expect("record");
        store
            .record_operator_address("token:t", ip("198.51.100.9"), "ci", then)
            .await
            .expect("record");
        let recent = store
            .operator_addresses(now - chrono::TimeDelta::hours(1))
            .await
            .expect("list");
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].ip, ip("198.51.100.8"), "the newest address");
        assert_eq!(
            store
                .prune_operator_addresses(now - chrono::TimeDelta::hours(1))
                .await
                .expect("prune"),
            1
        );
        let all = store
            .operator_addresses(then - chrono::TimeDelta::hours(1))
            .await
            .expect("list");
        assert_eq!(all.len(), 1);
    }
}
