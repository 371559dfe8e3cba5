//! Singleton-job bookkeeping (which replica ran which job, how often) and the cluster settings
//! set once for every replica.

use chrono::{DateTime, Utc};

use super::super::{Store, StoreError, now_ms, to_time};
use super::{get, to_u64};

/// How often one replica led and ran one singleton job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRuns {
    pub name: String,
    pub replica: String,
    /// Times it became the job's leader.
    pub terms: u64,
    /// Passes it reported (jobs that report them).
    pub runs: u64,
    pub first_run_at: DateTime<Utc>,
    pub last_run_at: DateTime<Utc>,
}

/// What a singleton job reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// This replica became the job's leader.
    Leads,
    /// One pass of the job ran.
    Pass,
}

impl Store {
    /// Counts, for job `name` on `replica`, a new term as its leader or one more pass.
    pub async fn record_job(
        &self,
        name: &str,
        replica: &str,
        event: JobEvent,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let (terms, runs) = match event {
            JobEvent::Leads => (1i64, 0i64),
            JobEvent::Pass => (0, 1),
        };
        let mut sql = self.sql(
            "INSERT INTO cluster_jobs (name, replica_id, terms, runs, first_run_at, last_run_at) \
             VALUES ",
        );
        sql.tuple([
            name.into(),
            replica.into(),
            terms.into(),
            runs.into(),
            now.into(),
            now.into(),
        ])
        .push(
            " ON CONFLICT (name, replica_id) DO UPDATE SET \
             terms = cluster_jobs.terms + excluded.terms, runs = cluster_jobs.runs + excluded.runs, \
             last_run_at = excluded.last_run_at",
        );
        self.exec(sql).await?;
        Ok(())
    }

    /// Runs per job and replica.
    pub async fn job_runs(&self) -> Result<Vec<JobRuns>, StoreError> {
        self.rows(self.sql(
            "SELECT name, replica_id, terms, runs, first_run_at, last_run_at FROM cluster_jobs \
             ORDER BY name, replica_id",
        ))
        .await?
        .iter()
        .map(|row| {
            Ok(JobRuns {
                name: get(row, 0)?,
                replica: get(row, 1)?,
                terms: to_u64(get(row, 2)?),
                runs: to_u64(get(row, 3)?),
                first_run_at: to_time(get(row, 4)?),
                last_run_at: to_time(get(row, 5)?),
            })
        })
        .collect()
    }

    /// Stores `value` under `name` unless something is stored already; returns what is stored.
    pub async fn init_cluster_setting(
        &self,
        name: &str,
        value: &str,
    ) -> Result<String, StoreError> {
        let mut insert = self.sql("INSERT INTO cluster_settings (name, value) VALUES ");
        insert
            .tuple([name.into(), value.into()])
            .push(" ON CONFLICT (name) DO NOTHING");
        self.exec(insert).await?;
        let mut select = self.sql("SELECT value FROM cluster_settings WHERE name = ");
        select.bind(name);
        self.rows(select)
            .await?
            .first()
            .map(|row| get(row, 0))
            .transpose()?
            .ok_or_else(|| StoreError::Corrupt(format!("cluster setting {name} vanished")))
    }
}
