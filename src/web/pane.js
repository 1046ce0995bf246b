// The web pane: a client of the daemon's HTTP API on its own origin. It is signed in by the
// session cookie the one-time link set (HttpOnly, so this script never sees it); the browser
// sends it with these same-origin requests, and their Origin header with every change.
"use strict";

const $ = (id) => document.getElementById(id);
let session = null;
let tools = [];

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = { raw: text }; }
  if (!r.ok && r.status !== 502 && r.status !== 503) {
    const msg = json && json.error ? json.error.message : `HTTP ${r.status}`;
    throw new Error(msg);
  }
  return { status: r.status, json };
}

function show(el, text, isError) {
  el.textContent = text;
  el.classList.toggle("error", !!isError);
}

async function loadSettings() {
  try {
    const h = await api("GET", "/healthz");
    show($("health"), h.json && h.json.ok ? "the daemon is running" : "?");
    const { json } = await api("GET", "/extensions");
    const box = $("mcp-enabled");
    box.checked = !!(json.mcp && json.mcp.enabled);
    box.disabled = false;
  } catch (e) {
    show($("settings-status"), e.message, true);
  }
}

async function setEnabled() {
  const box = $("mcp-enabled");
  box.disabled = true;
  try {
    const { json } = await api("PUT", "/extensions/mcp", { enabled: box.checked });
    const errs = json.errors || [];
    show($("settings-status"), errs.length ? `saved; some sessions could not follow: ${errs.join("; ")}` : "saved");
  } catch (e) {
    box.checked = !box.checked;
    show($("settings-status"), e.message, true);
  } finally {
    box.disabled = false;
  }
}

async function reload() {
  try {
    const { json } = await api("POST", "/extensions/mcp/reload", {});
    const n = Object.keys(json.sessions || {}).length;
    show($("settings-status"), `re-read; ${n} open session(s) prepared again`);
  } catch (e) {
    show($("settings-status"), e.message, true);
  }
}

function renderView(view) {
  const body = $("servers").querySelector("tbody");
  body.replaceChildren();
  for (const s of view.servers || []) {
    const tr = document.createElement("tr");
    const cells = [s.name, s.state + (s.switched_off ? " (off)" : ""), s.transport, s.era || "",
      s.protocol_version || "", String(s.tools), s.last_error || s.warning || ""];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  $("servers").hidden = false;
  const w = $("warnings");
  w.replaceChildren();
  for (const text of [...(view.warnings || []), ...(view.error ? [view.error] : [])]) {
    const li = document.createElement("li");
    li.textContent = text;
    w.appendChild(li);
  }
}

async function openSession() {
  $("open").disabled = true;
  try {
    const { json } = await api("POST", "/sessions", { extensions: { mcp: true } });
    session = json.id;
    $("session-id").textContent = `session ${session}`;
    $("close").disabled = false;
    renderView(json);
    await loadTools();
  } catch (e) {
    show($("settings-status"), e.message, true);
    $("open").disabled = false;
  }
}

async function loadTools() {
  const { json } = await api("GET", `/sessions/${encodeURIComponent(session)}/tools`);
  tools = json.tools || [];
  const sel = $("tool");
  sel.replaceChildren();
  for (const t of tools) {
    const o = document.createElement("option");
    o.value = t.name;
    o.textContent = t.name;
    sel.appendChild(o);
  }
  $("tools-section").hidden = tools.length === 0;
  describe();
}

function describe() {
  const t = tools.find((x) => x.name === $("tool").value);
  $("tool-description").textContent = t ? (t.description || "") : "";
}

async function call() {
  const name = $("tool").value;
  let args;
  try {
    args = JSON.parse($("arguments").value || "{}");
  } catch (e) {
    show($("result"), `the arguments are not JSON: ${e.message}`, true);
    return;
  }
  show($("result"), "calling…");
  try {
    const r = await api("POST", `/sessions/${encodeURIComponent(session)}/tools/${encodeURIComponent(name)}/call`,
      { arguments: args });
    show($("result"), JSON.stringify(r.json, null, 2), r.status !== 200 || (r.json && r.json.isError));
    const v = await api("GET", `/sessions/${encodeURIComponent(session)}`);
    renderView(v.json);
  } catch (e) {
    show($("result"), e.message, true);
  }
}

async function closeSession() {
  if (!session) return;
  try {
    await api("DELETE", `/sessions/${encodeURIComponent(session)}`);
  } catch (_) { /* gone already */ }
  session = null;
  $("session-id").textContent = "";
  $("servers").hidden = true;
  $("tools-section").hidden = true;
  $("warnings").replaceChildren();
  $("close").disabled = true;
  $("open").disabled = false;
}

window.addEventListener("DOMContentLoaded", () => {
  $("mcp-enabled").addEventListener("change", setEnabled);
  $("reload").addEventListener("click", reload);
  $("open").addEventListener("click", openSession);
  $("close").addEventListener("click", closeSession);
  $("tool").addEventListener("change", describe);
  $("call").addEventListener("click", call);
  loadSettings();
});
