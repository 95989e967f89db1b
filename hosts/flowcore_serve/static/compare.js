// The compare page: two runs' timelines side by side, aligned by record index,
// with the first record where they differ marked, scrolled to and focused, and
// what differs in it shown. The comparison is the API's (GET /api/compare: what
// "differ" means is decided there, never here); the timelines are each run's
// GET /api/runs/{id}/events. With only run A given, the form offers the runs of
// A's flow for B.
"use strict";

(() => {
  const { api, el, refused } = flowcore;
  const { payloads, value, clip } = flowcoreTimeline;
  const $ = (id) => document.getElementById(id);
  const a = document.body.dataset.a || "";
  const b = document.body.dataset.b || "";
  const runPath = (id) => `/api/runs/${encodeURIComponent(id)}`;
  const json = (v) => {
    try { return JSON.stringify(v); } catch (e) { return String(v); }
  };

  async function records(runId) {
    const response = await fetch(`${runPath(runId)}/events`, { credentials: "same-origin" });
    if (!response.ok) throw new flowcore.Problem(response.status, await response.json().catch(() => null));
    return (await response.text()).split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
  }

  // One line for a record: its kind, its key relative to its run, and what it carries.
  function summary(record) {
    const d = record.data || {};
    const prefix = record.runId + "/";
    const key = typeof d.idempotencyKey === "string"
      ? (d.idempotencyKey.startsWith(prefix) ? d.idempotencyKey.slice(prefix.length) : d.idempotencyKey)
      : null;
    const what = {
      "call-tool": d.tool,
      "run-agent": d.agentId,
      "ask-human": d.question === undefined ? undefined : `“${clip(String(d.question), 40)}”`,
      "await-signal": d.signal,
      "signal-received": d.signal,
      "human-answered": d.answer === undefined ? undefined : `answer ${clip(json(d.answer), 40)}`,
      "effect-succeeded": d.output === undefined ? undefined : `output ${clip(json(d.output), 40)}`,
      "effect-failed": d.error ? `${d.error.type}: ${clip(String(d.error.message || ""), 60)}` : undefined,
      "settled": d.status,
    }[d.kind];
    if (record.type === "run.started") return `${d.flowId} v${d.version}` + (d.forkedFrom ? ` · forked from ${d.forkedFrom.runId} at ${d.forkedFrom.index}` : "");
    if (record.type === "run.settled") return String(d.status);
    return [d.kind, key, what].filter((x) => x !== undefined && x !== null && x !== "").join(" · ") || clip(json(d), 80);
  }

  // A cell of one run's column: the record's type and summary as a toggle that
  // opens its payloads (as on the run page), or a dash where the log has ended.
  function cell(record, side, context) {
    if (!record) return el("td", { class: "rec-missing", "data-side": side }, el("span", { class: "muted" }, "— (no record)"));
    const panelId = `cmp-${side}-${record.index}-payloads`;
    const panel = el("div", { class: "rec-payloads", id: panelId, hidden: true });
    const toggle = el("button", {
      type: "button", class: "rec-toggle", "aria-expanded": "false", "aria-controls": panelId,
      "aria-label": `run ${side.toUpperCase()}, record ${record.index}: ${record.type} ${summary(record)}`,
    }, el("b", {}, record.type), " ", summary(record));
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      if (open) panel.replaceChildren(...payloads(record, context));
      panel.hidden = !open;
    });
    return el("td", { "data-side": side, "data-type": record.type }, toggle, panel);
  }

  function contextOf(log) {
    const asked = new Map();
    for (const r of log) {
      const d = r.data || {};
      if (r.type === "effect.emitted" && d.kind === "ask-human" && typeof d.idempotencyKey === "string") asked.set(d.idempotencyKey, d);
    }
    return { failures: new Map(), asked, children: new Set() };
  }

  function verdict(found) {
    const counts = `${found.a} has ${found.aCount} records, ${found.b} has ${found.bCount}.`;
    if (found.firstDifference === null || found.firstDifference === undefined) {
      return `${counts} They are the same, record by record.`;
    }
    const many = found.differing === 1 ? "1 index differs" : `${found.differing} indices differ`;
    return `${counts} The same up to index ${found.firstDifference}; the first difference is at index`
      + ` ${found.firstDifference} (${found.fields.join(", ")}); ${many} in all.`;
  }

  // What differs at the first difference: per field, A's value and B's.
  function differences(found) {
    const at = found.firstDifference;
    const ra = found.aRecord;
    const rb = found.bRecord;
    const parts = [];
    for (const field of found.fields) {
      let left;
      let right;
      if (field === "missing") {
        left = ra ? `${ra.type}` : "(its log has ended)";
        right = rb ? `${rb.type}` : "(its log has ended)";
      } else if (field === "type") {
        left = ra.type;
        right = rb.type;
      } else if (field === "data") {
        left = ra.data;
        right = rb.data;
      } else {
        left = ra.data ? ra.data[field] : undefined;
        right = rb.data ? rb.data[field] : undefined;
      }
      const shown = (v) => (v === undefined ? "(absent)" : v);
      parts.push(el("div", { class: "diff-field", "data-field": field },
        el("h4", {}, field),
        el("div", { class: "diff-sides" },
          value(`${field} in ${found.a}`, shown(left), { part: "a" }),
          value(`${field} in ${found.b}`, shown(right), { part: "b" }))));
    }
    $("compare-diff-title").textContent = `What differs at index ${at}`;
    $("compare-diff-body").replaceChildren(...parts);
    $("compare-diff").hidden = false;
  }

  function table(found, left, right) {
    $("compare-head-a").replaceChildren("A: ", el("a", { href: `/runs/${encodeURIComponent(found.a)}` }, found.a));
    $("compare-head-b").replaceChildren("B: ", el("a", { href: `/runs/${encodeURIComponent(found.b)}` }, found.b));
    const ca = contextOf(left);
    const cb = contextOf(right);
    const first = found.firstDifference;
    const rows = [];
    for (let i = 0; i < Math.max(left.length, right.length); i++) {
      const marked = i === first;
      const where = first === null || first === undefined || i < first ? "same" : (marked ? "first-difference" : "after");
      const num = el("td", { class: "num" }, i);
      if (marked) num.append(" ", el("span", { class: "diff-mark", "aria-label": "first difference" }, "≠"));
      const row = el("tr", { "data-index": i, "data-compare": where, class: `cmp ${where}` }, num, cell(left[i], "a", ca), cell(right[i], "b", cb));
      if (marked) {
        row.id = "first-difference";
        row.tabIndex = -1;
        row.setAttribute("aria-label", `record ${i}: the first difference`);
      }
      rows.push(row);
    }
    $("compare-body").replaceChildren(...rows);
    $("compare-timelines").hidden = false;
  }

  async function offerRuns() {
    // The runs of A's flow, newest first, for B.
    const shown = await api("GET", runPath(a));
    const flow = shown.run.flowId;
    const page = await api("GET", `/api/runs?flow=${encodeURIComponent(flow)}&limit=50`);
    $("compare-runs").replaceChildren(...page.runs
      .filter((r) => r.runId !== a)
      .map((r) => el("option", { value: r.runId }, `${r.runId} (${r.status})`)));
  }

  async function main() {
    if (!a || !b) {
      $(a ? "compare-b" : "compare-a").focus();
      if (a) await offerRuns();
      return;
    }
    const found = await api("GET", `/api/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
    const [left, right] = await Promise.all([records(a), records(b)]);
    $("compare-verdict").textContent = verdict(found);
    $("compare-result").hidden = false;
    table(found, left, right);
    if (found.firstDifference !== null && found.firstDifference !== undefined) {
      differences(found);
      const row = $("first-difference");
      row.scrollIntoView({ block: "center" });
      row.focus({ preventScroll: true });
    }
    document.body.dataset.compared = "yes";
  }

  main().catch((error) => { refused(error); document.body.dataset.compared = "failed"; });
})();
