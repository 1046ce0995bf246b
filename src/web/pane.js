// The web pane: a client of the daemon's HTTP API on its own origin. It is signed in by the
// session cookie the one-time link set (HttpOnly, so this script never sees it); the browser
// sends it with these same-origin requests, and their Origin header with every change.
//
// MCP servers and MCP sign-ins are drawn from GET /settings/mcp, read again (debounced)
// whenever GET /settings/mcp/events says anything. The API never answers a secret's value,
// and the masked inputs start empty: a blank secret keeps the stored one, `-` removes it.
"use strict";

const $ = (id) => document.getElementById(id);
let session = null;
let tools = [];

async function api(method, path, body) {
  const r = await exchange(method, path, body);
  if (!r.ok && r.status !== 502 && r.status !== 503) {
    throw new Error(r.json && r.json.error ? r.json.error.message : `HTTP ${r.status}`);
  }
  return { status: r.status, json: r.unreadable !== null ? { raw: r.unreadable } : r.json };
}

// A request whose error answer is returned, not thrown: {ok, status, json, error}, the error
// whole (code, message, field, failures, column).
async function req(method, path, body) {
  try {
    const { ok, status, json } = await exchange(method, path, body);
    const error = ok ? null : (json && json.error) || { code: "", message: `HTTP ${status}` };
    return { ok, status, json, error };
  } catch (e) {
    return { ok: false, status: 0, json: null, error: { code: "", message: `the daemon did not answer: ${e.message}` } };
  }
}

// One exchange with the daemon, for `api` and `req`: {ok, status, json} (json null when the
// answer is empty or not JSON; then `unreadable` is its text, else null). Throws when the
// daemon does not answer.
async function exchange(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let json = null;
  let unreadable = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { unreadable = text; }
  return { ok: r.ok, status: r.status, json, unreadable };
}

function show(el, text, isError) {
  el.textContent = text;
  el.classList.toggle("error", !!isError);
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// ---- MCP servers -------------------------------------------------------------------------

let settings = null; // the last GET /settings/mcp
const logins = {}; // server → the last sign-in view (GET /auth/logins/mcp:<server>)
const pasted = {}; // server → what was typed in its callback field
let confirming = null; // the server whose deletion is being confirmed
let form = null; // {mode: "add" | "edit", name, nameEdited, orig}

const STATES = {
  connected: "connected",
  connecting: "connecting",
  unavailable: "unavailable",
  failed: "failed",
  needs_sign_in: "needs a sign-in",
  not_connected: "not connected (no session holds it)",
  disabled: "disabled",
  invalid: "invalid",
};

function quoteWord(w) {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, "'\\''")}'`;
}

function commandLine(def) {
  return [def.command || "", ...(def.args || [])].map(quoteWord).join(" ");
}

function target(def) {
  return def.type === "stdio" ? commandLine(def) : (def.url || "");
}

function when(secs) {
  if (!secs) return "";
  return new Date(secs * 1000).toLocaleString();
}

function authText(auth) {
  switch (auth && auth.state) {
    case "signed_in": return "signed in" + (auth.expires_at ? `, until ${when(auth.expires_at)}` : "");
    case "needs_sign_in": return "needs a sign-in" + (auth.reason ? `: ${auth.reason}` : "");
    case "signed_out": return "signed out";
    default: return "none";
  }
}

function secretsText(s) {
  if (!s) return "";
  const parts = [];
  if (s.bearer_token) parts.push("bearer token");
  if (s.header) parts.push(`header ${s.header}`);
  for (const k of s.env || []) parts.push(`env ${k}`);
  if (s.oauth_client) parts.push("OAuth client");
  return parts.join(", ");
}

function toolsText(st) {
  if (st.tools === null || st.tools === undefined) return "";
  let t = `${st.tools} tool${st.tools === 1 ? "" : "s"}`;
  if (typeof st.deferred === "number" && st.deferred > 0) t += `, ${st.deferred} deferred`;
  return t;
}

function row(label, value, cls) {
  if (value === "" || value === null || value === undefined) return null;
  return el("div", { class: cls }, el("dt", { text: label }), el("dd", { text: value }));
}

