// The TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0) under the same load as
// albedo's (see albedo-mcp-bench). Usage: node ts-client.mjs '<job JSON>'; prints one JSON
// line with the results. The job is the one albedo-mcp-bench gives every client:
//   {"transport": "stdio", "command": ..., "args": [...]} or {"transport": "http", "url": ...},
//   "tool", "arguments", "levels" (calls in flight), "duration_ms" and "warmup_ms" (time-boxed)
//   or "calls" (a fixed count), and "node_modules" (where the SDK is installed; it is imported
//   from there by absolute path).
// The client runs as the SDK documents it: Client with versionNegotiation 'auto' (2026-07-28
// when the server offers it), StdioClientTransport or StreamableHTTPClientTransport, tools
// listed once, then callTool.
// A job with "many" (albedo-mcp-bench's measure.rs, `Many`, says what it holds) connects that
// many servers, dials_at_once at a time, calls round them at one level, and runs the agent
// fleet over them: the schedule of the bench's schedule.rs, written again below (fleetRun),
// its period, windows and slow mark sent in the job.
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const job = JSON.parse(process.argv[2] ?? '{}');
const nm = job.node_modules ?? process.env.PEERS_NPM_MODULES;
const sdk = await import(pathToFileURL(path.join(nm, '@modelcontextprotocol/client/dist/index.mjs')).href);
const { Client, StreamableHTTPClientTransport } = sdk;

function cpuUs() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.round((sorted.length - 1) * p);
  return sorted[Math.min(i, sorted.length - 1)];
}

async function connect(target) {
  let transport;
  if (target.transport === 'stdio') {
    const { StdioClientTransport } = await import(
      pathToFileURL(path.join(nm, '@modelcontextprotocol/client/dist/stdio.mjs')).href
    );
    transport = new StdioClientTransport({
      command: target.command,
      args: target.args ?? [],
      stderr: 'ignore',
      // The default (10 MiB) is below a 10 MiB result's line; albedo allows 16 MiB.
      maxBufferSize: 32 * 1024 * 1024,
    });
  } else {
    transport = new StreamableHTTPClientTransport(new URL(target.url));
  }
  const client = new Client(
    { name: 'albedo-bench-ts', version: '1.0.0' },
    { versionNegotiation: { mode: 'auto' } },
  );
  await client.connect(transport);
  const { tools } = await client.listTools();
  return { client, tools: tools.length };
}

async function one(client) {
  const r = await client.callTool({ name: job.tool ?? 'echo', arguments: job.arguments ?? {} });
  if (r.isError) throw new Error('the tool answered isError');
  let n = 0;
  for (const c of r.content ?? []) if (typeof c.text === 'string') n += Buffer.byteLength(c.text);
  return n;
}

