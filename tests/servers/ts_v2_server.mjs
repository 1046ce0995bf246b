// A dual-era test server written with the TypeScript SDK v2: @modelcontextprotocol/server 2.4.0
// (McpServer, serveStdio, createMcpHandler) and @modelcontextprotocol/node 2.1.2 (toNodeHandler).
//
// Usage: node ts_v2_server.mjs NODE_MODULES_DIR [--transport stdio|http] [--port N] [--port-file F]
//   NODE_MODULES_DIR   the node_modules holding the SDK (normally .peers/npm/node_modules); the
//                      SDK is imported from there by absolute path, because the daemon launches
//                      stdio servers with only HOME/PATH/TMPDIR in the environment (no NODE_PATH).
//   --transport stdio  (default) serveStdio: newline-delimited JSON-RPC on stdin/stdout.
//   --transport http   createMcpHandler behind node:http at http://127.0.0.1:N/mcp (127.0.0.1
//                      only; any other path gets 404). --port 0 (default) takes a free port.
//   --port-file F      (http) write the bound port (decimal, newline) to F once listening.
//   --cancel-log F     append the reason of every cancelled `wait` call to F, one per line
//                      (the `reason` of notifications/cancelled, or "Connection closed" when
//                      the request's stream or the connection closed first).
//   --header-log F     (http) append one JSON line per HTTP request as received, before the SDK
//                      sees it: {"method": <HTTP method>, "rpc": <JSON-RPC method or null>,
//                      "headers": {<every request header, lower-cased names>}}. The body is
//                      read here and handed to the SDK already parsed.
//   --bad-header-tools also register two tools whose `x-mcp-header` annotations break the
//                      rules (the SDK serves them and warns on stderr; a conforming HTTP client
//                      leaves them out): dup_header_tool (`Region` and `region` on two
//                      properties) and nested_header_tool (`Item` on an array's `items`).
//
// Both eras, as the SDK serves them:
//   - 2026-07-28: server/discover, per-request `_meta` envelope, subscriptions/listen (served by
//     the SDK's listen router: `notifications/subscriptions/acknowledged` first, then the
//     stream's notifications stamped with `_meta["io.modelcontextprotocol/subscriptionId"]`).
//   - legacy: initialize. stdio pins the era from the first message it reads (a server/discover
//     opens a throw-away "probe" instance; an `initialize` after it discards the probe and pins
//     legacy; any other modern request pins modern, and a later `initialize` then gets -32022).
//     HTTP legacy is stateless: no Mcp-Session-Id, GET and DELETE answer 405, so a legacy HTTP
//     client never receives notifications/tools/list_changed (it has no GET stream).
//
// Capabilities: tools { listChanged: true }.
// Tools:
//   echo(message: string)   -> text "<message>"
//   add_tool(name: string)  -> registers a new tool `name` (an echo: returns "<name>: <message>")
//                              for the rest of the process's life and emits
//                              notifications/tools/list_changed: over stdio through the pinned
//                              instance (legacy: plain notification; modern: on every open
//                              subscriptions/listen stream that asked for toolsListChanged);
//                              over HTTP through the handler's event bus onto open listen
//                              streams. Text "added <name>"; adding an existing name is an
//                              isError result.
//   region_tool(region: string, `"x-mcp-header": "Region"` on `region`)
//                           -> over HTTP: text = the raw value of the `Mcp-Param-Region` request
//                              header as received (so base64 `=?base64?...?=` stays visible), or
//                              "<no Mcp-Param-Region header>". The SDK itself validates the header
//                              against the argument before the tool runs (mismatch or missing ->
//                              HTTP 400 -32020). Over stdio there are no headers: text =
//                              "stdio: <region>". structuredContent is always
//                              {"header": <raw value or null>, "region": <argument>, "transport": ...}.
//   wait(ms: number)        -> waits ms, or until the request's AbortSignal fires (the client
//                              closed the request's stream, or sent notifications/cancelled);
//                              text "waited <ms> ms" or "cancelled".
//   cancelled_count()       -> text: how many `wait` calls this process saw cancelled.
import path from "node:path";
import http from "node:http";
import fs from "node:fs";
import { pathToFileURL } from "node:url";

