// bench/graphile/drain.mjs: graphile-worker's drain of a backlog, the peer run of bench/graphile.sh.
//
//   node drain.mjs DATABASE_URL EVENTS CONCURRENCY LOCAL_QUEUE PROCESSES
//
// Installs graphile-worker's schema in DATABASE_URL, adds EVENTS jobs (untimed, 1,000 per
// `addJobs` call, each payload a room id, an event type, a room version and a 64-byte body like
// `outboxd bench`'s events), then starts PROCESSES worker processes, each a runner with a no-op
// task, and times them from the start of the runners until the job table is empty (graphile-worker
// deletes a job when it completes). Each runner runs CONCURRENCY jobs at once; LOCAL_QUEUE > 1
// turns on its batched fetch (`localQueue.size`) and batched completion
// (`completeJobBatchDelay = 0`), its own advice for throughput
// (https://worker.graphile.org/docs/performance). Prints one line:
//   graphile-worker EVENTS CONCURRENCY LOCAL_QUEUE PROCESSES DRAIN_SECONDS JOBS_PER_SECOND
// and exits non-zero if a job failed or the table did not empty within a minute per 10,000 jobs.
import { fork } from "node:child_process";
import pg from "pg";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";

// graphile-worker's own log lines would only slow it down and clutter the report.
const logger = new Logger(() => () => {});

if (process.argv[2] === "--runner") {
  await runner(process.argv[3], Number(process.argv[4]), Number(process.argv[5]));
} else {
  await main(process.argv.slice(2));
}

async function main([url, eventsArg, concurrencyArg, localQueueArg, processesArg]) {
  const events = Number(eventsArg);
  const processes = Number(processesArg);
  if (!url || !(events > 0) || !(Number(concurrencyArg) > 0) || !(Number(localQueueArg) >= 0) || !(processes > 0)) {
    console.error("usage: node drain.mjs DATABASE_URL EVENTS CONCURRENCY LOCAL_QUEUE PROCESSES");
    process.exit(2);
  }
  await runMigrations({ connectionString: url, logger });
  const utils = await makeWorkerUtils({ connectionString: url, logger });
  const body = Buffer.alloc(64, 7).toString("base64");
  for (let from = 0; from < events; from += 1000) {
    const specs = [];
    for (let i = from; i < Math.min(events, from + 1000); i++) {
      specs.push({
        identifier: "deliver",
        payload: { room_id: `room-${i % 1000}`, event_type: "RoomGiftSent", room_version: i + 1, body },
      });
    }
    await utils.addJobs(specs);
  }
  await utils.release();

  // The runners load their modules first; the clock starts when all are ready.
  const children = [];
  for (let i = 0; i < processes; i++) {
    const child = fork(new URL(import.meta.url).pathname, ["--runner", url, concurrencyArg, localQueueArg]);
    children.push(child);
  }
  let failed = 0;
  await Promise.all(
    children.map(
      (child) =>
        new Promise((resolve, reject) => {
          child.on("message", (m) => {
            if (m === "ready") resolve();
            else if (m === "failed") failed++;
          });
          child.on("exit", (code) => reject(new Error(`runner exited early (${code})`)));
        }),
    ),
  );
  // A runner that dies mid-drain ends the run at once, not at the deadline.
  for (const child of children) {
    child.removeAllListeners("exit");
    child.on("exit", (code) => {
      console.error(`graphile-worker: a runner exited mid-drain (${code})`);
      process.exit(1);
    });
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const started = process.hrtime.bigint();
  for (const child of children) child.send("go");
  const deadline = Date.now() + 60_000 * Math.ceil(events / 10_000);
  for (;;) {
    const { rows } = await client.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
    if (rows[0].n === 0) break;
    if (Date.now() > deadline) {
      console.error(`graphile-worker: ${rows[0].n} jobs left after the deadline`);
      process.exit(1);
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await client.end();
  await Promise.all(
    children.map((child) => {
      child.removeAllListeners("exit");
      const exited = new Promise((r) => child.once("exit", r));
      child.send("stop");
      return exited;
    }),
  );
  if (failed > 0) {
    console.error(`graphile-worker: ${failed} jobs failed`);
    process.exit(1);
  }
  console.log(
    `graphile-worker ${events} ${concurrencyArg} ${localQueueArg} ${processes} ${seconds.toFixed(3)} ${Math.round(events / seconds)}`,
  );
}

// One worker process: waits for "go", runs until "stop", reports failed jobs.
async function runner(url, concurrency, localQueue) {
  // A runner outlives no parent: if drain.mjs dies, its runners exit too.
  process.on("disconnect", () => process.exit(1));
  const go = new Promise((resolve) => process.once("message", resolve));
  process.send("ready");
  await go;
  const handle = await run({
    preset: {
      worker: {
        connectionString: url,
        concurrentJobs: concurrency,
        maxPoolSize: Math.max(10, concurrency + 2),
        pollInterval: 1000,
        logger,
        ...(localQueue > 1 ? { localQueue: { size: localQueue }, completeJobBatchDelay: 0 } : {}),
      },
    },
    noHandleSignals: true,
    taskList: { deliver: async () => {} },
  });
  handle.events.on("job:error", () => process.send("failed"));
  await new Promise((resolve) => process.on("message", (m) => m === "stop" && resolve()));
  await handle.stop();
  process.exit(0);
}
