// The runs list: polls GET /api/runs every two seconds (the API shows a
// principal only its own runs) and redraws the table.
"use strict";

(() => {
  const { api, el, localTime, duration, notice, refused, statusBadge } = flowcore;
  const POLL_MS = 2000;
  const body = document.getElementById("runs-body");
  const empty = document.getElementById("runs-empty");
  const refreshed = document.getElementById("refreshed");
  const statusFilter = document.getElementById("filter-status");
  const flowFilter = document.getElementById("filter-flow");
  let timer = null;

  function row(run) {
    const status = el("span");
    statusBadge(status, run.status);
    const link = el("a", { href: `/runs/${encodeURIComponent(run.runId)}` }, run.runId);
    const indent = run.depth > 0 ? el("span", { class: "muted" }, "↳ ".repeat(run.depth)) : null;
    return el(
      "tr",
      { "data-run-id": run.runId },
      el("td", {}, indent, link),
      el("td", {}, run.flowId),
      el("td", {}, status),
      el("td", {}, run.principal === null ? el("span", { class: "muted" }, "—") : run.principal),
      el("td", { title: run.createdAt }, localTime(run.createdAt)),
      el("td", { class: "num" }, duration(run.durationMs)),
    );
  }

  async function refresh() {
    const query = new URLSearchParams({ limit: "100" });
    if (statusFilter.value) query.set("status", statusFilter.value);
    if (flowFilter.value.trim()) query.set("flow", flowFilter.value.trim());
    try {
      const page = await api("GET", `/api/runs?${query}`);
      body.replaceChildren(...page.runs.map(row));
      empty.hidden = page.runs.length > 0;
      refreshed.textContent = `updated ${new Date().toLocaleTimeString()}`;
      notice("");
    } catch (error) {
      refused(error);
    }
  }

  function loop() {
    clearTimeout(timer);
    refresh().finally(() => { timer = setTimeout(loop, POLL_MS); });
  }

  statusFilter.addEventListener("change", loop);
  flowFilter.addEventListener("change", loop);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) loop(); });

  const startForm = document.getElementById("start-form");
  if (startForm) {
    const flowSelect = document.getElementById("start-flow");
    api("GET", "/api/flows").then((list) => {
      flowSelect.replaceChildren(...list.flows.map((f) => el("option", { value: f.flowId }, `${f.flowId} v${f.version}`)));
      if (list.flows.length === 0) document.getElementById("start").hidden = true;
    }).catch(refused);
    startForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      let input;
      const text = document.getElementById("start-input").value.trim();
      try { input = text ? JSON.parse(text) : null; } catch (e) { notice(`The input is not JSON: ${e.message}`); return; }
      try {
        const run = await api("POST", "/api/runs", { flow: flowSelect.value, input });
        window.location.href = `/runs/${encodeURIComponent(run.runId)}`;
      } catch (error) {
        refused(error);
      }
    });
  }

  loop();
})();