// `concurrency` loops over `clients`: loop w calls clients[w], then clients[w + concurrency],
// and so on round the list, as the API's load generator walks its paths.
async function runLevel(clients, concurrency, until, calls) {
  const lat = [];
  let bytes = 0;
  let errors = 0;
  let started = 0;
  const worker = async (w) => {
    for (let i = w; ; i += concurrency) {
      if (until !== null && performance.now() >= until) break;
      if (calls !== null && started++ >= calls) break;
      const t = performance.now();
      try {
        const n = await one(clients[i % clients.length]);
        bytes += n;
        lat.push(Math.round((performance.now() - t) * 1000));
      } catch (e) {
        if (errors++ === 0) console.error(`ts client: call failed: ${e?.message ?? e}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return { lat, bytes, errors };
}

// One record per level of `spec` (levels, duration_ms, warmup_ms or calls), as measure.rs's
// `levels` makes them.
async function levels(clients, spec) {
  const out = [];
  const calls = spec.calls ?? null;
  for (const c of spec.levels ?? [1]) {
    if (calls === null) await runLevel(clients, c, performance.now() + (spec.warmup_ms ?? 200), null);
    else await runLevel(clients, 1, null, 1);
    const cpu0 = cpuUs();
    const t = performance.now();
    const until = calls === null ? performance.now() + (spec.duration_ms ?? 1000) : null;
    const { lat, bytes, errors } = await runLevel(clients, c, until, calls);
    out.push(record(c, lat, bytes, errors, (performance.now() - t) / 1000, cpuUs() - cpu0));
  }
  return out;
}

function record(concurrency, lat, bytes, errors, elapsed, cpu) {
  lat.sort((a, b) => a - b);
  return {
    concurrency,
    calls: lat.length,
    errors,
    elapsed_s: elapsed,
    p50_us: pct(lat, 0.5),
    p99_us: pct(lat, 0.99),
    cpu_us: cpu,
    result_bytes: bytes,
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

// The agent fleet (schedule.rs): every group calls once per period, to its clients in turn,
// the groups spread over the first period; a call that takes longer than the period delays
// that group's next one (ticks are skipped, not bunched, as tokio's MissedTickBehavior::Skip).
async function fleetRun(groups, f) {
  const began = performance.now();
  const until = began + f.duration_ms;
  const n = Math.max(groups.length, 1);
  const lat = [];
  let errors = 0;
  const slow = new Set();
  await Promise.all(
    groups.map(async (group, k) => {
      let next = began + (f.period_ms * k) / n;
      for (let i = 0; ; i++) {
        await sleep(next - performance.now());
        const t = performance.now();
        if (t >= until) break;
        try {
          await one(group[i % group.length]);
          const l = Math.round((performance.now() - t) * 1000);
          lat.push(l);
          if (l > f.slow_us) slow.add(Math.floor((t - began) / f.window_ms));
        } catch (e) {
          if (errors++ === 0) console.error(`ts client: a fleet call failed: ${e?.message ?? e}`);
        }
        next += f.period_ms;
        const now = performance.now();
        if (next <= now) next += Math.ceil((now - next) / f.period_ms) * f.period_ms;
      }
    }),
  );
  return { lat, errors, slowWindows: slow.size };
}

function rssKib() {
  return Math.round(process.memoryUsage().rss / 1024);
}

async function many(m) {
  const rss = { start: rssKib() };
  const t0 = performance.now();
  const clients = [];
  let tools = 0;
  const n = Math.max(m.connections ?? 1, 1);
  while (clients.length < n) {
    const from = clients.length;
    const more = Math.min(n - from, Math.max(m.dials_at_once ?? 1, 1));
    const batch = await Promise.all(
      Array.from({ length: more }, (_, j) => {
        const target = { ...job };
        if (m.indexed_urls) target.url = `${job.url.replace(/\/+$/, '')}/${from + j}`;
        return connect(target);
      }),
    );
    for (const c of batch) {
      clients.push(c.client);
      tools += c.tools;
    }
  }
  const connectMs = performance.now() - t0;
  rss.connected = rssKib();
  if ((m.idle_ms ?? 0) > 0) await sleep(m.idle_ms);
  rss.idle = rssKib();
  const load = m.load ? (await levels(clients, m.load)).pop() : null;
  rss.busy = rssKib();
  let fleet = null;
  let slowWindows = 0;
  if (m.fleet) {
    const sessions = Math.max(m.fleet.sessions ?? 1, 1);
    const per = Math.max(Math.floor(clients.length / sessions), 1);
    const groups = [];
    for (let i = 0; i < clients.length; i += per) groups.push(clients.slice(i, i + per));
    const cpu0 = cpuUs();
    const t = performance.now();
    const run = await fleetRun(groups, m.fleet);
    fleet = record(sessions, run.lat, 0, run.errors, (performance.now() - t) / 1000, cpuUs() - cpu0);
    slowWindows = run.slowWindows;
  }
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  return {
    connect_ms: connectMs,
    connections: clients.length,
    tools,
    rss_kib: rss,
    load,
    fleet,
    slow_windows: slowWindows,
  };
}

if (job.many) {
  try {
    console.log(JSON.stringify(await many(job.many)));
    process.exit(0);
  } catch (e) {
    console.log(JSON.stringify({ error: `many: ${e?.message ?? e}` }));
    process.exit(1);
  }
}

const t0 = performance.now();
let client;
try {
  ({ client } = await connect(job));
} catch (e) {
  console.log(JSON.stringify({ error: `connect: ${e?.message ?? e}` }));
  process.exit(1);
}
const connectMs = performance.now() - t0;
const out = await levels([client], job);
console.log(JSON.stringify({ connect_ms: connectMs, levels: out }));
await client.close().catch(() => {});
process.exit(0);