// Draw again and put the focus back on the element with the same data-key. A text field
// drawn again with the same text keeps the caret or the selection it had (a redraw between
// selecting a field's text and typing over it must not turn the selection into a caret);
// with other text, the caret goes to its end.
function keepFocus(draw) {
  const was = document.activeElement;
  const key = was && was.dataset ? was.dataset.key : null;
  const textField = (e) => e && e.tagName === "INPUT" && e.type === "text";
  const before = textField(was) ? { value: was.value, start: was.selectionStart, end: was.selectionEnd, dir: was.selectionDirection } : null;
  draw();
  if (key) {
    const again = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) {
      again.focus();
      if (textField(again)) {
        if (before && before.value === again.value) again.setSelectionRange(before.start, before.end, before.dir);
        else again.selectionStart = again.selectionEnd = again.value.length;
      }
    }
  }
}

function renderServers() {
  const list = $("server-list");
  const servers = Object.entries((settings && settings.servers) || {});
  list.replaceChildren();
  for (const [name, def] of servers) {
    const st = def.status || {};
    const enabled = def.enabled !== false;
    const reason = st.last_error || def.problem || "";
    const era = [st.era, st.protocol_version].filter(Boolean).join(", ");
    const li = el("li", { class: "card", "data-server": name },
      el("div", { class: "card-head" },
        el("h3", { text: name }),
        el("span", { class: `badge s-${st.state || "unknown"}`, "aria-hidden": "true", text: STATES[st.state] || st.state || "?" })),
      el("dl", {},
        row("transport", def.type || "", "transport"),
        row(def.type === "stdio" ? "command" : "url", target(def), "target"),
        row("state", STATES[st.state] || st.state || "?", "state"),
        row("reason", reason, "reason"),
        row("era", era, "era"),
        row("tools", toolsText(st), "tools"),
        row("sign-in", def.type === "http" ? authText(def.auth) : "", "auth"),
        row("secrets set", secretsText(def.secrets), "secrets")));
    const actions = el("div", { class: "actions" });
    if (confirming === name) {
      actions.append(
        el("span", { text: `Delete ${name} and its credentials?`, id: `confirm-${name}` }),
        el("button", { type: "button", class: "danger", "data-key": `really-delete:${name}`,
          "aria-describedby": `confirm-${name}`, text: "Delete", onclick: () => removeServer(name) }),
        el("button", { type: "button", "data-key": `keep:${name}`, text: "Keep it",
          onclick: () => { confirming = null; renderServers(); focusKey(`delete:${name}`); } }));
    } else {
      actions.append(
        el("button", { type: "button", "data-key": `edit:${name}`, "aria-label": `Edit ${name}`,
          text: "Edit", onclick: () => openForm("edit", name) }),
        enabled
          ? el("button", { type: "button", "data-key": `disable:${name}`, "aria-label": `Disable ${name}`,
            text: "Disable", onclick: () => setServerEnabled(name, false) })
          : el("button", { type: "button", "data-key": `enable:${name}`, "aria-label": `Re-enable ${name}`,
            text: "Re-enable", onclick: () => setServerEnabled(name, true) }),
        el("button", { type: "button", "data-key": `delete:${name}`, "aria-label": `Delete ${name}`,
          text: "Delete", onclick: () => { confirming = name; renderServers(); focusKey(`keep:${name}`); } }));
    }
    li.append(actions);
    list.append(li);
  }
  $("no-servers").hidden = servers.length > 0;
  const probs = $("problems");
  probs.replaceChildren(...((settings && settings.problems) || []).map((p) => el("li", { text: p })));
  if (settings && settings.changed_on_disk) {
    probs.append(el("li", { text: "extensions.json was edited by hand: re-read it (below) before changing servers here" }));
  }
}

function focusKey(key) {
  const e = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (e) e.focus();
}

// Once an answer comes, move the focus to `key` only if the user has not put it somewhere
// meanwhile: it is on nothing, or still on `from`, the control that asked.
function focusIfStill(from, key) {
  const a = document.activeElement;
  if (!a || a === document.body || (a.dataset && a.dataset.key === from)) focusKey(key);
}

function render() {
  keepFocus(() => { renderServers(); renderSignIns(); });
}

