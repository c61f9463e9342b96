// The delayq dashboard: reads /v1 every 2 s and renders queues (active or paused, with
// pause / resume), nodes, the recurring schedules (with pause / resume), the selected
// queue's upcoming tasks, dead letters and flow keys holding tasks back, and a look-up by
// id. Everything from the server goes into the page as text (never as HTML). A token, when
// the server asks for one, is kept in this tab's sessionStorage and sent as a header: no
// cookies.
"use strict";

const REFRESH_MS = 2000;
// Entries of each list (upcoming, dead letters, flow keys) per refresh: the server reads that many
// records from Redis and sends each payload cut to a preview.
const LIST_LIMIT = 20;
const TOKEN_KEY = "delayq-token";

function meta(name) {
  const tag = document.querySelector(`meta[name="${name}"]`);
  return tag ? tag.content : "";
}

// A queue's name, as the server accepts it (1..=64 characters of [A-Za-z0-9_.-]).
const QUEUE_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

// The queue a link names in its fragment (#queue=NAME), as { name, bad }: name is "" when
// the fragment names none; bad is the raw fragment when it cannot name a queue (a broken
// percent-encoding, which makes decodeURIComponent throw, or characters no queue name has).
// Never throws: a bad fragment only means no queue is selected.
function queueFromHash() {
  const raw = (location.hash.match(/queue=([^&]*)/) || [])[1] || "";
  if (!raw) return { name: "", bad: "" };
  let name = null;
  try { name = decodeURIComponent(raw); } catch (_) { name = null; }
  if (name === null || !QUEUE_NAME.test(name)) return { name: "", bad: raw };
  return { name, bad: "" };
}

const fromHash = queueFromHash();

const state = {
  selected: fromHash.name,
  // The queue the fragment named, until the first answer says whether it exists.
  fromHash: fromHash.name,
  paused: false,
  timer: null,
  askingToken: null,
  readOnly: meta("delayq-read-only") === "true",
  fires: meta("delayq-fires") === "true",
  // Cluster clock minus this browser's clock, from the x-delayq-now-ms of each answer.
  skewMs: 0,
};

// ---- small helpers -------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const numberFormat = new Intl.NumberFormat("en-US");
function count(value) {
  return numberFormat.format(value || 0);
}

function plural(n, word) {
  return `${word}${n === 1 ? "" : "s"}`;
}

// Now on the cluster clock (due times and heartbeats are cluster times).
function now() {
  return Date.now() + state.skewMs;
}

// A duration in ms as a short text: "850 ms", "4.2 s", "3 m 04 s", "5 h 12 m", "3 d 4 h".
function duration(ms) {
  const sign = ms < 0 ? "−" : "";
  ms = Math.abs(ms);
  if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${sign}${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${sign}${m} m ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${sign}${h} h ${String(m % 60).padStart(2, "0")} m`;
  return `${sign}${Math.floor(h / 24)} d ${h % 24} h`;
}

function clock(ms) {
  const date = new Date(ms);
  const time = date.toLocaleTimeString("en-GB", { hour12: false });
  if (date.toDateString() === new Date(now()).toDateString()) return time;
  return `${date.toISOString().slice(0, 10)} ${time}`;
}

function preview(text, max) {
  if (text === undefined || text === null) return "";
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function queuePath(queue) {
  return `v1/queues/${encodeURIComponent(queue)}`;
}

function recurringPath(name) {
  return `v1/recurring/${encodeURIComponent(name)}`;
}

function toast(message, kind) {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.className = `toast ${kind || ""}`;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 4000);
}

function banner(message) {
  const box = document.getElementById("banner");
  box.textContent = message || "";
  box.hidden = !message;
}

// Asks "are you sure?" in the page's own dialog; resolves to true on the action button.
function confirmAction(text, actionLabel) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = actionLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// ---- the API -------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function askToken(wrong) {
  if (state.askingToken) return state.askingToken;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  input.value = "";
  document.getElementById("token-refused").hidden = !wrong;
  state.askingToken = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      state.askingToken = null;
      resolve();
    }, { once: true });
  });
  dialog.showModal();
  return state.askingToken;
}

async function api(method, path, body) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
    const clusterNow = Number(response.headers.get("x-delayq-now-ms"));
    if (clusterNow > 0) state.skewMs = clusterNow - Date.now();
    if (response.status === 401) {
      await askToken(Boolean(token));
      continue;
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!response.ok) {
      throw new ApiError(response.status, (data && data.error) || `${response.status} ${response.statusText}`);
    }
    return data;
  }
  throw new ApiError(401, "no valid token");
}

// ---- rendering -----------------------------------------------------------------------

function setRows(tableId, rows, emptyText, columns) {
  const body = document.querySelector(`#${tableId} tbody`);
  if (rows.length === 0) {
    body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: columns }, emptyText)));
  } else {
    body.replaceChildren(...rows);
  }
}

