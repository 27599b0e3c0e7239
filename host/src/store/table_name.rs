//! [`TableName`]: the outbox table's name, validated once as a plain SQL identifier, so the
//! statement builders can write it unquoted.

use super::{DEFAULT_TABLE, StoreError};

/// A validated plain SQL identifier naming the outbox table: `[A-Za-z_][A-Za-z0-9_]*`, at most
/// 48 bytes (index names derive from it), and not a reserved word we would have to quote.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName(String);

impl TableName {
    /// Validates `name` as a plain SQL identifier.
    pub fn new(name: &str) -> Result<TableName, StoreError> {
        let mut chars = name.chars();
        let valid_start = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let valid_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        let reserved = RESERVED_WORDS
            .split_ascii_whitespace()
            .any(|word| word.eq_ignore_ascii_case(name));
        if !valid_start || !valid_rest || name.len() > 48 || reserved {
            return Err(StoreError::InvalidTableName(name.to_string()));
        }
        Ok(TableName(name.to_string()))
    }

    /// The identifier.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The table of its partitions' leases (partitioned mode): `<table>_partitions`.
    pub fn partitions_table(&self) -> String {
        format!("{}_partitions", self.0)
    }

    /// The table of the hosts sharing its partitions (partitioned mode): `<table>_hosts`.
    pub fn hosts_table(&self) -> String {
        format!("{}_hosts", self.0)
    }
}

/// Words reserved in PostgreSQL, MySQL 8 / MariaDB or SQLite: a bare table name must be none of
/// them (the SQL names the table unquoted).
const RESERVED_WORDS: &str = "
    abort accessible action add after all alter always analyse analyze and any array as asc
    asensitive asymmetric attach authorization autoincrement before begin between bigint binary
    blob both by call cascade case cast change char character check collate collation column
    commit condition conflict constraint continue convert create cross cube cume_dist
    current_catalog current_date current_role current_schema current_time current_timestamp
    current_user cursor database databases day_hour day_microsecond day_minute day_second dec
    decimal declare default deferrable deferred delayed delete dense_rank desc describe detach
    deterministic distinct distinctrow div do double drop dual each else elseif empty enclosed
    end escape escaped except exclusive exists exit explain fail false fetch filter
    first_value float float4 float8 for force foreign freeze from full fulltext function
    generated get glob grant group grouping groups having high_priority hour_microsecond
    hour_minute hour_second if ignore ilike immediate in index indexed infile initially inner
    inout insensitive insert instead int int1 int2 int3 int4 int8 integer intersect interval
    into io_after_gtids io_before_gtids is isnull iterate join json_table key keys kill lag
    last_value lateral lead leading leave left like limit linear lines load localtime
    localtimestamp lock long longblob longtext loop low_priority master_bind
    master_ssl_verify_server_cert match maxvalue mediumblob mediumint mediumtext middleint
    minute_microsecond minute_second mod modifies natural no_write_to_binlog not notnull
    nth_value ntile null numeric of offset on only optimize optimizer_costs option optionally or
    order out outer outfile over overlaps partition percent_rank placing plan pragma precision
    primary procedure purge raise range rank read read_write reads real recursive references
    regexp reindex release rename repeat replace require resignal restrict return returning
    revoke right rlike rollback row row_number rows savepoint schema schemas second_microsecond
    select sensitive separator session_user set show signal similar smallint some spatial
    specific sql sql_big_result sql_calc_found_rows sql_small_result sqlexception sqlstate
    sqlwarning ssl starting stored straight_join symmetric system system_user table tablesample
    temp temporary terminated then tinyblob tinyint tinytext to trailing transaction trigger
    true undo union unique unlock unsigned update usage use user using utc_date utc_time
    utc_timestamp vacuum values varbinary varchar varcharacter variadic varying verbose view
    virtual when where while window with without write xor year_month zerofill
";

impl Default for TableName {
    fn default() -> Self {
        TableName(DEFAULT_TABLE.to_string())
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(TableName::new("room_outbox").is_ok());
        assert!(TableName::new("_x9").is_ok());
        for bad in [
            "",
            "9x",
            "a-b",
            "a b",
            "x;drop table y",
            "t`",
            "t\"",
            &"a".repeat(49),
        ] {
            assert!(TableName::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
