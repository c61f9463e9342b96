//! [`RecurringStore`] for [`PostgresStore`]: schedules in `recurring` (compare-and-set on the
//! record under its row lock), the tick ledger in each partition's `ticks`, written under the
//! partition's lock with the tick's task.

use async_trait::async_trait;
use delayq_postgres::tokio_postgres::Row;

use super::{from_db, from_layer, to_db, PostgresStore};
use crate::error::{StorageError, StorageResult};
use crate::model::{NewTask, Partition, TaskId};
use crate::recurring::{
    recurring_shard, RecurringStore, ShardLook, StoredSchedule, TickOutcome, RECURRING_SHARDS,
};

/// `shard` exists, or the error of a look at one that does not.
fn valid_shard(shard: u32) -> StorageResult<()> {
    if shard >= RECURRING_SHARDS {
        return Err(StorageError::Backend {
            operation: "recurring_due",
            message: format!("no recurring shard {shard} (there are {RECURRING_SHARDS})"),
        });
    }
    Ok(())
}

fn stored(row: &Row) -> StoredSchedule {
    let tick: Option<i64> = row.get(2);
    let fired: Option<i64> = row.get(3);
    StoredSchedule {
        name: row.get(0),
        record: row.get(1),
        last_fired: tick
            .zip(fired)
            .map(|(tick, fired)| (from_db(tick), from_db(fired))),
    }
}

impl PostgresStore {
    async fn schedules(
        &self,
        operation: &'static str,
        filter: &'static str,
        name: Option<String>,
    ) -> StorageResult<Vec<StoredSchedule>> {
        let sql = self.inner.database.schema().substitute(&format!(
            "SELECT name, record, last_tick_ms, last_fired_ms FROM {{schema}}.recurring {filter} ORDER BY name"
        ));
        self.inner
            .database
            .run(operation, move |client| {
                let sql = sql.clone();
                let name = name.clone();
                Box::pin(async move {
                    let rows = match &name {
                        Some(name) => client.query(&sql, &[name]).await?,
                        None => client.query(&sql, &[]).await?,
                    };
                    Ok(rows.iter().map(stored).collect())
                })
            })
            .await
            .map_err(|error| from_layer(operation, error))
    }
}

#[async_trait]
impl RecurringStore for PostgresStore {
    async fn recurring_get(&self, name: &str) -> StorageResult<Option<StoredSchedule>> {
        Ok(self
            .schedules("recurring_get", "WHERE name = $1", Some(name.to_owned()))
            .await?
            .into_iter()
            .next())
    }

    async fn recurring_list(&self) -> StorageResult<Vec<StoredSchedule>> {
        self.schedules("recurring_list", "", None).await
    }