function cell(value, cls) {
  return el("td", { class: cls }, value);
}

function renderSummary(stats, nodes, schedules) {
  const queues = Object.values(stats);
  const total = (key) => queues.reduce((sum, counts) => sum + (counts[key] || 0), 0);
  const items = [
    ["node", nodes.length, nodes.length ? "ok" : "bad"],
    ["queue", queues.length, ""],
    ["schedule", schedules.length, ""],
    ["pending", total("pending"), "", true],
    ["in flight", total("inflight"), total("inflight") ? "busy" : "", true],
    // Only while some queue holds tasks back by flow key.
    total("held_back") ? ["held back", total("held_back"), "warn", true] : null,
    ["dead", total("dead"), total("dead") ? "bad" : "", true],
  ].filter(Boolean);
  document.getElementById("summary").replaceChildren(...items.map(([label, value, tone, fixed]) =>
    el("span", { class: `stat ${tone}` }, el("b", {}, count(value)), ` ${fixed ? label : plural(value, label)}`)));
}

function latenessCell(lateness, key) {
  if (!lateness || !lateness.count) {
    return el("td", { class: "num muted", title: state.fires ? "nothing fired here yet" : "this process fires no tasks" }, "—");
  }
  const ms = lateness[key];
  const tone = ms <= 5 ? "ok" : ms <= 50 ? "warn" : "bad";
  const text = ms >= 1e9 ? "> 60 s" : `${ms < 10 ? ms.toFixed(1) : count(Math.round(ms))} ms`;
  return el("td", { class: `num ${tone}-text`, title: `${count(lateness.count)} fired here` }, text);
}

function countCell(value, tone) {
  return el("td", { class: `num ${value ? tone : "muted"}` }, count(value));
}

// A link's fragment naming a queue the cluster does not have (or no queue at all): a small
// notice, the fragment dropped from the address, and the page as if it named none.
function dropBadFragment(what, why) {
  toast(`Ignored the link's #queue=${preview(what, 64)}: ${why}`, "warn");
  history.replaceState(null, "", location.pathname + location.search);
}

function renderQueues(stats, lateness) {
  const names = Object.keys(stats).sort();
  if (state.fromHash) {
    if (state.selected === state.fromHash && !stats[state.selected]) {
      dropBadFragment(state.fromHash, "no such queue");
      state.selected = "";
    }
    state.fromHash = "";
  }
  if (!state.selected && names.length) {
    state.selected = names.find((name) => stats[name].dead > 0) || names[0];
  }
  const rows = names.map((name) => {
    const counts = stats[name];
    return el("tr", {
      class: `clickable${name === state.selected ? " selected" : ""}${counts.paused ? " paused" : ""}`,
      dataset: { queue: name, paused: String(Boolean(counts.paused)) },
      tabindex: 0,
      onclick: () => selectQueue(name),
      onkeydown: (event) => { if (event.key === "Enter") selectQueue(name); },
    },
    el("td", { class: "queue" }, name),
    countCell(counts.pending, "pending-text"),
    countCell(counts.due_now, "warn-text"),
    el("td", { class: `num ${counts.held_back ? "warn-text" : "muted"}`, "data-cell": "held-back" }, count(counts.held_back)),
    countCell(counts.inflight, "busy-text"),
    el("td", { class: "num" }, counts.dead ? el("span", { class: "pill bad" }, count(counts.dead)) : el("span", { class: "muted" }, "0")),
    countCell(counts.done, "ok-text"),
    latenessCell(lateness[name], "p50_ms"),
    latenessCell(lateness[name], "p99_ms"),
    el("td", { "data-cell": "state", title: counts.paused ? "paused: nothing of this queue fires until resumed" : "" },
      counts.paused ? el("span", { class: "pill warn" }, "paused") : el("span", { class: "pill ok" }, "active")),
    state.readOnly ? null : el("td", {}, el("div", { class: "row-actions" }, counts.paused
      ? el("button", { type: "button", class: "action small", "data-action": "resume", onclick: (event) => pauseQueue(event, name, false) }, "Resume")
      : el("button", { type: "button", class: "action small", "data-action": "pause", onclick: (event) => pauseQueue(event, name, true) }, "Pause"))));
  });
  setRows("queues", rows, "No queues yet: schedule a task and it appears here.", state.readOnly ? 10 : 11);
  for (const label of document.querySelectorAll("[data-selected-queue]")) {
    label.textContent = state.selected || "";
  }
}

