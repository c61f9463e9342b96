//! delayq's migrations, in the order they apply. Each is a SQL file under `migrations/`
//! whose header says what it creates; `{schema}` in it stands for the quoted schema name.
//!
//! A released migration is never edited (its checksum is recorded when it applies and
//! [`crate::Migrator::status`] reports one that changed); a change of the schema is a new
//! migration at the end of [`MIGRATIONS`], written so that a node of the previous release
//! keeps working beside it during a rolling upgrade.

/// One versioned step of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its version: 1, 2, 3, ... without gaps.
    pub version: u32,
    /// A short name, e.g. `meta`.
    pub name: &'static str,
    /// The SQL, with `{schema}` for the quoted schema name.
    pub sql: &'static str,
}

impl Migration {
    /// A checksum of [`Migration::sql`] as written (before the schema is put in), 16 hex
    /// digits of FNV-1a: tells a migration that was edited after it applied.
    pub fn checksum(&self) -> String {
        format!("{:016x}", fnv1a(self.sql.as_bytes()))
    }
}

/// Every migration of this release, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "meta",
        sql: include_str!("../migrations/0001_meta.sql"),
    },
    Migration {
        version: 2,
        name: "tasks",
        sql: include_str!("../migrations/0002_tasks.sql"),
    },
    Migration {
        version: 3,
        name: "task_traces",
        sql: include_str!("../migrations/0003_task_traces.sql"),
    },
    Migration {
        version: 4,
        name: "membership",
        sql: include_str!("../migrations/0004_membership.sql"),
    },
    Migration {
        version: 5,
        name: "partition_paused",
        sql: include_str!("../migrations/0005_partition_paused.sql"),
    },
];

/// FNV-1a, 64 bits: stable across Rust releases and platforms, unlike std's hasher.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up_from_one_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version as usize, index + 1, "{}", migration.name);
            assert!(names.insert(migration.name), "{} twice", migration.name);
            assert!(
                migration.sql.contains("{schema}"),
                "{} names no schema",
                migration.name
            );
        }
    }

    #[test]
    fn the_checksum_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
