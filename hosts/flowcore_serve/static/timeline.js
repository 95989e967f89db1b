// The run page's timeline rows: one per log record, its summary a toggle (a
// button with aria-expanded, so Tab reaches it and Enter or Space opens it)
// that opens the record's payloads: an effect's input, prompt or question; an
// answer's output, error (whole message, details, attempts, and the handler's
// traceback the host kept), usage and who answered; a signal's payload; and
// the record itself. Every value is shown as JSON (text as itself), folded past
// FOLD_LINES lines or FOLD_CHARS characters with a "show all" button (an error
// and a traceback are always whole), and has a copy button. Built only from the records and GET /api/runs/{id}
// (``failures``); payloads are rendered when a row is opened.
"use strict";

const flowcoreTimeline = (() => {
  const { el, localTime } = flowcore;
  const FOLD_LINES = 12;
  const FOLD_CHARS = 2000;

  const clip = (text, n = 80) => (text.length > n ? text.slice(0, n - 1) + "…" : text);
  const pretty = (value) => {
    if (typeof value === "string") return value;
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  };

  // navigator.clipboard where the page may use it, else a selected textarea and
  // the copy command.
  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return true;
      } catch (e) { /* fall back below */ }
    }
    const area = el("textarea", { class: "copy-buffer", readonly: true, "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    let done = false;
    try { done = document.execCommand("copy"); } catch (e) { done = false; }
    area.remove();
    return done;
  }

  // One labelled value: a heading, copy and (when folded) "show all" buttons, the text.
  function value(label, data, extra = {}) {
    const text = pretty(data);
    const lines = text.split("\n");
    const folded = !extra.whole && (lines.length > FOLD_LINES || text.length > FOLD_CHARS);
    const head = lines.slice(0, FOLD_LINES).join("\n").slice(0, FOLD_CHARS);
    const pre = el("pre", { class: extra.error ? "value error" : "value", "data-folded": folded ? "yes" : "no" },
      folded ? head + "\n…" : text);
    const said = el("span", { class: "copied muted small", role: "status" });
    const copy = el("button", { type: "button", class: "copy", "aria-label": `Copy ${label}` }, "Copy");
    copy.addEventListener("click", async () => {
      said.textContent = (await copyText(text)) ? "Copied." : "Could not copy: select the text instead.";
    });
    const tools = [copy];
    if (folded) {
      const all = el("button", { type: "button", class: "show-all", "aria-expanded": "false", "aria-label": `Show all of ${label}` },
        `Show all (${lines.length} lines)`);
      all.addEventListener("click", () => {
        const open = all.getAttribute("aria-expanded") !== "true";
        all.setAttribute("aria-expanded", open ? "true" : "false");
        pre.textContent = open ? text : head + "\n…";
        pre.dataset.folded = open ? "no" : "yes";
        all.textContent = open ? "Fold" : `Show all (${lines.length} lines)`;
      });
      tools.push(all);
    }
    return el("div", { class: "payload", "data-part": extra.part || label },
      el("div", { class: "payload-head" }, el("h4", {}, label), ...tools, said), pre);
  }

  function fact(label, text, part) {
    return el("p", { class: "payload-fact", "data-part": part || label }, el("b", {}, `${label}: `), text);
  }

  function usageLine(u) {
    const parts = [];
    if (u.tokens) {
      const split = [];
      if (u.inputTokens) split.push(`${u.inputTokens} in`);
      if (u.outputTokens) split.push(`${u.outputTokens} out`);
      if (u.cacheReadTokens) split.push(`${u.cacheReadTokens} cached`);
      parts.push(`${u.tokens} tokens` + (split.length ? ` (${split.join(", ")})` : ""));
    }
    if (u.costMinorUnits) parts.push(`cost ${u.costMinorUnits}`);
    if (u.turns) parts.push(`${u.turns} turns`);
    if (u.toolCalls) parts.push(`${u.toolCalls} tool calls`);
    if (u.steps) parts.push(`${u.steps} steps`);
    return parts.length ? parts.join(" · ") : "none reported";
  }

  function childLink(id) {
    return el("a", { href: `/runs/${encodeURIComponent(id)}`, class: "child-link" }, id);
  }

  function errorParts(error, failure) {
    const out = [];
    if (!error || typeof error !== "object") return out;
    out.push(value("Error", `${error.type}: ${error.message === undefined ? "" : error.message}`, { error: true, whole: true, part: "error" }));
    if (error.details !== undefined && error.details !== null) out.push(value("Error details", error.details, { part: "details" }));
    if (error.cause !== undefined && error.cause !== null) out.push(value("Cause", error.cause, { part: "cause" }));
    if (Array.isArray(error.attempts) && error.attempts.length) {
      const items = error.attempts.map((a, i) => el("li", {}, `attempt ${i + 1}: ${a.type}: ${a.message || ""}`));
      out.push(el("div", { class: "payload", "data-part": "attempts" }, el("h4", {}, "Attempts"), el("ol", { class: "attempts" }, ...items)));
    }
    if (failure && failure.traceback) out.push(value("Traceback", failure.traceback, { error: true, whole: true, part: "traceback" }));
    return out;
  }

  // The payloads of ``record``; ``ctx``: {failures: key -> failure, asked: key ->
  // the ask-human effect, children: Set of child run ids, short(key)}.
  function payloads(record, ctx) {
    const d = record.data || {};
    const out = [];
    const key = typeof d.idempotencyKey === "string" ? d.idempotencyKey : null;
    if (key) out.push(fact("Key", key, "key"));
    switch (record.type) {
      case "run.started":
        out.push(fact("Flow", `${d.flowId} v${d.version}`, "flow"));
        if (d.input !== undefined) out.push(value("Input", d.input));
        if (d.metadata) out.push(value("Metadata", d.metadata));
        break;
      case "effect.emitted":
        if (d.kind === "call-tool") out.push(fact("Tool", d.tool, "tool"));
        if (d.kind === "run-agent") out.push(fact("Agent", d.agentId + (d.member ? ` (member ${d.member})` : ""), "agent"));
        if (d.kind === "run-team") out.push(fact("Team", d.teamId, "team"));
        if (d.instructions !== undefined) out.push(value("Instructions", d.instructions));
        if (d.prompt !== undefined) out.push(value("Prompt", d.prompt));
        if (d.input !== undefined) out.push(value("Input", d.input));
        if (d.kind === "ask-human") {
          out.push(value("Question", d.question));
          if (Array.isArray(d.options)) out.push(fact("Options", d.options.join(" / "), "options"));
          if (d.default !== undefined) out.push(fact("Default", String(d.default), "default"));
        }
        if (d.kind === "await-signal") out.push(fact("Signal", d.signal, "signal"));
        if (d.kind === "sleep" && d.untilMs !== undefined) out.push(fact("Until", localTime(d.untilMs), "until"));
        if (d.kind === "run-subflow") {
          out.push(fact("Flow", d.flowId, "flow"));
          if (key && ctx.children.has(key)) out.push(el("p", { class: "payload-fact" }, el("b", {}, "Child run: "), childLink(key)));
        }
        if (d.kind === "settled") {
          out.push(fact("Status", d.status, "status"));
          if (d.output !== undefined) out.push(value("Output", d.output));
          out.push(...errorParts(d.error, null));
        }
        break;
      case "event.reported":
        if (d.kind === "human-answered") {
          const asked = key ? ctx.asked.get(key) : undefined;
          if (asked) {
            out.push(value("Question", asked.question));
            if (Array.isArray(asked.options)) out.push(fact("Options", asked.options.join(" / "), "options"));
          }
          out.push(value("Answer", d.answer));
          out.push(fact("Answered by", d.principal === undefined || d.principal === null ? "(not recorded)" : String(d.principal), "principal"));
        }
        if (d.kind === "signal-received") {
          out.push(fact("Signal", d.signal, "signal"));
          out.push(value("Payload", d.payload === undefined ? null : d.payload));
        }
        if (d.kind === "update-requested") {
          out.push(fact("Update", d.name, "update"));
          out.push(fact("Update id", d.updateId, "update-id"));
          out.push(value("Input", d.input === undefined ? null : d.input));
          out.push(fact("Requested by", d.principal === undefined || d.principal === null ? "(not recorded)" : String(d.principal), "principal"));
        }
        if (d.kind === "subflow-settled") {
          out.push(fact("Status", d.status, "status"));
          if (key && ctx.children.has(key)) out.push(el("p", { class: "payload-fact" }, el("b", {}, "Child run: "), childLink(key)));
        }
        if (d.output !== undefined && d.kind !== "human-answered") out.push(value("Output", d.output));
        out.push(...errorParts(d.error, key ? ctx.failures.get(key) : null));
        if (d.usage) out.push(fact("Usage", usageLine(d.usage), "usage"));
        if (d.kind === "cancel-requested" && d.reason) out.push(value("Reason", d.reason));
        break;
      case "event.rejected":
        out.push(value("Reason", String(d.reason || ""), { error: true, part: "reason" }));
        break;
      case "run.settled":
        out.push(fact("Status", d.status, "status"));
        if (d.output !== undefined) out.push(value("Output", d.output));
        out.push(...errorParts(d.error, null));
        break;
      default:
        break;
    }
    out.push(value("Record", d, { part: "record" }));
    return out;
  }

  // A row: the number, the time, the record type, the summary as the toggle of a
  // panel below it, filled when opened (and again by ``refresh``).
  function row(record, text, ctx) {
    const kind = record.data && typeof record.data.kind === "string" ? record.data.kind : "";
    const panelId = `rec-${record.index}-payloads`;
    const panel = el("div", { class: "rec-payloads", id: panelId, hidden: true });
    const toggle = el("button", { type: "button", class: "rec-toggle", "aria-expanded": "false", "aria-controls": panelId }, text);
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      if (open) panel.replaceChildren(...payloads(record, ctx));
      panel.hidden = !open;
    });
    const node = el(
      "tr",
      { "data-index": record.index, "data-type": record.type, class: `rec ${record.type.replace(".", "-")}` },
      el("td", { class: "num" }, record.index),
      el("td", {}, flowcore.when(record.at)),
      el("td", {}, record.type),
      el("td", { "data-kind": kind }, toggle, panel),
    );
    node.refresh = () => { if (!panel.hidden) panel.replaceChildren(...payloads(record, ctx)); };
    return node;
  }

  return { row, payloads, value, usageLine, copyText, clip };
})();
