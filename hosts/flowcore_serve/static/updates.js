// The run page's updates and queries: a form per update the run's flow declares
// (its input as JSON, pre-filled with the first example, its schema folded
// above it; an optional update id;
// whether to wait for the reply), the run's updates with their status and
// reply, and a form per declared query with its answer. Everything goes
// through the API: `update` (POST /api/runs/{id}/updates), `update-result`
// (GET .../updates/{update_id}), `updates` (GET .../updates) and `query`
// (POST .../queries/{name}). The server leaves the update forms out of the
// page for a principal that may only read (the API would answer 403); queries
// only read, so every principal may run them.
"use strict";

(() => {
  const { api, el, Problem } = flowcore;
  const { access, allows, invalid, problemText } = flowcoreConsole;
  const $ = (id) => document.getElementById(id);
  const section = $("updates-section");
  if (!section) return;
  const runId = document.body.dataset.runId;
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  const formsBox = $("update-forms"); // absent for a read-only principal
  const listBox = $("updates-list");
  const queriesSection = $("queries-section");
  const queriesBox = $("query-forms");
  const pretty = (value) => JSON.stringify(value === undefined ? null : value, null, 2);

  // --- what the flow declares (the run's view: `updates`, `queries`) -------------------

  // A declaration list, from the view's list (or map by name) of declarations.
  function declarations(found) {
    if (Array.isArray(found)) return found.filter((d) => d && typeof d.name === "string");
    if (found && typeof found === "object") {
      return Object.entries(found).map(([name, d]) => ({ ...(d || {}), name }));
    }
    return [];
  }

  // JSON text for a textarea: empty stands for null.
  const asText = (value) => (value === null || value === undefined ? "" : pretty(value));

  function parseJson(text, what) {
    const trimmed = text.trim();
    if (!trimmed) return null;
    try { return JSON.parse(trimmed); } catch (e) { throw invalid(`the ${what} is not JSON: ${e.message}`); }
  }

  // A refusal as the API typed it, with the refusal's code where it has one
  // ("update-refused (422, validator): …").
  function refusal(error) {
    if (error instanceof Problem && typeof error.body.code === "string") {
      const type = typeof error.body.type === "string" ? error.body.type.split("/").pop() : "error";
      return `${type} (${error.status}, ${error.body.code}): ${error.message}`;
    }
    return problemText(error);
  }

  // The declared schema, folded: what the input (or the arguments) must be.
  function schemaBox(schema, what) {
    if (schema === null || schema === undefined) return null;
    return el("details", { class: "schema" }, el("summary", {}, `${what} schema`), el("pre", {}, pretty(schema)));
  }

  function alertBox() {
    return el("p", { class: "error", role: "alert", hidden: true });
  }

  function showError(box, error) {
    box.textContent = error ? refusal(error) : "";
    box.hidden = !error;
  }

  // A fresh update id, made here so the page can name the update while it waits.
  function freshId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  // --- an update's outcome ---------------------------------------------------------------

  function outcomeParts(outcome, fetchAgain) {
    const id = el("code", {}, outcome.updateId);
    const badge = el("span", { class: "status", "data-status": outcome.status }, outcome.status);
    if (outcome.status === "completed") {
      return [el("p", {}, "Update ", id, " ", badge, ": its reply"),
        el("pre", { class: "update-reply" }, pretty(outcome.output))];
    }
    if (outcome.status === "failed") {
      const e = outcome.error || {};
      return [el("p", {}, "Update ", id, " ", badge),
        el("pre", { class: "update-error error" }, `${e.type || "error"}: ${e.message || ""}`)];
    }
    const fetch = el("button", { type: "button", class: "update-fetch" }, "Fetch the result");
    fetch.addEventListener("click", fetchAgain);
    return [el("p", {}, "Update ", id, " ", badge, ": it has not replied yet. "), fetch];
  }

  // --- the forms ---------------------------------------------------------------------------

  function updateForm(decl, i) {
    const p = `update-${i}`;
    const examples = Array.isArray(decl.examples) ? decl.examples : [];
    const input = el("textarea", { id: `${p}-input`, rows: 3, spellcheck: "false" });
    input.value = examples.length ? asText(examples[0]) : "";
    const updateId = el("input", { id: `${p}-id`, maxlength: 200, autocomplete: "off" });
    const wait = el("input", { type: "checkbox", id: `${p}-wait`, checked: true });
    const send = el("button", { type: "submit", class: "update-send" }, `Send ${decl.name}`);
    const box = alertBox();
    const outcome = el("div", { class: "update-outcome", role: "status", "aria-live": "polite", id: `${p}-outcome` });
    const form = el(
      "form",
      { class: "act update-form", "data-update": decl.name, "aria-labelledby": `${p}-title` },
      el("h3", { id: `${p}-title` }, decl.name),
      decl.description ? el("p", { class: "muted small" }, decl.description) : null,
      schemaBox(decl.inputSchema, "Input"),
      el("label", { for: `${p}-input` }, "Input (JSON, empty for null)"),
      input,
      el("label", { for: `${p}-id` }, "Update id (optional: the same id again returns the first reply)"),
      updateId,
      el("label", { class: "check" }, wait, "Wait for the reply"),
      send,
      box,
      outcome,
    );

    const fetchResult = async (id) => {
      try {
        const found = await api("GET", `${base}/updates/${encodeURIComponent(id)}`);
        showError(box, null);
        outcome.replaceChildren(...outcomeParts(found, () => fetchResult(id)));
      } catch (error) {
        showError(box, error);
      }
      refreshList();
    };

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      let value;
      try { value = parseJson(input.value, "input"); } catch (error) { showError(box, error); return; }
      const id = updateId.value.trim() || freshId();
      const body = { name: decl.name, input: value, updateId: id, wait: wait.checked };
      send.disabled = true;
      showError(box, null);
      outcome.replaceChildren(el("p", {}, "Update ", el("code", {}, id), wait.checked ? " sent: waiting for its reply…" : " sent."));
      try {
        const got = await api("POST", `${base}/updates`, body);
        outcome.replaceChildren(...outcomeParts(got, () => fetchResult(id)));
      } catch (error) {
        outcome.replaceChildren();
        showError(box, error);
      } finally {
        send.disabled = send.dataset.settled === "yes";
      }
      refreshList();
    });
    return form;
  }

  function queryForm(decl, i) {
    const p = `query-${i}`;
    const args = el("textarea", { id: `${p}-args`, rows: 2, spellcheck: "false" });
    const run = el("button", { type: "submit" }, `Run ${decl.name}`);
    const box = alertBox();
    const answer = el("pre", { class: "query-answer", id: `${p}-answer`, "aria-label": `answer of ${decl.name}`, hidden: true });
    const status = el("div", { role: "status", "aria-live": "polite" }, answer);
    const form = el(
      "form",
      { class: "act query-form", "data-query": decl.name, "aria-labelledby": `${p}-title` },
      el("h3", { id: `${p}-title` }, decl.name),
      decl.description ? el("p", { class: "muted small" }, decl.description) : null,
      schemaBox(decl.argsSchema, "Arguments"),
      el("label", { for: `${p}-args` }, "Arguments (JSON, empty for none)"),
      args,
      run,
      box,
      status,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      let value;
      try { value = parseJson(args.value, "arguments"); } catch (error) { showError(box, error); return; }
      run.disabled = true;
      try {
        const got = await api("POST", `${base}/queries/${encodeURIComponent(decl.name)}`, value);
        showError(box, null);
        answer.textContent = pretty(got.value);
        answer.hidden = false;
      } catch (error) {
        answer.hidden = true;
        showError(box, error);
      } finally {
        run.disabled = false;
      }
    });
    return form;
  }

  // --- the run's updates -------------------------------------------------------------------

  let listShown = null;
  let declaredUpdates = [];
  let listAsked = 0; // reads overlap (a form's answer, a new record): the last one asked wins
  async function refreshList() {
    const asked = ++listAsked;
    let listed;
    try {
      listed = await api("GET", `${base}/updates`);
      if (asked !== listAsked) return;
      showError($("updates-error"), null);
    } catch (error) {
      showError($("updates-error"), error);
      return;
    }
    const key = JSON.stringify(listed);
    if (key === listShown) return; // redrawn only when what it shows changed
    listShown = key;
    if (!listed.length) {
      listBox.replaceChildren(el("h3", {}, "This run's updates"), el("p", { class: "muted" }, "None yet."));
      return;
    }
    const rows = listed.map((u) => el(
      "tr", { "data-update-id": u.updateId },
      el("td", {}, el("code", {}, u.updateId)),
      el("td", {}, u.name),
      el("td", {}, el("span", { class: "status", "data-status": u.status }, u.status)),
      el("td", {}, u.status === "completed" ? el("pre", {}, pretty(u.output))
        : u.status === "failed" && u.error ? el("pre", { class: "error" }, `${u.error.type}: ${u.error.message}`) : ""),
    ));
    listBox.replaceChildren(
      el("h3", {}, "This run's updates"),
      el("table", { class: "updates", id: "updates-table" },
        el("thead", {}, el("tr", {}, ...["Update id", "Update", "Status", "Reply or error"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, ...rows)),
    );
  }

  // --- the page ------------------------------------------------------------------------------

  let formsDrawn = false;
  async function refresh() {
    let view;
    let who;
    try {
      [view, who] = await Promise.all([api("GET", base), access()]);
    } catch (error) {
      return; // run.js reads the same view and shows why it could not
    }
    declaredUpdates = declarations(view.updates);
    const queries = declarations(view.queries);
    const running = view.run.status === "running";
    // The forms are drawn while the run runs. Once it settles it accepts no new
    // update: their Send buttons are disabled, and what they show (a reply, a
    // running update's Fetch button) stays.
    if (formsBox && !formsDrawn && running && allows(who, "write")) {
      formsDrawn = true;
      formsBox.replaceChildren(...declaredUpdates.map(updateForm));
    }
    if (formsBox) {
      for (const send of formsBox.querySelectorAll("button.update-send")) {
        if (!running) send.disabled = true;
        send.dataset.settled = running ? "no" : "yes";
      }
      const note = $("updates-settled");
      if (note) note.hidden = running || !formsDrawn;
    }
    if (queriesBox.childElementCount === 0 && queries.length) queriesBox.replaceChildren(...queries.map(queryForm));
    queriesSection.hidden = queries.length === 0;
    // Only a flow that declares updates has any: the others are not asked.
    section.hidden = declaredUpdates.length === 0;
    if (declaredUpdates.length) await refreshList();
  }

  let pending = null;
  function soon() {
    if (pending !== null) return;
    pending = setTimeout(() => { pending = null; refresh(); }, 200);
  }
  // The run's records and status (run.js follows its streams): an update's
  // progress is logged, so the list is read again when the timeline grows.
  const timeline = $("timeline-body");
  if (timeline) new MutationObserver(soon).observe(timeline, { childList: true });
  // run.js redraws the status badge often (with the same status): follow a change.
  let seenStatus = $("status").dataset.status;
  new MutationObserver(() => {
    if ($("status").dataset.status === seenStatus) return;
    seenStatus = $("status").dataset.status;
    soon();
  }).observe($("status"), { attributes: true, childList: true, characterData: true, subtree: true });

  refresh();
})();
