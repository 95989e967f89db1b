// The runs list: a search (run id prefix, flow, status, metadata filters, a
// time range) and a page of GET /api/runs at a time, polled every two seconds
// (the API shows a principal only its own runs), with the counts by status of
// GET /api/runs/counts. The search and the page live in the address (shareable;
// the back button goes back through them): the API's own parameters, times as
// UTC instants, `cursor` the API's cursor of the page shown.
"use strict";

(() => {
  const { api, el, when, isoTime, duration, notice, refused, statusBadge } = flowcore;
  const POLL_MS = 2000;
  const body = document.getElementById("runs-body");
  const empty = document.getElementById("runs-empty");
  const refreshed = document.getElementById("refreshed");
  const search = document.getElementById("search");
  const counts = document.getElementById("counts");
  const fields = {
    idPrefix: document.getElementById("filter-id"),
    flow: document.getElementById("filter-flow"),
    status: document.getElementById("filter-status"),
    where: document.getElementById("filter-where"),
    createdFrom: document.getElementById("filter-from"),
    createdTo: document.getElementById("filter-to"),
    limit: document.getElementById("filter-limit"),
  };
  const pager = {
    first: document.getElementById("page-first"),
    newer: document.getElementById("page-newer"),
    older: document.getElementById("page-older"),
    number: document.getElementById("page-number"),
  };
  let timer = null;
  let nextCursor = null;

  // A datetime-local value (the viewer's zone) as a UTC instant, and back.
  function toInstant(local) {
    const d = new Date(local);
    return isNaN(d.getTime()) ? "" : d.toISOString();
  }
  function toLocal(instant) {
    return isoTime(instant).slice(0, 19);
  }

  // The search as the address holds it (and the API takes it).
  function searchOf(params) {
    return {
      idPrefix: params.get("idPrefix") || "",
      flow: params.get("flow") || "",
      status: params.get("status") || "",
      where: params.getAll("where"),
      createdFrom: params.get("createdFrom") || "",
      createdTo: params.get("createdTo") || "",
      limit: params.get("limit") || "50",
      cursor: params.get("cursor") || "",
    };
  }

  function paramsOf(s, { paging = true, status = true } = {}) {
    const params = new URLSearchParams();
    for (const name of ["idPrefix", "flow", "createdFrom", "createdTo"]) {
      if (s[name]) params.set(name, s[name]);
    }
    if (status && s.status) params.set("status", s.status);
    for (const filter of s.where) params.append("where", filter);
    if (paging) {
      params.set("limit", s.limit);
      if (s.cursor) params.set("cursor", s.cursor);
    }
    return params;
  }

  function current() {
    return searchOf(new URLSearchParams(window.location.search));
  }

  function fromForm() {
    return {
      idPrefix: fields.idPrefix.value.trim(),
      flow: fields.flow.value.trim(),
      status: fields.status.value,
      where: fields.where.value.split(";").map((f) => f.trim()).filter((f) => f),
      createdFrom: fields.createdFrom.value ? toInstant(fields.createdFrom.value) : "",
      createdTo: fields.createdTo.value ? toInstant(fields.createdTo.value) : "",
      limit: fields.limit.value,
      cursor: "",
    };
  }

  function toForm(s) {
    fields.idPrefix.value = s.idPrefix;
    fields.flow.value = s.flow;
    fields.status.value = s.status;
    fields.where.value = s.where.join("; ");
    fields.createdFrom.value = s.createdFrom ? toLocal(s.createdFrom) : "";
    fields.createdTo.value = s.createdTo ? toLocal(s.createdTo) : "";
    fields.limit.value = s.limit;
  }

  // Go to a search (and page): a new entry of the history, so back returns.
  function go(s, newer) {
    const query = paramsOf(s).toString();
    window.history.pushState({ newer: newer || [] }, "", query ? `?${query}` : window.location.pathname);
    toForm(s);
    loop();
  }

  function newerCursors() {
    const state = window.history.state;
    return state && Array.isArray(state.newer) ? state.newer : [];
  }

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
      el("td", {}, when(run.createdAt)),
      el("td", { class: "num" }, duration(run.durationMs)),
    );
  }

  function showCounts(s, found) {
    const item = (status, label, n) => el(
      "li",
      {},
      el("button", {
        type: "button",
        "data-status": status,
        "aria-pressed": s.status === status ? "true" : "false",
        "aria-label": `${label}: ${n} runs`,
      }, `${label} ${n}`),
    );
    const items = [item("", "all", found.total)];
    for (const [status, n] of Object.entries(found.counts)) items.push(item(status, status, n));
    counts.replaceChildren(...items);
  }

  // The host's reason for counting no runs (501 host-refuses), once it gave one.
  let countsRefused = null;

  function showCountsRefused() {
    counts.replaceChildren(el("li", { class: "muted", id: "counts-refused" }, `No counts by status here: ${countsRefused}`));
  }

  async function refresh() {
    const s = current();
    try {
      const [page, counted] = await Promise.all([
        api("GET", `/api/runs?${paramsOf(s)}`),
        countsRefused !== null ? null : api("GET", `/api/runs/counts?${paramsOf(s, { paging: false, status: false })}`).catch((error) => {
          if (!(error instanceof flowcore.Problem) || error.status !== 501) throw error;
          countsRefused = error.message;  // the host counts none (Temporal): said once, not asked again
          return null;
        }),
      ]);
      body.replaceChildren(...page.runs.map(row));
      empty.hidden = page.runs.length > 0;
      nextCursor = page.nextCursor;
      const newer = newerCursors();
      pager.older.disabled = !nextCursor;
      pager.newer.disabled = !s.cursor;
      pager.first.disabled = !s.cursor;
      pager.number.textContent = s.cursor && newer.length === 0 ? "" : `page ${newer.length + 1}`;
      if (counted) showCounts(s, counted);
      else if (countsRefused !== null) showCountsRefused();
      else counts.replaceChildren();
      refreshed.textContent = `updated ${isoTime(Date.now())}`;
      notice("");
    } catch (error) {
      refused(error);
    }
  }

  // One refresh at a time: one asked for while another is in flight runs once it
  // ends (two at once would both ask a host that counts no runs for its counts).
  let running = false;
  let again = false;
  function loop() {
    clearTimeout(timer);
    if (running) {
      again = true;
      return;
    }
    running = true;
    refresh().finally(() => {
      running = false;
      if (again) {
        again = false;
        loop();
        return;
      }
      timer = setTimeout(loop, POLL_MS);
    });
  }

  search.addEventListener("submit", (event) => {
    event.preventDefault();
    go(fromForm());
  });
  fields.status.addEventListener("change", () => go(fromForm()));
  fields.limit.addEventListener("change", () => go(fromForm()));
  document.getElementById("search-clear").addEventListener("click", () => {
    go({ idPrefix: "", flow: "", status: "", where: [], createdFrom: "", createdTo: "", limit: fields.limit.value, cursor: "" });
  });
  counts.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-status]");
    if (!button) return;
    go({ ...current(), status: button.dataset.status, cursor: "" });
  });
  pager.first.addEventListener("click", () => go({ ...current(), cursor: "" }));
  pager.older.addEventListener("click", () => {
    if (!nextCursor) return;
    const s = current();
    go({ ...s, cursor: nextCursor }, [...newerCursors(), s.cursor]);
  });
  pager.newer.addEventListener("click", () => {
    const newer = newerCursors();
    go({ ...current(), cursor: newer.length ? newer[newer.length - 1] : "" }, newer.slice(0, -1));
  });
  window.addEventListener("popstate", () => { toForm(current()); loop(); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) loop(); });

  // The start form offers the flows this server can run: a flow no handler module
  // of the server has every handler for is shown disabled, with what is missing;
  // where several modules can run the chosen flow, the user picks one.
  const startForm = document.getElementById("start-form");
  if (startForm) {
    const flowSelect = document.getElementById("start-flow");
    const moduleBox = document.getElementById("start-module-box");
    const moduleSelect = document.getElementById("start-module");
    const missingNote = document.getElementById("start-missing");
    let flows = [];
    const lacks = (f) => f.missing.map((what) => `no handler for ${what}`).join(", ");
    function chosen() {
      const flow = flows.find((f) => f.flowId === flowSelect.value);
      const modules = flow ? flow.modules || [] : [];
      moduleSelect.replaceChildren(...modules.map((m) => el("option", { value: m }, m)));
      moduleBox.hidden = modules.length < 2;
      const cannot = flows.filter((f) => f.runnable === false);
      missingNote.hidden = cannot.length === 0;
      missingNote.textContent = cannot.length
        ? "Not runnable on this server: " + cannot.map((f) => `${f.flowId} (${lacks(f)})`).join("; ")
        : "";
    }
    api("GET", "/api/flows").then((list) => {
      flows = list.flows;
      flowSelect.replaceChildren(...flows.map((f) => el(
        "option",
        { value: f.flowId, disabled: f.runnable === false, "data-missing": f.runnable === false ? lacks(f) : null },
        f.runnable === false ? `${f.flowId} v${f.version} — ${lacks(f)}` : `${f.flowId} v${f.version}`,
      )));
      const first = flows.find((f) => f.runnable !== false);
      if (first) flowSelect.value = first.flowId;
      if (flows.length === 0) document.getElementById("start").hidden = true;
      startForm.querySelector("button[type=submit]").disabled = !first;
      chosen();
    }).catch(refused);
    flowSelect.addEventListener("change", chosen);
    startForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      let input;
      const text = document.getElementById("start-input").value.trim();
      try { input = text ? JSON.parse(text) : null; } catch (e) { notice(`The input is not JSON: ${e.message}`); return; }
      const body = { flow: flowSelect.value, input };
      if (!moduleBox.hidden && moduleSelect.value) body.tools = moduleSelect.value;
      try {
        const run = await api("POST", "/api/runs", body);
        window.location.href = `/runs/${encodeURIComponent(run.runId)}`;
      } catch (error) {
        refused(error);
      }
    });
  }

  toForm(current());
  loop();
})();
