//! Schema migrations, the same for SQLite and PostgreSQL.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

mod m0002_events;
mod m0003_auth;
mod m0004_settings;
mod m0005_cluster;

pub struct Migrator;

impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(M0001Foundation),
            Box::new(m0002_events::M0002Events),
            Box::new(m0003_auth::M0003Auth),
            Box::new(m0004_settings::M0004Settings),
            Box::new(m0005_cluster::M0005Cluster),
        ]
    }
}

#[derive(DeriveMigrationName)]
struct M0001Foundation;

#[derive(DeriveIden)]
enum Servers {
    Table,
    Id,
    Name,
    Description,
    Labels,
    CreatedAt,
    AgentId,
    EnrolledAt,
    LastSeenAt,
    AgentVersion,
    Fail2banVersion,
    Hostname,
    LastAddress,
}

#[derive(DeriveIden)]
enum EnrollmentTokens {
    Table,
    Id,
    ServerId,
    SecretHash,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}

#[derive(DeriveIden)]
enum AgentCerts {
    Table,
    Serial,
    AgentId,
    ServerId,
    Fingerprint,
    IssuedAt,
    NotAfter,
    RevokedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for M0001Foundation {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Servers::Table)
                    .col(string_len(Servers::Id, 36).primary_key())
                    .col(string_len_uniq(Servers::Name, 64))
                    .col(text(Servers::Description))
                    .col(text(Servers::Labels))
                    .col(big_integer(Servers::CreatedAt))
                    .col(string_len_null(Servers::AgentId, 36))
                    .col(big_integer_null(Servers::EnrolledAt))
                    .col(big_integer_null(Servers::LastSeenAt))
                    .col(string_len_null(Servers::AgentVersion, 64))
                    .col(string_len_null(Servers::Fail2banVersion, 64))
                    .col(string_len_null(Servers::Hostname, 255))
                    .col(string_len_null(Servers::LastAddress, 64))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("servers_agent_id")
                    .table(Servers::Table)
                    .col(Servers::AgentId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(EnrollmentTokens::Table)
                    .col(string_len(EnrollmentTokens::Id, 36).primary_key())
                    .col(string_len(EnrollmentTokens::ServerId, 36))
                    .col(string_len(EnrollmentTokens::SecretHash, 64))
                    .col(big_integer(EnrollmentTokens::CreatedAt))
                    .col(big_integer(EnrollmentTokens::ExpiresAt))
                    .col(big_integer_null(EnrollmentTokens::UsedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("enrollment_tokens_server_id")
                    .table(EnrollmentTokens::Table)
                    .col(EnrollmentTokens::ServerId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AgentCerts::Table)
                    .col(string_len(AgentCerts::Serial, 64).primary_key())
                    .col(string_len(AgentCerts::AgentId, 36))
                    .col(string_len(AgentCerts::ServerId, 36))
                    .col(string_len(AgentCerts::Fingerprint, 64))
                    .col(big_integer(AgentCerts::IssuedAt))
                    .col(big_integer(AgentCerts::NotAfter))
                    .col(big_integer_null(AgentCerts::RevokedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("agent_certs_server_id")
                    .table(AgentCerts::Table)
                    .col(AgentCerts::ServerId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            AgentCerts::Table.into_iden(),
            EnrollmentTokens::Table.into_iden(),
            Servers::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