async function refresh() {
  const r = await req("GET", "/settings/mcp");
  if (!r.ok) {
    show($("list-status"), `could not read the settings: ${r.error.message}`, true);
    return;
  }
  settings = r.json;
  await loginsFor(settings);
  render();
}

// The sign-ins in flight, for servers that may have one: asked once per server, then kept
// up to date from the events.
const asked = new Set();
async function loginsFor(s) {
  const names = Object.entries(s.servers || {})
    .filter(([n, d]) => d.type === "http" && d.auth && d.auth.state !== "none" && !asked.has(n))
    .map(([n]) => n);
  await Promise.all(names.map(async (n) => {
    asked.add(n);
    await readLogin(n);
  }));
}

async function readLogin(name) {
  const r = await req("GET", loginPath(name));
  if (r.ok) logins[name] = r.json;
  else if (r.status === 404) delete logins[name];
}

let refreshTimer = null;
function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refresh, 150);
}

function follow() {
  const es = new EventSource("/settings/mcp/events");
  const heard = (ev) => {
    let data = null;
    try { data = JSON.parse(ev.data); } catch (_) { data = null; }
    if (data && data.kind === "sign_in" && data.server) {
      readLogin(data.server).then(refreshSoon);
    } else {
      refreshSoon();
    }
  };
  for (const kind of ["settings", "sign_in", "sessions", "servers", "message"]) {
    es.addEventListener(kind, heard);
  }
  es.onopen = () => { $("live").textContent = "live"; refreshSoon(); };
  es.onerror = () => {
    // The browser tries again by itself, unless the daemon refused the stream (this page's
    // sign-in ended: the daemon restarted or its token was rotated).
    $("live").textContent = es.readyState === EventSource.CLOSED
      ? "not following the daemon any more: run `albedo-mcp web` for a new link"
      : "reconnecting to the daemon's events…";
  };
}

// ---- the form ----------------------------------------------------------------------------

function transport() {
  return document.querySelector('input[name="transport"]:checked').value;
}

function setTransport(t) {
  for (const r of document.querySelectorAll('input[name="transport"]')) r.checked = r.value === t;
  for (const e of $("server-form").querySelectorAll("[data-for]")) e.hidden = e.dataset.for !== t;
}

function envRow(key, stored) {
  const i = $("env-rows").children.length;
  const keyInput = el("input", { id: `f-env-key-${i}`, type: "text", autocomplete: "off", spellcheck: "false",
    class: "env-key", placeholder: "KEY", value: key || "" });
  const valInput = el("input", { id: `f-env-value-${i}`, type: "password", autocomplete: "new-password",
    spellcheck: "false", class: "env-value", "data-stored": stored ? "1" : null });
  if (stored) keyInput.readOnly = true;
  return el("div", { class: "env-row" },
    el("div", { class: "field" }, el("label", { for: keyInput.id, text: `Variable ${i + 1}` }), keyInput),
    el("div", { class: "field" }, el("label", { for: valInput.id, text: `Value ${i + 1}` + (stored ? " (set)" : "") }), valInput));
}

function clearErrors() {
  show($("form-error"), "");
  for (const e of $("server-form").querySelectorAll("[aria-invalid]")) e.removeAttribute("aria-invalid");
}

