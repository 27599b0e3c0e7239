// Shared by the tests: the repository's paths and the golden vectors.

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root: the nearest folder above this file that holds producers/golden. */
export const REPO_ROOT = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'producers', 'golden', 'envelopes.json'))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find the repository root (producers/golden/envelopes.json)');
    dir = up;
  }
})();

export interface GoldenEvent {
  app_code: string;
  event_id: string;
  room_id: string;
  event_type: string;
  room_version: string;
  occurred_at_ms: string;
  body_hex: string;
  traceparent: string;
  tracestate: string;
}

export interface Golden {
  cases: { name: string; event: GoldenEvent; envelope_hex: string }[];
  event_id_prefixes: { ms: string; prefix: string }[];
  traceparent_checks: { traceparent: string; valid: boolean }[];
}

export function golden(): Golden {
  return JSON.parse(readFileSync(join(REPO_ROOT, 'producers', 'golden', 'envelopes.json'), 'utf8')) as Golden;
}

/** Whether a missing service or binary must fail the run (CI) rather than skip a test. */
export const IN_CI = (process.env.CI ?? '') !== '' && process.env.CI !== 'false' && process.env.CI !== '0';
