// The run page's scheduled calls (GET /api/runs/{id}/scheduled), grouped by
// status (pending, completed, failed, cancelled, uncertain) with their
// recurrence and firings, and their actions, each a catalogue operation on its
// route: add (scheduled.add), cancel, run now and replay (confirmed first).
// Shown for any principal that may read the run; the actions for one that may
// write, while the run is running (the operations refuse a settled run).
"use strict";

(() => {
  const { api, el, localTime, duration } = flowcore;
  const { access, allows, invalid, show, perform } = flowcoreConsole;
  const $ = (id) => document.getElementById(id);
  const section = $("scheduled-section");
  if (!section) return;
  const runId = document.body.dataset.runId;
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  const prefix = runId + "/";
  const box = $("scheduled-error");
  const GROUPS = [
    ["pending", "Pending", ["pending", "running"]],
    ["completed", "Completed", ["done", "completed"]],
    ["failed", "Failed", ["failed"]],
    ["cancelled", "Cancelled", ["cancelled"]],
    ["uncertain", "Uncertain", ["uncertain"]],
  ];

  let who = null;
  let running = false;
  let shownKey = null;
  const short = (id) => (id.startsWith(prefix) ? id.slice(prefix.length) : id);
  const when = flowcore.when;

  function recurrence(c) {
    const parts = [];
    if (c.everyMs) parts.push(`every ${duration(c.everyMs)}`);
    if (c.cron) parts.push(`cron ${c.cron}${c.timezone ? ` (${c.timezone})` : ""}`);
    if (c.count) parts.push(`at most ${c.count} time(s)`);
    if (c.untilMs) parts.push(`until ${localTime(c.untilMs)}`);
    return parts.length ? parts.join(", ") : "once";
  }

  function button(label, name, act) {
    const b = el("button", { type: "button", "aria-label": `${label} ${name}`, "data-action": label.toLowerCase() }, label);
    b.addEventListener("click", act);
    return b;
  }

  function callRow(c) {
    const name = short(c.id);
    const url = `${base}/scheduled/${encodeURIComponent(name)}`;
    const acts = [];
    if (running && allows(who, "write")) {
      if (c.status === "pending") {
        acts.push(button("Cancel", name, () => act([
          `Cancel scheduled call ${name}?`, `The call of ${c.tool} will not run` + (c.everyMs || c.cron ? ", nor any later firing." : "."), "Cancel call",
        ], () => api("POST", `${url}/cancel`, {}))));
        acts.push(button("Run now", name, () => act([
          `Run ${name} now?`, `${c.tool} is called now with its input, instead of at ${localTime(c.dueMs)}.`, "Run now",
        ], () => api("POST", `${url}/run-now`, {}))));
      } else if (c.status !== "running" && c.status !== "cancelled") {
        const request = window.crypto && crypto.randomUUID ? crypto.randomUUID() : undefined;
        acts.push(button("Replay", name, () => act([
          `Replay ${name}?`, `${c.tool} is called again with the same input, as a new attempt (attempt ${c.attempts + 1}).`, "Replay call",
        ], () => api("POST", `${url}/replay`, request ? { request } : {}))));
      }
    }
    const error = c.error && typeof c.error === "object" ? `${c.error.type || "error"}: ${c.error.message || ""}` : null;
    return el(
      "tr", { "data-call": name, "data-status": c.status },
      el("td", {}, el("code", {}, name)),
      el("td", {}, c.tool, c.outside ? el("span", { class: "muted small" }, " (added from outside)") : null),
      el("td", {}, c.status),
      el("td", {}, when(c.dueMs)),
      el("td", {}, recurrence(c), c.fires ? ` · fired ${c.fires}×` : ""),
      el("td", { class: "num" }, c.attempts, c.replays ? ` (${c.replays} replayed)` : ""),
      el("td", { class: "error" }, error),
      el("td", { class: "acts" }, ...acts),
    );
  }

  function group([key, title, statuses], calls) {
    const mine = calls.filter((c) => statuses.includes(c.status));
    if (!mine.length) return null;
    return el(
      "div", { class: "scheduled-group", "data-group": key },
      el("h3", {}, `${title} (${mine.length})`),
      el("table", { class: "scheduled", "aria-label": `${title} scheduled calls` },
        el("thead", {}, el("tr", {}, ...["Call", "Tool", "Status", "Due", "Recurrence", "Attempts", "Error", "Actions"].map((h) => el("th", {}, h)))),
        el("tbody", {}, ...mine.map(callRow))),
    );
  }

  // The flow's schedulable tools do not change while the page is open: read once.
  let tools = null;

  async function refresh() {
    try {
      if (who === null) who = await access();
      if (tools === null) tools = (await api("GET", base)).schedulable || [];
      // run.js keeps the status badge current.
      running = $("status").dataset.status === "running";
      const list = await api("GET", `${base}/scheduled`);
      const addable = running && allows(who, "write") && tools.length > 0;
      const add = $("scheduled-add");
      if (add) add.hidden = !addable;
      const select = $("sc-tool");
      if (select && select.dataset.tools !== tools.join(",")) {
        select.dataset.tools = tools.join(",");
        select.replaceChildren(...tools.map((t) => el("option", { value: t }, t)));
      }
      // Redrawn only when what it shows changed: a click under the pointer survives.
      const key = JSON.stringify([list.calls, running]);
      if (key !== shownKey) {
        shownKey = key;
        const groups = GROUPS.map((g) => group(g, list.calls)).filter(Boolean);
        $("scheduled-groups").replaceChildren(...(groups.length ? groups : [el("p", { class: "muted" }, "No scheduled calls.")]));
      }
      section.hidden = list.calls.length === 0 && !addable;
    } catch (error) {
      show(box, error);
    }
  }

  async function act(ask, call) {
    const r = await perform(box, ask, call);
    if (r.ok) refresh();
  }

  function ms(id, scale) {
    const text = $(id).value.trim();
    if (!text) return undefined;
    const n = Number(text) * scale;
    return isFinite(n) ? Math.round(n) : NaN;
  }

  function epoch(id) {
    const text = $(id).value;
    if (!text) return undefined;
    const t = new Date(text).getTime(); // a datetime-local value: the viewer's time zone
    return isNaN(t) ? NaN : t;
  }

  const addForm = $("scheduled-add-form");
  if (addForm) addForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { tool: $("sc-tool").value };
    const text = $("sc-input").value.trim();
    if (text) {
      try { body.input = JSON.parse(text); } catch (e) { show(box, invalid(`the input is not JSON: ${e.message}`)); return; }
    }
    const at = epoch("sc-at");
    const delay = at === undefined ? ms("sc-delay", 1000) : Math.max(0, at - Date.now());
    const fields = { delayMs: delay, everyMs: ms("sc-every", 1000), count: ms("sc-count", 1), untilMs: epoch("sc-until") };
    for (const [name, value] of Object.entries(fields)) {
      if (Number.isNaN(value)) { show(box, invalid(`${name}: not a number or a time`)); return; }
      if (value !== undefined) body[name] = value;
    }
    if ($("sc-cron").value.trim()) body.cron = $("sc-cron").value.trim();
    if ($("sc-timezone").value.trim()) body.timezone = $("sc-timezone").value.trim();
    const r = await perform(box, null, () => api("POST", `${base}/scheduled`, body));
    if (r.ok) { $("sc-input").value = ""; refresh(); }
  });

  let pending = null;
  function soon() {
    if (pending !== null) return;
    pending = setTimeout(() => { pending = null; refresh(); }, 200);
  }
  let seenStatus = $("status").dataset.status;
  new MutationObserver(() => {
    if ($("status").dataset.status === seenStatus) return;
    seenStatus = $("status").dataset.status;
    soon();
  }).observe($("status"), { attributes: true, childList: true, subtree: true });
  const timeline = $("timeline-body");
  if (timeline) new MutationObserver(soon).observe(timeline, { childList: true });
  setInterval(() => { if (running && !document.hidden) soon(); }, 3000);
  refresh();
})();