    async fn recurring_swap(
        &self,
        name: &str,
        expected: Option<&str>,
        new: Option<&str>,
        next_ms: Option<u64>,
    ) -> StorageResult<bool> {
        let name = name.to_owned();
        let expected = expected.map(str::to_owned);
        let new = new.map(str::to_owned);
        let next = next_ms.map(to_db);
        let shard = i32::try_from(recurring_shard(&name)).unwrap_or(0);
        let schema = self.inner.database.schema().clone();
        self.inner
            .database
            .transaction("recurring_swap", move |tx| {
                let (name, expected, new, schema) =
                    (name.clone(), expected.clone(), new.clone(), schema.clone());
                Box::pin(async move {
                    let current = tx
                        .query_opt(
                            &schema.substitute(
                                "SELECT record FROM {schema}.recurring WHERE name = $1 FOR UPDATE",
                            ),
                            &[&name],
                        )
                        .await?
                        .map(|row| row.get::<_, String>(0));
                    if current != expected {
                        return Ok(false);
                    }
                    match (&current, &new) {
                        (_, None) => {
                            tx.execute(
                                &schema.substitute("DELETE FROM {schema}.recurring WHERE name = $1"),
                                &[&name],
                            )
                            .await?;
                            Ok(true)
                        }
                        (Some(_), Some(record)) => {
                            tx.execute(
                                &schema.substitute(
                                    "UPDATE {schema}.recurring SET record = $2, next_ms = $3 WHERE name = $1",
                                ),
                                &[&name, record, &next],
                            )
                            .await?;
                            Ok(true)
                        }
                        // A concurrent creator may insert first: then this swap lost.
                        (None, Some(record)) => Ok(tx
                            .execute(
                                &schema.substitute(
                                    "INSERT INTO {schema}.recurring (name, shard, record, next_ms) \
                                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                                ),
                                &[&name, &shard, record, &next],
                            )
                            .await?
                            == 1),
                    }
                })
            })
            .await
            .map_err(|error| from_layer("recurring_swap", error))
    }

    async fn recurring_due(
        &self,
        shard: u32,
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<ShardLook> {
        valid_shard(shard)?;
        let schema = self.inner.database.schema().clone();
        let shard = i32::try_from(shard).unwrap_or(0);
        let until = to_db(until_ms);
        let limit = to_db(limit.max(1));
        self.inner
            .database
            .run("recurring_due", move |client| {
                let schema = schema.clone();
                Box::pin(async move {
                    // One statement (a shard's look runs every pull period on each shard):
                    // the due schedules, each beside the shard's next due after `until` and
                    // its schedule count; one row of those two alone when nothing is due.
                    let statement = client
                        .prepare_cached(&schema.substitute(
                            "WITH due AS (SELECT name, record, last_tick_ms, last_fired_ms, next_ms \
                             FROM {schema}.recurring WHERE shard = $1 AND next_ms IS NOT NULL \
                             AND next_ms <= $2 ORDER BY next_ms, name LIMIT $3), \
                             shard AS (SELECT (SELECT min(next_ms) FROM {schema}.recurring \
                             WHERE shard = $1 AND next_ms > $2) AS next_ms, \
                             (SELECT count(*) FROM {schema}.recurring WHERE shard = $1) AS schedules) \
                             SELECT due.name, due.record, due.last_tick_ms, due.last_fired_ms, \
                             shard.next_ms, shard.schedules FROM shard LEFT JOIN due ON true \
                             ORDER BY due.next_ms, due.name",
                        ))
                        .await?;
                    let rows = client.query(&statement, &[&shard, &until, &limit]).await?;
                    let first = rows.first();
                    Ok(ShardLook {
                        due: rows
                            .iter()
                            .filter(|row| row.get::<_, Option<String>>(0).is_some())
                            .map(stored)
                            .collect(),
                        next_ms: first
                            .and_then(|row| row.get::<_, Option<i64>>(4))
                            .map(from_db),
                        schedules: first.map_or(0, |row| from_db(row.get(5))),
                    })
                })
            })
            .await
            .map_err(|error| from_layer("recurring_due", error))
    }

    async fn recurring_due_many(
        &self,
        shards: &[u32],
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<ShardLook>> {
        for &shard in shards {
            valid_shard(shard)?;
        }
        // One statement for every shard (the driver looks at all of its shards every pull
        // period): each shard's schedule count, next tick after `until` and whether anything
        // is due; the due schedules are then read only from shards that have some.
        let schema = self.inner.database.schema().clone();
        let wanted: Vec<i32> = shards
            .iter()
            .map(|&shard| i32::try_from(shard).unwrap_or(0))
            .collect();
        let until = to_db(until_ms);
        let rows = self
            .inner
            .database
            .run("recurring_due", move |client| {
                let schema = schema.clone();
                let wanted = wanted.clone();
                Box::pin(async move {
                    let statement = client
                        .prepare_cached(&schema.substitute(
                            "SELECT shard, count(*), min(next_ms) FILTER (WHERE next_ms > $2), \
                             coalesce(bool_or(next_ms <= $2), false) \
                             FROM {schema}.recurring WHERE shard = ANY($1) GROUP BY shard",
                        ))
                        .await?;
                    client.query(&statement, &[&wanted, &until]).await
                })
            })
            .await
            .map_err(|error| from_layer("recurring_due", error))?;
        let mut summaries = std::collections::HashMap::new();
        for row in &rows {
            let shard = u32::try_from(row.get::<_, i32>(0)).unwrap_or(u32::MAX);
            let schedules = from_db(row.get(1));
            let next_ms = row.get::<_, Option<i64>>(2).map(from_db);
            summaries.insert(shard, (schedules, next_ms, row.get::<_, bool>(3)));
        }
        let mut looks = Vec::with_capacity(shards.len());
        for shard in shards {
            looks.push(match summaries.get(shard) {
                Some(&(_, _, true)) => self.recurring_due(*shard, until_ms, limit).await?,
                Some(&(schedules, next_ms, false)) => ShardLook {
                    due: Vec::new(),
                    next_ms,
                    schedules,
                },
                None => ShardLook::default(),
            });
        }
        Ok(looks)
    }

    async fn recurring_fired(&self, name: &str, tick_ms: u64, fired_ms: u64) -> StorageResult<()> {
        let schema = self.inner.database.schema().clone();
        let name = name.to_owned();
        let (tick, fired) = (to_db(tick_ms), to_db(fired_ms));
        self.inner
            .database
            .run("recurring_fired", move |client| {
                let schema = schema.clone();
                let name = name.clone();
                Box::pin(async move {
                    client
                        .execute(
                            &schema.substitute(
                                "UPDATE {schema}.recurring SET last_tick_ms = $2, last_fired_ms = $3 \
                                 WHERE name = $1 AND (last_tick_ms IS NULL OR last_tick_ms <= $2)",
                            ),
                            &[&name, &tick, &fired],
                        )
                        .await
                        .map(|_| ())
                })
            })
            .await
            .map_err(|error| from_layer("recurring_fired", error))
    }

    async fn create_tick(
        &self,
        partition: &Partition,
        task: NewTask,
    ) -> StorageResult<TickOutcome> {
        let max = self.max_payload();
        if task.payload.len() > max {
            return Err(StorageError::PayloadTooLarge {
                id: task.id.to_string(),
                size: task.payload.len(),
                max,
            });
        }
        crate::model::validate_due(task.due_ms)?;
        let retention = self.retention_ms();
        self.in_partition("create_tick", partition, move |part| {
            let task = task.clone();
            Box::pin(async move { part.create_tick(&task, retention).await })
        })
        .await
    }

    async fn forget_ticks(&self, partition: &Partition, ids: &[TaskId]) -> StorageResult<()> {
        let ids = ids.to_vec();
        self.in_partition("forget_ticks", partition, move |part| {
            let ids = ids.clone();
            Box::pin(async move { part.forget_ticks(&ids).await })
        })
        .await
    }
}