const argv = process.argv.slice(2);
let modules = null;
let transport = "stdio";
let port = 0;
let portFile = null;
let cancelLog = null;
let headerLog = null;
let badHeaderTools = false;
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === "--transport") transport = argv[++i];
  else if (a === "--port") port = Number(argv[++i]);
  else if (a === "--port-file") portFile = argv[++i];
  else if (a === "--cancel-log") cancelLog = argv[++i];
  else if (a === "--header-log") headerLog = argv[++i];
  else if (a === "--bad-header-tools") badHeaderTools = true;
  else if (!a.startsWith("--") && modules === null) modules = a;
  else {
    process.stderr.write(`ts_v2_server: unknown argument ${a}\n`);
    process.exit(2);
  }
}
if (modules === null) {
  modules = path.join(path.dirname(new URL(import.meta.url).pathname), "../../.peers/npm/node_modules");
}
if (transport !== "stdio" && transport !== "http") {
  process.stderr.write(`ts_v2_server: --transport must be stdio or http\n`);
  process.exit(2);
}
const load = (p) => import(pathToFileURL(path.resolve(modules, p)).href);
const { McpServer, fromJsonSchema, createMcpHandler } = await load("@modelcontextprotocol/server/dist/index.mjs");

const messageSchema = () =>
  fromJsonSchema({ type: "object", properties: { message: { type: "string" } }, required: ["message"] });

// Tools added at run time, shared by every instance the factory builds (HTTP builds one per
// request; stdio one per connection plus a discarded discover probe).
const addedTools = [];
let notifyToolsChanged = null; // HTTP: the handler's bus; stdio: each instance registers itself.
// `wait` calls whose request was cancelled (HTTP 2026-07-28: the request's stream closed;
// stdio: notifications/cancelled), process-wide.
let cancelledCalls = 0;

function registerAdded(server, name) {
  server.registerTool(
    name,
    { description: `Added at run time: echoes "${name}: <message>"`, inputSchema: messageSchema() },
    async ({ message }) => ({ content: [{ type: "text", text: `${name}: ${message}` }] }),
  );
}

