// The schedules page: GET /api/schedules, polled every five seconds, one row
// per schedule (its state, next slot, owner and running runs) with its
// actions for an admin (the operations need admin access): pause and resume,
// trigger (a run now, confirmed) and backfill (the slots of a from/to range,
// confirmed in its own dialog). Refusals are shown as the API types them.
"use strict";

(() => {
  const { api, el } = flowcore;
  const { access, allows, invalid, show, perform } = flowcoreConsole;
  const $ = (id) => document.getElementById(id);
  const box = $("schedules-error");
  const POLL_MS = 5000;
  let who = null;
  let shownKey = null;
  const path = (name) => `/api/schedules/${encodeURIComponent(name)}`;
  const runLink = (id) => el("a", { href: `/runs/${encodeURIComponent(id)}` }, id);

  function done(...parts) {
    $("schedules-done").replaceChildren(...parts);
    $("schedules-done").hidden = parts.length === 0;
  }

  function button(label, name, act, cls) {
    const b = el("button", { type: "button", class: cls, "aria-label": `${label} ${name}`, "data-action": label.toLowerCase() }, label);
    b.addEventListener("click", act);
    return b;
  }

  function nextSlot(s) {
    const slots = Array.isArray(s.nextSlotsMs) ? s.nextSlotsMs : [];
    const next = slots.length ? slots[0] : s.nextMs;
    if (s.paused) return el("span", { class: "muted" }, "— (paused)");
    if (typeof next !== "number") return el("span", { class: "muted" }, "—");
    return flowcore.when(next);
  }

  function row(s) {
    const acts = [];
    if (allows(who, "admin")) {
      acts.push(s.paused
        ? button("Resume", s.name, () => act(null, () => api("POST", `${path(s.name)}/resume`, {})))
        : button("Pause", s.name, () => act(null, () => api("POST", `${path(s.name)}/pause`, {}))));
      acts.push(button("Trigger", s.name, () => trigger(s)));
      acts.push(button("Backfill", s.name, () => backfill(s)));
    }
    const running = Array.isArray(s.running) ? s.running : [];
    return el(
      "tr", { "data-schedule": s.name, "data-paused": s.paused ? "yes" : "no" },
      el("td", {}, el("code", {}, s.name)),
      el("td", {}, s.flowId || ""),
      el("td", { class: "state" }, s.paused ? "paused" : "active", s.note ? el("span", { class: "muted small" }, ` (${s.note})`) : null),
      el("td", {}, nextSlot(s)),
      el("td", {}, s.owner === null || s.owner === undefined ? el("span", { class: "muted" }, "—") : s.owner),
      el("td", {}, ...running.flatMap((id, i) => (i ? [", ", runLink(id)] : [runLink(id)]))),
      el("td", { class: "acts" }, ...acts),
    );
  }

  async function refresh() {
    try {
      if (who === null) who = await access();
      const list = await api("GET", "/api/schedules");
      const key = JSON.stringify(list.schedules);
      if (key !== shownKey) {
        shownKey = key;
        $("schedules-body").replaceChildren(...list.schedules.map(row));
      }
      $("schedules-empty").hidden = list.schedules.length > 0;
    } catch (error) {
      show(box, error);
    }
  }

  async function act(ask, call) {
    const r = await perform(box, ask, call);
    if (r.ok) { done(""); refresh(); }
    return r;
  }

  async function trigger(s) {
    const r = await act([
      `Trigger ${s.name}?`,
      `A run of ${s.flowId || "its flow"} starts now, outside the schedule's slots` + (s.paused ? " (the schedule stays paused)." : "."),
      "Start a run",
    ], () => api("POST", `${path(s.name)}/trigger`));
    if (r.ok) done(...(r.value && r.value.runId ? ["Started ", runLink(r.value.runId), "."] : ["Triggered: the run starts shortly."]));
  }

  function backfill(s) {
    const dialog = $("backfill-dialog");
    $("backfill-title").textContent = `Backfill ${s.name}`;
    dialog.returnValue = "";
    dialog.onclose = async () => {
      if (dialog.returnValue !== "confirm") return;
      const start = new Date($("backfill-from").value);
      const end = new Date($("backfill-to").value);
      if (isNaN(start.getTime()) || isNaN(end.getTime())) { show(box, invalid("backfill: give both times")); return; }
      const r = await act(null, () => api("POST", `${path(s.name)}/backfill`, { start: start.toISOString(), end: end.toISOString() }));
      if (r.ok) done(`Backfilled ${s.name} from ${start.toISOString()} to ${end.toISOString()}.`);
    };
    dialog.showModal();
  }

  function loop() {
    refresh().finally(() => setTimeout(loop, POLL_MS));
  }
  loop();
})();
