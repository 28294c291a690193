// BullMQ's side of tools/bench_peers.py: one measurement per run, its JSON on the last line.
//
//   node bench.mjs MODE '{"url": "redis://127.0.0.1:PORT", ...}'
//
// Modes (each on a queue of its own, named by the driver):
//   sequential  `queue.add` one at a time for duration_s            -> {per_s}
//   concurrent  `tasks` loops of one `add` each, for duration_s      -> {per_s}
//   bulk        `addBulk` of `batch` jobs, one call at a time        -> {per_s}
//   fill        `addBulk` of `jobs` no-op jobs (for `worker`)        -> {jobs}
//   worker      a Worker of `concurrency` drains `jobs` jobs         -> {per_s, cpu_s}
//   lateness    `count` delayed jobs due at lead_ms + i * step_ms    -> {lateness_ms: [...]}
// CPU time is this process's utime + stime from /proc/self/stat, from the worker's start to
// its last completed job.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Queue, Worker } from "bullmq";

const [mode, raw] = process.argv.slice(2);
const p = JSON.parse(raw);
const url = new URL(p.url);
const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null };
const PAYLOAD = { kind: "bench", value: 12345 };
const CLK_TCK = 100;

const now = () => performance.timeOrigin + performance.now(); // wall ms with fractions
const cpuSeconds = () => {
  const stat = readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // utime, stime
};

async function main() {
  const queue = new Queue(p.queue, { connection });
  await queue.waitUntilReady();
  const opts = { removeOnComplete: true, removeOnFail: true };
  let out;
  if (mode === "sequential") {
    for (let i = 0; i < 200; i++) await queue.add("bench", PAYLOAD, opts); // warm up
    let n = 0;
    const start = now();
    const end = start + p.duration_s * 1000;
    while (now() < end) {
      for (let i = 0; i < 50; i++) await queue.add("bench", PAYLOAD, opts);
      n += 50;
    }
    out = { per_s: (n * 1000) / (now() - start) };
  } else if (mode === "concurrent") {
    for (let i = 0; i < 200; i++) await queue.add("bench", PAYLOAD, opts);
    let n = 0;
    const start = now();
    const end = start + p.duration_s * 1000;
    const loop = async () => {
      while (now() < end) {
        await queue.add("bench", PAYLOAD, opts);
        n += 1;
      }
    };
    await Promise.all(Array.from({ length: p.tasks }, loop));
    out = { per_s: (n * 1000) / (now() - start) };
  } else if (mode === "bulk" || mode === "fill") {
    const start = now();
    for (let first = 0; first < p.jobs; first += p.batch) {
      const size = Math.min(p.batch, p.jobs - first);
      await queue.addBulk(Array.from({ length: size }, () => ({ name: "bench", data: PAYLOAD, opts })));
    }
    out = { jobs: p.jobs, per_s: (p.jobs * 1000) / (now() - start) };
  } else if (mode === "worker") {
    let done = 0;
    let finish;
    const finished = new Promise((resolve) => (finish = resolve));
    const cpu0 = cpuSeconds();
    const start = now();
    const worker = new Worker(p.queue, async () => null, {
      connection, concurrency: p.concurrency, removeOnComplete: { count: 0 }, removeOnFail: { count: 0 },
    });
    worker.on("completed", () => {
      done += 1;
      if (done === p.jobs) finish();
    });
    await finished;
    const elapsed = now() - start;
    const cpu = cpuSeconds() - cpu0;
    await worker.close();
    out = { jobs: p.jobs, per_s: (p.jobs * 1000) / elapsed, cpu_s: cpu };
  } else if (mode === "lateness") {
    const late = [];
    let finish;
    const finished = new Promise((resolve) => (finish = resolve));
    const worker = new Worker(
      p.queue,
      async (job) => {
        late.push(now() - job.data.run_at);
        if (late.length === p.count) finish();
        return null;
      },
      { connection, concurrency: p.concurrency, removeOnComplete: { count: 0 } },
    );
    await worker.waitUntilReady();
    const base = Date.now() + p.lead_ms;
    const schedule = async (first) => {
      for (let i = first; i < p.count; i += p.tasks) {
        const runAt = base + i * p.step_ms;
        // BullMQ's run-at is the job's timestamp (Date.now() when added) + its delay.
        const t = Date.now();
        await queue.add("late", { run_at: runAt }, { ...opts, timestamp: t, delay: Math.max(0, runAt - t) });
      }
    };
    await Promise.all(Array.from({ length: p.tasks }, (_, i) => schedule(i)));
    const timeout = new Promise((resolve) => setTimeout(resolve, p.lead_ms + p.count * p.step_ms + 10000));
    await Promise.race([finished, timeout]);
    await worker.close();
    out = { lateness_ms: late };
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  if (mode !== "fill") await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