function build() {
  const server = new McpServer(
    { name: "ts-v2-test", version: "2.4.0-test" },
    { capabilities: { tools: { listChanged: true } } },
  );
  server.registerTool(
    "echo",
    { description: "Echoes back the message", inputSchema: messageSchema() },
    async ({ message }) => ({ content: [{ type: "text", text: message }] }),
  );
  server.registerTool(
    "add_tool",
    {
      description: "Registers a new echo tool with the given name (emits tools/list_changed)",
      inputSchema: fromJsonSchema({ type: "object", properties: { name: { type: "string" } }, required: ["name"] }),
    },
    async ({ name }) => {
      if (addedTools.includes(name) || ["echo", "add_tool", "region_tool"].includes(name)) {
        return { content: [{ type: "text", text: `tool ${name} exists` }], isError: true };
      }
      addedTools.push(name);
      if (notifyToolsChanged) {
        // HTTP: this instance lives for one request; the bus reaches the open listen streams.
        notifyToolsChanged();
      } else {
        // stdio: this is the connection's pinned instance; registering sends list_changed.
        registerAdded(server, name);
      }
      return { content: [{ type: "text", text: `added ${name}` }] };
    },
  );
  server.registerTool(
    "region_tool",
    {
      description: "Returns the Mcp-Param-Region header it received (HTTP)",
      inputSchema: fromJsonSchema({
        type: "object",
        properties: { region: { type: "string", "x-mcp-header": "Region" } },
        required: ["region"],
      }),
    },
    async ({ region }, ctx) => {
      const req = ctx?.http?.req;
      const header = req ? req.headers.get("mcp-param-region") : null;
      const text = req ? (header ?? "<no Mcp-Param-Region header>") : `stdio: ${region}`;
      return {
        content: [{ type: "text", text }],
        structuredContent: { header, region, transport: req ? "http" : "stdio" },
      };
    },
  );
  server.registerTool(
    "wait",
    {
      description: "Waits `ms` milliseconds, or until the request is cancelled (counted)",
      inputSchema: fromJsonSchema({ type: "object", properties: { ms: { type: "number" } }, required: ["ms"] }),
    },
    async ({ ms }, ctx) => {
      const signal = ctx?.mcpReq?.signal;
      const cancelled = await new Promise((resolve) => {
        const t = setTimeout(() => resolve(false), ms);
        signal?.addEventListener(
          "abort",
          () => {
            clearTimeout(t);
            resolve(true);
          },
          { once: true },
        );
      });
      if (cancelled) {
        cancelledCalls += 1;
        if (cancelLog) {
          const r = signal.reason;
          const why = typeof r === "string" ? r : (r?.message ?? String(r));
          fs.appendFileSync(cancelLog, `${why}\n`);
        }
      }
      return { content: [{ type: "text", text: cancelled ? "cancelled" : `waited ${ms} ms` }] };
    },
  );
  server.registerTool(
    "cancelled_count",
    { description: "How many `wait` calls this process saw cancelled", inputSchema: fromJsonSchema({ type: "object" }) },
    async () => ({ content: [{ type: "text", text: String(cancelledCalls) }] }),
  );
  if (badHeaderTools) {
    server.registerTool(
      "dup_header_tool",
      {
        description: "Two properties claim the same header, case-insensitively (invalid)",
        inputSchema: fromJsonSchema({
          type: "object",
          properties: {
            a: { type: "string", "x-mcp-header": "Region" },
            b: { type: "string", "x-mcp-header": "region" },
          },
        }),
      },
      async () => ({ content: [{ type: "text", text: "dup_header_tool ran" }] }),
    );
    server.registerTool(
      "nested_header_tool",
      {
        description: "A header on an array's items, not reached through properties (invalid)",
        inputSchema: fromJsonSchema({
          type: "object",
          properties: { list: { type: "array", items: { type: "string", "x-mcp-header": "Item" } } },
        }),
      },
      async () => ({ content: [{ type: "text", text: "nested_header_tool ran" }] }),
    );
  }
  for (const name of addedTools) registerAdded(server, name);
  return server;
}

if (transport === "stdio") {
  const { serveStdio } = await load("@modelcontextprotocol/server/dist/stdio.mjs");
  serveStdio(() => build(), {
    onerror: (e) => process.stderr.write(`ts_v2_server: ${e?.message ?? e}\n`),
  });
} else {
  const { toNodeHandler } = await load("@modelcontextprotocol/node/dist/index.mjs");
  const handler = createMcpHandler(() => build(), {
    onerror: (e) => process.stderr.write(`ts_v2_server: ${e?.message ?? e}\n`),
  });
  notifyToolsChanged = () => handler.notify.toolsChanged();
  const node = toNodeHandler(handler);
  const srv = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (url.pathname !== "/mcp") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    const serve = (parsed) =>
      node(req, res, parsed).catch((e) => {
        process.stderr.write(`ts_v2_server: ${e?.message ?? e}\n`);
        if (!res.headersSent) res.writeHead(500).end();
      });
    if (!headerLog) {
      serve(undefined);
      return;
    }
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      let parsed;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        res.writeHead(400, { "content-type": "text/plain" }).end("not JSON\n");
        return;
      }
      const rpc = parsed && !Array.isArray(parsed) && typeof parsed.method === "string" ? parsed.method : null;
      fs.appendFileSync(headerLog, JSON.stringify({ method: req.method, rpc, headers: req.headers }) + "\n");
      serve(parsed);
    });
  });
  srv.listen(port, "127.0.0.1", () => {
    const bound = srv.address().port;
    process.stderr.write(`ts_v2_server: listening on http://127.0.0.1:${bound}/mcp\n`);
    if (portFile) {
      const tmp = `${portFile}.tmp${process.pid}`;
      fs.writeFileSync(tmp, `${bound}\n`);
      fs.renameSync(tmp, portFile);
    }
  });
  const stop = () => {
    handler.close().finally(() => process.exit(0));
    srv.close();
    srv.closeAllConnections?.();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