function openForm(mode, name) {
  if (mode === "edit" && !(settings && settings.servers && settings.servers[name])) {
    show($("list-status"), `${name} is not configured any more`, true);
    return;
  }
  const f = $("server-form");
  clearErrors();
  $("env-rows").replaceChildren();
  for (const id of ["f-url", "f-command", "f-name", "f-bearer", "f-header-name", "f-header-value"]) $(id).value = "";
  $("form-busy").textContent = "";
  const def = mode === "edit" ? settings.servers[name] : null;
  form = { mode, name: name || "", nameEdited: mode === "edit", orig: def };
  $("form-title").textContent = mode === "edit" ? `Edit ${name}` : "New server";
  $("f-name").readOnly = mode === "edit";
  for (const h of f.querySelectorAll(".secret-hint")) h.hidden = mode !== "edit";
  $("f-name-hint").textContent = mode === "edit"
    ? "A server keeps its name; delete it and add it again to rename it."
    : "Suggested from the URL or the command until you type one.";
  if (def) {
    setTransport(def.type === "stdio" ? "stdio" : "http");
    $("f-name").value = name;
    if (def.type === "stdio") $("f-command").value = commandLine(def);
    else $("f-url").value = def.url || "";
    const s = def.secrets || {};
    $("f-header-name").value = s.header || "";
    $("f-bearer").placeholder = s.bearer_token ? "set (blank keeps it)" : "";
    $("f-header-value").placeholder = s.header ? "set (blank keeps it)" : "";
    for (const k of s.env || []) $("env-rows").append(envRow(k, true));
  } else {
    setTransport("http");
    $("f-bearer").placeholder = "";
    $("f-header-value").placeholder = "";
  }
  if ($("env-rows").children.length === 0) $("env-rows").append(envRow("", false));
  for (const v of $("env-rows").querySelectorAll(".env-value[data-stored]")) v.placeholder = "set (blank keeps it)";
  f.hidden = false;
  $("add-server").hidden = true;
  const first = document.querySelector('input[name="transport"]:checked');
  first.focus();
}

function closeForm() {
  const back = form && form.mode === "edit" ? `edit:${form.name}` : null;
  form = null;
  $("server-form").hidden = true;
  $("add-server").hidden = false;
  for (const id of ["f-bearer", "f-header-value"]) $(id).value = "";
  $("env-rows").replaceChildren();
  if (back && document.querySelector(`[data-key="${CSS.escape(back)}"]`)) focusKey(back);
  else $("add-server").focus();
}

let suggestTimer = null;
function suggestSoon() {
  if (!form || form.mode !== "add" || form.nameEdited) return;
  clearTimeout(suggestTimer);
  suggestTimer = setTimeout(suggest, 250);
}

async function suggest() {
  if (!form || form.nameEdited) return;
  const t = transport();
  const value = (t === "http" ? $("f-url") : $("f-command")).value.trim();
  if (!value) return;
  const q = t === "http" ? `url=${encodeURIComponent(value)}` : `command_line=${encodeURIComponent(value)}`;
  const r = await req("GET", `/settings/mcp/suggest-name?${q}`);
  if (r.ok && form && !form.nameEdited && transport() === t) {
    $("f-name").value = r.json.name;
    $("f-name-hint").textContent = "Suggested from the URL or the command; type another to change it.";
  }
}

// The field an error names (`servers.x.url`, `secrets.x.header.value`) → its input.
function inputFor(field) {
  const p = (field || "").split(".");
  if (p[0] === "servers") {
    const f = p[2];
    if (!f) return $("f-name");
    if (f === "url") return $("f-url");
    if (["command_line", "command", "args", "cwd"].includes(f)) return $("f-command");
    if (f === "type") return document.querySelector('input[name="transport"]:checked');
    return null;
  }
  if (p[0] === "secrets") {
    const f = p[2];
    if (f === "bearer_token") return $("f-bearer");
    if (f === "header") return p[3] === "name" ? $("f-header-name") : $("f-header-value");
    if (f === "env") {
      for (const k of $("env-rows").querySelectorAll(".env-key")) {
        if (k.value.trim() === p[3]) return p[4] === undefined ? k.parentElement.nextSibling.querySelector("input") : k;
      }
    }
  }
  return null;
}

function formError(text, input) {
  const box = $("form-error");
  show(box, text, true);
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-errormessage", "form-error");
    input.focus();
  } else {
    box.focus();
  }
}