function renderNodes(nodes) {
  const rows = nodes.map((node) => {
    const age = node.heartbeat_age_ms;
    const tone = age < 2000 ? "ok" : age < 5000 ? "warn" : "bad";
    const chips = Object.entries(node.partitions_by_queue || {}).map(([queue, owned]) =>
      el("span", { class: "chip" }, queue, el("b", {}, String(owned))));
    return el("tr", { dataset: { node: node.id } },
      el("td", { class: "node-name" }, el("span", { class: `dot ${tone}` }), node.name),
      el("td", { class: "mono muted", title: node.id }, node.id.slice(0, 8)),
      cell(node.host),
      cell(node.pid, "num"),
      cell(node.version, "muted"),
      cell(duration(Math.max(0, now() - node.started_ms)), "num"),
      el("td", { class: `num ${tone}-text` }, `${duration(age)} ago`),
      cell(count(node.partitions), "num strong"),
      el("td", { class: "chips" }, chips.length ? chips : el("span", { class: "muted" }, "none")));
  });
  setRows("nodes", rows, "No live nodes: start one with `delayq node`.", 9);
  document.getElementById("nodes-hint").textContent =
    nodes.length ? `${nodes.length} live · partitions by rendezvous hashing` : "";
}

// The cadence as the spec gives it: the cron expression and its zone, or the period.
function cadenceCell(schedule) {
  if (schedule.cron !== undefined) {
    return el("td", { class: "cadence stacked" },
      el("span", { class: "mono" }, schedule.cron),
      el("span", { class: "sub muted" }, schedule.tz));
  }
  return el("td", { class: "cadence" }, "every ", el("span", { class: "mono" }, schedule.every));
}

function nextTickCell(schedule, at) {
  if (schedule.next_ms === null || schedule.next_ms === undefined) {
    const why = schedule.paused ? "paused: no ticks until resumed"
      : schedule.end_at_ms && schedule.end_at_ms <= at ? "its window ended (end_at)" : "no next tick";
    return el("td", { class: "num muted", title: why }, "—");
  }
  const due = schedule.next_ms <= at;
  return el("td", { class: "num stacked", title: new Date(schedule.next_ms).toString() },
    clock(schedule.next_ms),
    el("span", { class: `sub ${due ? "warn-text" : "muted"}` }, due ? "due" : `in ${duration(schedule.next_ms - at)}`));
}

function lastFiredCell(schedule, at) {
  if (!schedule.last_fired_ms) return el("td", { class: "num muted" }, "never");
  return el("td", { class: "num muted", title: clock(schedule.last_fired_ms) },
    `${duration(Math.max(0, at - schedule.last_fired_ms))} ago`);
}

function misfireCell(schedule) {
  const detail = [`grace ${schedule.misfire_grace}`];
  if (schedule.misfire === "all") detail.push(`at most ${count(schedule.max_catchup)}`);
  const title = `misfire ${schedule.misfire}, ${detail.join(", ")}; overlap ${schedule.overlap}`;
  return el("td", { class: "stacked", title },
    schedule.misfire,
    schedule.overlap === "skip" ? el("span", { class: "chip" }, "no overlap") : null,
    el("span", { class: "sub muted" }, detail.join(" · ")));
}

function renderRecurring(schedules) {
  const at = now();
  const rows = schedules.map((schedule) => el("tr", {
    dataset: { schedule: schedule.name, paused: String(schedule.paused) },
  },
  el("td", { class: "mono id strong" }, schedule.name),
  cell(schedule.queue, "queue"),
  cadenceCell(schedule),
  nextTickCell(schedule, at),
  lastFiredCell(schedule, at),
  el("td", { "data-cell": "state" }, schedule.paused
    ? el("span", { class: "pill warn" }, "paused")
    : el("span", { class: "pill ok" }, "active")),
  misfireCell(schedule),
  countCell(schedule.fired, "ok-text"),
  countCell(schedule.skipped, "warn-text"),
  countCell(schedule.missed, "bad-text"),
  state.readOnly ? null : el("td", {}, el("div", { class: "row-actions" }, schedule.paused
    ? el("button", { type: "button", class: "action small", "data-action": "resume", onclick: () => pauseSchedule(schedule.name, false) }, "Resume")
    : el("button", { type: "button", class: "action small", "data-action": "pause", onclick: () => pauseSchedule(schedule.name, true) }, "Pause")))));
  setRows("recurring", rows, "No recurring schedules: add one with `delayq recurring set` or PUT /v1/recurring/{name}.",
    state.readOnly ? 10 : 11);
}

