//! The test alerts' turns (M0025): when each channel last had a test alert, shared by every
//! replica so one test per channel and interval holds for the whole cluster. A turn is taken by
//! one conditional statement (an update of a turn that is old enough, else an insert of a
//! channel never tried), so two replicas asking at once cannot both have it. Through sea-orm's
//! entities.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Set};

use super::entities::test_alert_turn;
use super::{Store, StoreError};

impl Store {
    /// Takes `channel`'s turn at `now` when its last one is at least `interval` old (or it never
    /// had one); otherwise the whole seconds until it has one, at least 1.
    pub async fn take_test_alert_turn(
        &self,
        channel: &str,
        now: DateTime<Utc>,
        interval: Duration,
    ) -> Result<Result<(), u64>, StoreError> {
        let now = now.timestamp_millis();
        let interval = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        let taken = test_alert_turn::Entity::update_many()
            .col_expr(test_alert_turn::Column::LastAt, Expr::value(now))
            .filter(test_alert_turn::Column::Channel.eq(channel.to_owned()))
            .filter(test_alert_turn::Column::LastAt.lte(now.saturating_sub(interval)))
            .exec(&self.db)
            .await?
            .rows_affected;
        if taken == 1 {
            return Ok(Ok(()));
        }
        let inserted = test_alert_turn::Entity::insert(test_alert_turn::ActiveModel {
            channel: Set(channel.to_owned()),
            last_at: Set(now),
        })
        .on_conflict(
            OnConflict::column(test_alert_turn::Column::Channel)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(&self.db)
        .await?;
        if inserted == 1 {
            return Ok(Ok(()));
        }
        let last = test_alert_turn::Entity::find_by_id(channel.to_owned())
            .one(&self.db)
            .await?
            .map_or(now, |row| row.last_at);
        let left_ms = last.saturating_add(interval).saturating_sub(now).max(0);
        let left_secs = u64::try_from(left_ms).unwrap_or(0).div_ceil(1000);
        Ok(Err(left_secs.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(10);

    async fn take(store: &Store, channel: &str, at: DateTime<Utc>) -> Result<(), u64> {
        store
            .take_test_alert_turn(channel, at, INTERVAL)
            .await
            .expect("the store answers")
    }

    /// Two handles on one database, as two replicas on one PostgreSQL database are.
    #[tokio::test]
    async fn one_turn_per_channel_and_interval_across_handles() {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let a = Store::connect(&url, 2).await.expect("connect");
        let b = Store::connect(&url, 2).await.expect("connect again");
        let start = Utc::now();
        let at = |secs: i64| start + chrono::Duration::seconds(secs);

        assert_eq!(take(&a, "email", at(0)).await, Ok(()));
        // The other replica is refused within the interval, told how long to wait.
        assert_eq!(take(&b, "email", at(3)).await, Err(7));
        assert_eq!(take(&a, "email", at(9)).await, Err(1));
        // Another channel has its own turn.
        assert_eq!(take(&b, "webhook:chat", at(3)).await, Ok(()));
        // Once the interval has passed, one of the two has the turn, the other waits again.
        assert_eq!(take(&b, "email", at(10)).await, Ok(()));
        assert_eq!(take(&a, "email", at(10)).await, Err(10));
    }
}