// The PATCH body the form asks for, or a message saying what is missing.
function patchBody() {
  const t = transport();
  const name = $("f-name").value.trim();
  const edit = form.mode === "edit";
  const orig = form.orig || {};
  if (!name) return { error: "Give the server a name.", input: $("f-name") };
  if (!edit && settings && settings.servers && settings.servers[name]) {
    return { error: `A server named ${name} exists already: pick another name, or edit that one.`, input: $("f-name") };
  }
  const fields = {};
  const origType = orig.type === "stdio" ? "stdio" : "http";
  if (!edit || t !== origType) fields.type = t;
  if (t === "http") {
    const url = $("f-url").value.trim();
    if (!url) return { error: "Give the server's URL.", input: $("f-url") };
    if (!edit || fields.type || url !== (orig.url || "")) fields.url = url;
  } else {
    const line = $("f-command").value.trim();
    if (!line) return { error: "Give the command that starts the server.", input: $("f-command") };
    if (!edit || fields.type || line !== commandLine(orig)) fields.command_line = line;
  }
  const secrets = {};
  if (t === "http") {
    const bearer = $("f-bearer").value;
    if (bearer !== "") secrets.bearer_token = bearer;
    const hName = $("f-header-name").value.trim();
    const hValue = $("f-header-value").value;
    const origHeader = (orig.secrets && orig.secrets.header) || "";
    if (hValue === "-") secrets.header = "-";
    else if (hValue !== "") secrets.header = { name: hName || origHeader, value: hValue };
    else if (hName && hName !== origHeader) secrets.header = { name: hName, value: "" };
  } else {
    const env = {};
    for (const r of $("env-rows").querySelectorAll(".env-row")) {
      const key = r.querySelector(".env-key").value.trim();
      const value = r.querySelector(".env-value").value;
      if (!key && !value) continue;
      if (!key) return { error: "An environment value needs its variable's name.", input: r.querySelector(".env-key") };
      if (value !== "") env[key] = value;
      else if (!r.querySelector(".env-value").dataset.stored) {
        return { error: `Give a value for ${key} (or leave both blank).`, input: r.querySelector(".env-value") };
      }
    }
    if (Object.keys(env).length) secrets.env = env;
  }
  const body = {};
  if (Object.keys(fields).length) body.servers = { [name]: fields };
  if (Object.keys(secrets).length) body.secrets = { [name]: secrets };
  if (!body.servers && !body.secrets) return { error: "Nothing was changed." };
  return { body, name };
}

async function saveForm(ev) {
  ev.preventDefault();
  if (!form) return;
  clearErrors();
  const p = patchBody();
  if (p.error) { formError(p.error, p.input); return; }
  const mine = form;
  $("save").disabled = true;
  $("form-busy").textContent = "saving: the daemon starts the server first…";
  const r = await req("PATCH", "/settings/mcp", p.body);
  $("save").disabled = false;
  $("form-busy").textContent = "";
  if (form !== mine) {
    // The form was closed or opened for another server meanwhile: say how it went only.
    show($("list-status"), r.ok ? `saved ${p.name}` : `${p.name} was not saved: ${r.error.message}`, !r.ok);
    if (r.ok) { settings = r.json; render(); }
    return;
  }
  if (!r.ok) {
    const e = r.error;
    let text = e.message;
    if (e.code === "server_failed" && e.failures) {
      text = `Not saved: nothing was changed. ${Object.entries(e.failures).map(([n, why]) => `${n} could not start: ${why}`).join("; ")}`;
    } else if (e.code === "invalid_settings") {
      text = `Not saved (${e.field || "invalid"}): ${e.message}`;
    } else if (e.code === "changed_on_disk") {
      text = `Not saved: ${e.message}`;
    }
    formError(text, e.code === "invalid_settings" ? inputFor(e.field) : null);
    return;
  }
  settings = r.json;
  const tested = (r.json.tested || {})[p.name];
  let msg = `saved ${p.name}`;
  if (tested && tested.state === "connected") msg += `: ${tested.tools} tool${tested.tools === 1 ? "" : "s"}`;
  else if (tested && tested.state === "needs_sign_in") msg += ": it asks for a sign-in (see MCP sign-ins)";
  show($("list-status"), msg);
  asked.delete(p.name);
  await loginsFor(settings);
  render();
  closeForm();
}

async function patchFromList(body, done) {
  show($("list-status"), "saving…");
  const r = await req("PATCH", "/settings/mcp", body);
  if (!r.ok) {
    const e = r.error;
    const failures = e.failures ? ` (${Object.entries(e.failures).map(([n, w]) => `${n}: ${w}`).join("; ")})` : "";
    show($("list-status"), `${e.message}${failures && !e.message.includes("could not start") ? failures : ""}`, true);
    return false;
  }
  settings = r.json;
  show($("list-status"), done);
  render();
  return true;
}

