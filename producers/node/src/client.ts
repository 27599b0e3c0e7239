/**
 * The three drivers: which one a client is, and how to run a statement on it.
 * No driver is imported: clients are recognised by shape, so none is a dependency.
 */

import { OutboxError } from './errors.js';
import { describe } from './int64.js';
import type { Dialect, Statement } from './sql.js';

/** A node-postgres `Client` / `PoolClient`, or a mysql2/promise `Connection` / `PoolConnection`. */
export interface QueryableClient {
  query(...args: any[]): Promise<any>;
}

/** A better-sqlite3 `Database` (synchronous). */
export interface SqliteDatabase {
  prepare(sql: string): any;
}

/** Any client {@link enqueue} accepts. */
export type Client = QueryableClient | SqliteDatabase;

/** mysql2's CLIENT_FOUND_ROWS flag: an INSERT … ON DUPLICATE KEY UPDATE counts unchanged duplicates. */
const CLIENT_FOUND_ROWS = 2;

/**
 * The dialect of a client: better-sqlite3 `Database` → `sqlite`, mysql2/promise connection →
 * `mysql`, node-postgres client → `postgres`.
 *
 * @throws {@link OutboxError} for a pool (a transaction lives on one connection: pass the
 * connection that holds it), a callback-style mysql2 connection, or an unknown object.
 */
export function detectDialect(client: unknown): Dialect {
  if (client === null || typeof client !== 'object') {
    throw new OutboxError(`expected a database client, got ${describe(client)}`, { field: 'client' });
  }
  const c = client as Record<string, unknown>;
  const fn = (name: string) => typeof c[name] === 'function';
  if (fn('prepare') && fn('pragma')) return 'sqlite';
  if (fn('getConnection') || (fn('query') && fn('connect') && 'totalCount' in c)) {
    throw new OutboxError(
      'got a connection pool: pass the connection that holds your transaction (pg: await pool.connect(); mysql2: await pool.getConnection())',
      { field: 'client' },
    );
  }
  if (fn('execute') && fn('query')) {
    if (fn('promise')) {
      throw new OutboxError('got a callback-style mysql2 connection: pass connection.promise() or use mysql2/promise', {
        field: 'client',
      });
    }
    return 'mysql';
  }
  if (fn('query') && (fn('escapeIdentifier') || 'connectionParameters' in c)) return 'postgres';
  throw new OutboxError(
    `cannot tell the database of ${describe(client)}: pass a pg Client/PoolClient, a mysql2/promise connection or a better-sqlite3 Database, or set options.dialect`,
    { field: 'client' },
  );
}

/** Checks that `client` has the method `dialect` calls on it. */
export function checkClientFor(dialect: Dialect, client: unknown): void {
  const method = dialect === 'sqlite' ? 'prepare' : 'query';
  if (client === null || typeof client !== 'object' || typeof (client as Record<string, unknown>)[method] !== 'function') {
    throw new OutboxError(`a ${dialect} client needs a ${method}() method, got ${describe(client)}`, { field: 'client' });
  }
}

/** Runs an INSERT; returns the affected-row count the driver reports. */
export async function runWrite(dialect: Dialect, client: Client, statement: Statement): Promise<number> {
  switch (dialect) {
    case 'postgres': {
      const result = await (client as QueryableClient).query(statement.sql, statement.params);
      return Number(result?.rowCount ?? 0);
    }
    case 'mysql': {
      const [header] = await (client as QueryableClient).query({ sql: statement.sql, values: statement.params });
      return Number(header?.affectedRows ?? 0);
    }
    case 'sqlite':
      return runWriteSync(client as SqliteDatabase, statement);
  }
}

/** Runs a `SELECT COUNT(*)`; returns the count. */
export async function runCount(dialect: Dialect, client: Client, statement: Statement): Promise<number> {
  switch (dialect) {
    case 'postgres': {
      const result = await (client as QueryableClient).query({ text: statement.sql, values: statement.params, rowMode: 'array' });
      return Number(result.rows[0][0]);
    }
    case 'mysql': {
      const [rows] = await (client as QueryableClient).query({ sql: statement.sql, values: statement.params, rowsAsArray: true });
      return Number(rows[0][0]);
    }
    case 'sqlite':
      return Number((client as SqliteDatabase).prepare(statement.sql).pluck().get(...statement.params));
  }
}

/** Runs an INSERT on better-sqlite3; returns `changes`. */
export function runWriteSync(db: SqliteDatabase, statement: Statement): number {
  return Number(db.prepare(statement.sql).run(...statement.params).changes);
}

/**
 * Whether an INSERT … ON DUPLICATE KEY UPDATE on this MySQL connection counts a duplicate as an
 * affected row: mysql2 sets CLIENT_FOUND_ROWS by default (read from the connection's flags;
 * assumed when they cannot be read).
 */
export function mysqlCountsDuplicates(client: unknown): boolean {
  const flags = (client as { connection?: { config?: { clientFlags?: unknown } } } | null)?.connection?.config?.clientFlags;
  return typeof flags === 'number' ? (flags & CLIENT_FOUND_ROWS) !== 0 : true;
}