function renderPending(tasks) {
  const at = now();
  const rows = tasks.map((task) => el("tr", { dataset: { id: task.id } },
    el("td", { class: "mono id" }, task.id),
    cell(task.due_ms <= at ? "due" : duration(task.due_ms - at), task.due_ms <= at ? "num warn-text" : "num"),
    cell(clock(task.due_ms), "num muted"),
    el("td", { class: "num" }, task.attempt > 1 ? el("span", { class: "pill warn", title: task.last_error || "" }, `retry ${task.attempt}`) : "1"),
    el("td", { class: "mono muted payload", title: task.payload || "" }, preview(task.payload, 60))));
  setRows("pending", rows, state.selected ? "Nothing pending." : "Select a queue.", 5);
}

function renderDead(tasks) {
  const at = now();
  const rows = tasks.map((task) => el("tr", { dataset: { id: task.id } },
    el("td", { class: "mono id" }, task.id),
    el("td", { class: "num muted", title: clock(task.failed_ms) }, `${duration(Math.max(0, at - task.failed_ms))} ago`),
    cell(task.attempt, "num"),
    el("td", { class: "error", title: task.last_error || "" }, preview(task.last_error || "", 140)),
    state.readOnly ? null : el("td", {}, el("div", { class: "row-actions" },
      el("button", { type: "button", class: "action small", "data-action": "retry", onclick: () => retryOne(task.id) }, "Retry"),
      el("button", { type: "button", class: "action small danger", "data-action": "purge", onclick: () => purgeOne(task.id) }, "Purge")))));
  setRows("dead", rows, state.selected ? "No dead letters." : "Select a queue.", state.readOnly ? 4 : 5);
  const none = tasks.length === 0;
  document.getElementById("retry-all").disabled = none;
  document.getElementById("purge-all").disabled = none;
}

// The flow keys of the selected queue holding tasks back (GET v1/queues/{queue}/keys), the
// most waiting first, under a hint with the queue's held-back count.
function renderKeys(keys, counts) {
  const rows = keys.map((key) => el("tr", { dataset: { key: key.key } },
    el("td", { class: "mono id" }, key.key),
    cell(count(key.running), "num"),
    el("td", { class: "num warn-text" }, count(key.waiting)),
    el("td", { class: "num", title: `earliest due ${clock(key.oldest_due_ms)}` }, duration(key.longest_wait_ms))));
  setRows("keys", rows, state.selected ? "No flow key holds tasks back." : "Select a queue.", 4);
  const held = counts ? counts.held_back || 0 : 0;
  document.getElementById("keys-hint").textContent = state.selected
    ? `${count(held)} held back · the keys with the most waiting first (per_key_concurrency, per_key_rate, per_key_order)`
    : "";
}

function renderTask(task) {
  const fields = [
    ["queue", task.queue], ["id", task.id], ["due", `${clock(task.due_ms)} (${task.due_ms})`],
    ["attempt", task.attempt], ["generation", task.generation],
  ];
  if (task.state_since_ms) fields.push([`${task.state} since`, clock(task.state_since_ms)]);
  if (task.last_error) fields.push(["last error", task.last_error]);
  fields.push(["payload", task.payload !== undefined ? task.payload : `(base64) ${task.payload_base64}`]);
  return el("div", { class: "task" },
    el("span", { class: `state ${task.state}` }, task.state),
    el("dl", {}, fields.flatMap(([key, value]) => [
      el("dt", {}, key),
      el("dd", { class: key === "payload" || key === "id" ? "mono" : "" }, String(value)),
    ])));
}

// ---- actions -------------------------------------------------------------------------

function selectQueue(name) {
  state.selected = name;
  history.replaceState(null, "", `#queue=${encodeURIComponent(name)}`);
  refresh();
}