async function setServerEnabled(name, on) {
  const ok = await patchFromList({ servers: { [name]: { enabled: on } } },
    on ? `re-enabled ${name}` : `disabled ${name}`);
  if (ok) focusKey(on ? `disable:${name}` : `enable:${name}`);
}

async function removeServer(name) {
  confirming = null;
  const ok = await patchFromList({ servers: { [name]: null } }, `deleted ${name}`);
  delete logins[name];
  asked.delete(name);
  if (ok) $("add-server").focus();
  else render();
}

// ---- MCP sign-ins ------------------------------------------------------------------------

const FLIGHT = ["pending", "completing", "starting"];

function loginPath(name) {
  return `/auth/logins/mcp:${encodeURIComponent(name)}`;
}

function signInText(def, login) {
  const l = login && login.state;
  if (l === "starting") return "starting the sign-in…";
  if (l === "pending") return "signing in: approve in the authorization page";
  if (l === "completing") return "completing the sign-in…";
  let t = authText(def.auth);
  if (def.auth && def.auth.state === "signed_in" && def.auth.scope) t += ` (scope ${def.auth.scope})`;
  if (l === "failed" && def.auth.state !== "signed_in") t += `; the last sign-in failed${login.error ? `: ${login.error}` : ""}`;
  if (l === "cancelled" && def.auth.state !== "signed_in") t += "; the last sign-in was cancelled";
  if (l === "expired" && def.auth.state !== "signed_in") t += "; the last sign-in expired";
  return t;
}

function renderSignIns() {
  const list = $("signin-list");
  list.replaceChildren();
  const entries = Object.entries((settings && settings.servers) || {}).filter(([n, d]) =>
    d.type === "http" && ((d.auth && d.auth.state !== "none") || (logins[n] && FLIGHT.includes(logins[n].state))));
  for (const [name, def] of entries) {
    const login = logins[name];
    const inFlight = login && FLIGHT.includes(login.state);
    const li = el("li", { class: "card", "data-signin": name },
      el("div", { class: "card-head" }, el("h3", { text: name })),
      el("p", { class: "signin-state", text: signInText(def, login) }));
    const actions = el("div", { class: "actions" });
    if (login && login.state === "pending" && login.authorization_url) {
      li.append(el("p", {},
        el("a", { href: login.authorization_url, target: "_blank", rel: "noopener noreferrer",
          class: "auth-link", "data-key": `link:${name}`, text: "Open the authorization page" }),
        " (in case the new tab was blocked or closed)"));
      const id = `paste-${name}`;
      const input = el("input", { id, type: "text", inputmode: "url", autocomplete: "off", spellcheck: "false", class: "paste",
        "data-key": `paste:${name}`, placeholder: `${login.redirect_uri || "http://127.0.0.1:33418/callback"}?code=…` });
      input.value = pasted[name] || "";
      input.addEventListener("input", () => { pasted[name] = input.value; });
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); pasteCallback(name); } });
      li.append(el("div", { class: "field paste-field" },
        el("label", { for: id, text: "Or paste the address the authorization tab ended on" }),
        el("div", { class: "inline-row" }, input,
          el("button", { type: "button", "data-key": `use:${name}`, text: "Use this address",
            onclick: () => pasteCallback(name) }))));
    }
    if (login && login.error_shown) li.append(el("p", { class: "error", text: login.error_shown }));
    if (inFlight) {
      actions.append(el("button", { type: "button", "data-key": `cancel:${name}`, "aria-label": `Cancel the sign-in to ${name}`,
        text: "Cancel", onclick: () => cancelSignIn(name), disabled: login.state === "starting" }));
    } else if (def.auth && def.auth.state === "signed_in") {
      actions.append(el("button", { type: "button", "data-key": `signout:${name}`, "aria-label": `Sign out of ${name}`,
        text: "Sign out", onclick: () => signOut(name) }));
    } else {
      actions.append(el("button", { type: "button", "data-key": `signin:${name}`, "aria-label": `Sign in to ${name}`,
        text: "Sign in", onclick: () => signIn(name) }));
    }
    li.append(actions);
    list.append(li);
  }
  $("no-signins").hidden = entries.length > 0;
}

