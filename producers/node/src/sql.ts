import { OutboxError } from './errors.js';
import type { OutboxRow } from './event.js';
import { RESERVED_WORDS } from './reservedWords.js';

/** The SQL dialects the host supports. MariaDB is `mysql`. */
export type Dialect = 'postgres' | 'mysql' | 'sqlite';

/** A statement and its parameters, in the dialect's placeholder style. */
export interface Statement {
  /** SQL text: `$1…$n` placeholders on PostgreSQL, `?` elsewhere. */
  sql: string;
  /** The values, in placeholder order (strings, Buffers, bigints). */
  params: unknown[];
}

/** The default outbox table. */
export const DEFAULT_TABLE = 'room_outbox';

/** Most rows in one INSERT: far below every driver's placeholder limit (7 per row). */
export const MAX_ROWS_PER_STATEMENT = 500;

/** Most ids in one existing-id count (below MariaDB's `in_predicate_conversion_threshold`). */
export const COUNT_EXISTING_MAX_IDS = 500;

/** The columns of the producer INSERT, in the host's order. */
export const OUTBOX_COLUMNS = [
  'app_code',
  'event_id',
  'event_type',
  'room_id',
  'status',
  'envelope',
  'created_at_ms',
  'retry_count',
  'last_error',
  'worker_id',
  'lock_until_ms',
  'next_retry_at_ms',
  'updated_at_ms',
] as const;

const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

/**
 * `table` if it is a plain SQL identifier the host accepts too (`[A-Za-z_][A-Za-z0-9_]*`, at most
 * 48 bytes since the host derives index names from it, not a reserved word), which is the only
 * kind of name ever put into SQL text.
 *
 * @throws {@link OutboxError} otherwise.
 */
export function checkTableName(table: string = DEFAULT_TABLE): string {
  if (typeof table !== 'string' || !TABLE_NAME.test(table)) {
    throw new OutboxError(
      `table name ${JSON.stringify(table)} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 characters)`,
      { field: 'table' },
    );
  }
  if (RESERVED_WORDS.has(table.toLowerCase())) {
    throw new OutboxError(`table name ${JSON.stringify(table)} is a reserved SQL word`, { field: 'table' });
  }
  return table;
}

/**
 * The multi-row INSERT of new `pending` rows that leaves ids already present alone:
 * `ON CONFLICT (app_code, event_id) DO NOTHING` on PostgreSQL and SQLite,
 * `ON DUPLICATE KEY UPDATE event_id = event_id` on MySQL/MariaDB (not INSERT IGNORE, which would
 * swallow other errors too). `rows` must be distinct and at most {@link MAX_ROWS_PER_STATEMENT}.
 */
export function insertStatement(dialect: Dialect, table: string, rows: readonly OutboxRow[]): Statement {
  checkTableName(table);
  if (rows.length === 0 || rows.length > MAX_ROWS_PER_STATEMENT) {
    throw new OutboxError(`insertStatement: 1 to ${MAX_ROWS_PER_STATEMENT} rows, got ${rows.length}`);
  }
  const params: unknown[] = [];
  const values: string[] = [];
  for (const row of rows) {
    if (dialect === 'postgres') {
      const n = params.push(row.appCode, row.eventId, row.eventType, row.roomId, row.envelope, row.occurredAtMs);
      const p = (i: number) => `$${n - 6 + i}`;
      values.push(`(${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, 'pending', ${p(5)}, ${p(6)}, 0, NULL, '', NULL, 0, ${p(6)})`);
    } else {
      params.push(row.appCode, row.eventId, row.eventType, row.roomId, row.envelope, row.occurredAtMs, row.occurredAtMs);
      values.push(`(?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?)`);
    }
  }
  const onConflict =
    dialect === 'mysql'
      ? ' ON DUPLICATE KEY UPDATE event_id = event_id'
      : ' ON CONFLICT (app_code, event_id) DO NOTHING';
  const sql = `INSERT INTO ${table} (${OUTBOX_COLUMNS.join(', ')}) VALUES ${values.join(', ')}${onConflict}`;
  return { sql, params };
}

/**
 * How many of `eventIds` of tenant `appCode` already exist: one primary-key range read
 * (`app_code = ? AND event_id IN (…)`), at most {@link COUNT_EXISTING_MAX_IDS} ids. A plain
 * consistent read, as the host does (a locking read would make concurrent producers deadlock).
 */
export function countExistingStatement(dialect: Dialect, table: string, appCode: string, eventIds: readonly string[]): Statement {
  checkTableName(table);
  if (eventIds.length === 0 || eventIds.length > COUNT_EXISTING_MAX_IDS) {
    throw new OutboxError(`countExistingStatement: 1 to ${COUNT_EXISTING_MAX_IDS} ids, got ${eventIds.length}`);
  }
  const p = (i: number) => (dialect === 'postgres' ? `$${i}` : '?');
  const list = eventIds.map((_, i) => p(i + 2)).join(', ');
  return {
    sql: `SELECT COUNT(*) AS n FROM ${table} WHERE app_code = ${p(1)} AND event_id IN (${list})`,
    params: [appCode, ...eventIds],
  };
}

/** The rows to insert: the first of each (appCode, eventId), as the database would keep. */
export function distinctRows(rows: readonly OutboxRow[]): OutboxRow[] {
  const seen = new Set<string>();
  return rows.filter((row) => {
    const key = JSON.stringify([row.appCode, row.eventId]);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** `items` in consecutive slices of at most `size`. */
export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