async function act(label, method, path, confirmText) {
  if (confirmText && !(await confirmAction(confirmText, "Purge"))) return;
  try {
    const result = await api(method, path);
    const n = result.retried !== undefined ? result.retried : result.purged;
    toast(`${label}: ${count(n)}`, "ok");
  } catch (error) {
    toast(`${label} failed: ${error.message}`, "bad");
  }
  refresh();
}

async function pauseSchedule(name, pause) {
  const verb = pause ? "pause" : "resume";
  try {
    const schedule = await api("POST", `${recurringPath(name)}/${verb}`);
    toast(`${schedule.paused ? "paused" : "resumed"} ${name}`, "ok");
  } catch (error) {
    toast(`${verb} ${name} failed: ${error.message}`, "bad");
  }
  refresh();
}

// Pause or resume a queue cluster-wide (POST v1/queues/{queue}/pause|resume); the click
// does not also select the row.
async function pauseQueue(event, name, pause) {
  event.stopPropagation();
  const verb = pause ? "pause" : "resume";
  try {
    const result = await api("POST", `${queuePath(name)}/${verb}`);
    toast(`${result.paused ? "paused" : "resumed"} queue ${name}`, "ok");
  } catch (error) {
    toast(`${verb} queue ${name} failed: ${error.message}`, "bad");
  }
  refresh();
}

function retryOne(id) {
  act(`retried ${id}`, "POST", `${queuePath(state.selected)}/dead/${encodeURIComponent(id)}/retry`);
}

function purgeOne(id) {
  act(`purged ${id}`, "DELETE", `${queuePath(state.selected)}/dead/${encodeURIComponent(id)}`,
    `Delete the dead letter ${id} of ${state.selected}? This cannot be undone.`);
}

document.getElementById("retry-all").addEventListener("click", () =>
  act("retried", "POST", `${queuePath(state.selected)}/dead/retry`));
document.getElementById("purge-all").addEventListener("click", () =>
  act("purged", "DELETE", `${queuePath(state.selected)}/dead`,
    `Delete every dead letter of ${state.selected}? This cannot be undone.`));

document.getElementById("lookup").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  const out = document.getElementById("lookup-result");
  try {
    const task = await api("GET", `${queuePath(form.get("queue").trim())}/tasks/${encodeURIComponent(form.get("id"))}`);
    out.replaceChildren(renderTask(task));
  } catch (error) {
    out.replaceChildren(el("p", { class: error.status === 404 ? "muted" : "bad-text" }, error.message));
  }
});

document.getElementById("pause").addEventListener("click", (event) => {
  state.paused = !state.paused;
  event.target.textContent = state.paused ? "Resume" : "Pause";
  event.target.classList.toggle("on", state.paused);
  if (!state.paused) refresh();
});

// ---- the refresh loop ----------------------------------------------------------------

async function refresh() {
  clearTimeout(state.timer);
  try {
    const [stats, nodes, lateness, schedules] = await Promise.all([
      api("GET", "v1/queues"),
      api("GET", "v1/nodes"),
      api("GET", "v1/lateness").catch(() => ({})),
      api("GET", "v1/recurring"),
    ]);
    renderSummary(stats, nodes, schedules);
    renderQueues(stats, lateness || {});
    renderNodes(nodes);
    renderRecurring(schedules);
    if (state.selected && stats[state.selected]) {
      const [pending, dead, keys] = await Promise.all([
        api("GET", `${queuePath(state.selected)}/pending?limit=${LIST_LIMIT}`),
        api("GET", `${queuePath(state.selected)}/dead?limit=${LIST_LIMIT}`),
        api("GET", `${queuePath(state.selected)}/keys?limit=${LIST_LIMIT}`),
      ]);
      renderPending(pending);
      renderDead(dead);
      renderKeys(keys, stats[state.selected]);
    } else {
      renderPending([]);
      renderDead([]);
      renderKeys([], null);
    }
    banner("");
    document.getElementById("updated").textContent = `updated ${clock(now())}`;
  } catch (error) {
    banner(`Cannot read the cluster: ${error.message}`);
  }
  if (!state.paused) state.timer = setTimeout(refresh, REFRESH_MS);
}

if (state.readOnly) {
  document.body.classList.add("read-only");
  document.getElementById("mode").hidden = false;
}
if (!state.fires) {
  document.getElementById("lateness-hint").textContent =
    "lateness is measured where tasks fire (a node's dashboard or /metrics) · ";
}
if (fromHash.bad) dropBadFragment(fromHash.bad, "not a queue name");
refresh();