async function signIn(name) {
  // The tab opens now, while the click lets it; it goes to the authorization page once the
  // daemon answers, and cannot reach back to this page.
  let tab = window.open("", "_blank");
  if (tab) {
    try { tab.opener = null; } catch (_) { tab = null; }
  }
  logins[name] = { state: "starting" };
  render();
  const r = await req("PUT", loginPath(name), {});
  if (!r.ok) {
    if (tab) tab.close();
    logins[name] = { state: "failed", error_shown: `The sign-in could not start: ${r.error.message}` };
    show($("signin-status"), `${name}: the sign-in could not start`, true);
    render();
    focusIfStill(`signin:${name}`, `signin:${name}`);
    return;
  }
  logins[name] = r.json;
  const url = r.json.authorization_url;
  if (tab && url) {
    tab.location.href = url;
    show($("signin-status"), `${name}: the authorization page opened in a new tab`);
  } else {
    show($("signin-status"), `${name}: the browser opened no tab; use the link to the authorization page`);
  }
  render();
  focusIfStill(`signin:${name}`, `link:${name}`);
}

async function pasteCallback(name) {
  const url = (pasted[name] || "").trim();
  if (!url) {
    show($("signin-status"), `${name}: paste the address first`, true);
    focusKey(`paste:${name}`);
    return;
  }
  const r = await req("POST", `${loginPath(name)}/callback`, { url });
  if (!r.ok) {
    logins[name] = { ...(logins[name] || {}), error_shown: r.error.message };
    show($("signin-status"), `${name}: ${r.error.message}`, true);
    await readLogin(name);
    if (logins[name] && FLIGHT.includes(logins[name].state)) logins[name].error_shown = r.error.message;
    render();
    return;
  }
  delete pasted[name];
  logins[name] = r.json;
  show($("signin-status"), `${name}: the callback was accepted`);
  render();
  refreshSoon();
}

async function cancelSignIn(name) {
  // Forgotten at once: a new sign-in started before the answer comes keeps what is typed.
  delete pasted[name];
  const r = await req("DELETE", loginPath(name));
  if (r.ok) logins[name] = r.json;
  else if (r.status === 404) delete logins[name];
  show($("signin-status"), r.ok || r.status === 404 ? `${name}: the sign-in was cancelled` : `${name}: ${r.error.message}`, !(r.ok || r.status === 404));
  render();
  focusKey(`signin:${name}`);
}

async function signOut(name) {
  const r = await req("PATCH", "/settings/mcp", { secrets: { [name]: { oauth: null } } });
  if (!r.ok) {
    show($("signin-status"), `${name}: ${r.error.message}`, true);
    return;
  }
  settings = r.json;
  delete logins[name];
  show($("signin-status"), `${name}: signed out`);
  render();
  focusKey(`signin:${name}`);
}

// ---- the extension's default, and a session to try the servers ----------------------------

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
    const cells = [s.name, s.state + (s.switched_off ? " (off)" : ""), s.transport, s.era || "",
      s.protocol_version || "", String(s.tools), s.last_error || s.warning || ""];
    body.appendChild(el("tr", {}, ...cells.map((c) => el("td", { text: c }))));
  }
  $("servers").hidden = false;
  const w = $("warnings");
  w.replaceChildren(...[...(view.warnings || []), ...(view.error ? [view.error] : [])].map((t) => el("li", { text: t })));
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
  $("tool").replaceChildren(...tools.map((t) => el("option", { value: t.name, text: t.name })));
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
  $("add-server").addEventListener("click", () => openForm("add"));
  $("form-cancel").addEventListener("click", closeForm);
  $("server-form").addEventListener("submit", saveForm);
  $("server-form").addEventListener("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); closeForm(); } });
  for (const r of document.querySelectorAll('input[name="transport"]')) {
    r.addEventListener("change", () => { setTransport(r.value); suggestSoon(); });
  }
  $("f-url").addEventListener("input", suggestSoon);
  $("f-command").addEventListener("input", suggestSoon);
  $("f-name").addEventListener("input", () => { if (form) form.nameEdited = $("f-name").value !== ""; });
  $("add-env").addEventListener("click", () => {
    const r = envRow("", false);
    $("env-rows").append(r);
    r.querySelector("input").focus();
  });
  loadSettings();
  refresh();
  follow();
});
