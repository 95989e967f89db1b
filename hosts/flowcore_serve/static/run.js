// The run page: the diagram (Mermaid, from GET /api/runs/{id}/graph, each node
// coloured by how the run stands there), the timeline (the Server-Sent Events
// stream, one row per log record, each opening to its payloads: timeline.js),
// the run's state, usage by member and child run, and actions (GET /api/runs/{id};
// answers, signals and cancel POST to the API), and what its handlers publish
// (the progress stream, shown under the step that published it). New records
// refresh the state.
"use strict";

(() => {
  const { api, el, localTime, clockTime, duration, notice, refused, statusBadge } = flowcore;
  const runId = document.body.dataset.runId;
  const writes = document.body.dataset.writes === "yes";
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  const prefix = runId + "/";
  const RECORD_TYPES = [
    "run.started", "effect.emitted", "event.reported", "event.rejected",
    "run.settled", "effect.redispatched", "scheduled.changed",
  ];

  const $ = (id) => document.getElementById(id);
  const short = (key) => (typeof key === "string" && key.startsWith(prefix) ? key.slice(prefix.length) : key);
  const clip = (text, n = 80) => (text.length > n ? text.slice(0, n - 1) + "…" : text);
  const json = (value) => {
    try { return JSON.stringify(value); } catch (e) { return String(value); }
  };

  // --- the diagram (diagram.js) ------------------------------------------------------

  const diagram = flowcoreDiagram.attach($("diagram"));
  async function refreshGraph() {
    await diagram.draw(await api("GET", `${base}/graph`), $("status").dataset.status);
  }

  // --- the timeline ------------------------------------------------------------------

  let lastIndex = -1;
  const timeline = $("timeline-body");

  function summary(record) {
    const d = record.data || {};
    switch (record.type) {
      case "run.started":
        return `${d.flowId} v${d.version}` + (d.input !== undefined && d.input !== null ? ` input ${clip(json(d.input), 60)}` : "");
      case "effect.emitted": {
        const what = {
          "call-tool": d.tool,
          "run-agent": d.agentId + (d.member ? ` (${d.member})` : ""),
          "run-team": d.teamId,
          "ask-human": d.question === undefined ? undefined : `“${clip(String(d.question), 60)}”`,
          "sleep": d.untilMs === undefined ? undefined : `until ${clockTime(d.untilMs)}`,
          "await-signal": d.signal,
          "run-subflow": d.flowId,
          "settled": d.status,
        }[d.kind];
        return [d.kind, what, d.idempotencyKey ? short(d.idempotencyKey) : null].filter((x) => x !== undefined && x !== null && x !== "").join(" · ");
      }
      case "event.reported": {
        const extra = {
          "human-answered": d.answer === undefined ? undefined : `answer ${clip(json(d.answer), 40)}`,
          "signal-received": d.signal,
          "effect-failed": d.error ? `${d.error.type}: ${clip(String(d.error.message || ""), 100)}` : undefined,
          "subflow-settled": d.status,
          "cancel-requested": d.reason ? clip(String(d.reason), 50) : undefined,
          "update-requested": d.name === undefined ? undefined : `${d.name} · id ${clip(String(d.updateId), 40)}`,
        }[d.kind];
        return [d.kind, d.idempotencyKey ? short(d.idempotencyKey) : null, extra].filter((x) => x !== undefined && x !== null && x !== "").join(" · ");
      }
      case "event.rejected":
        return `${d.event && d.event.kind ? d.event.kind : "event"} refused: ${clip(String(d.reason || ""), 70)}`;
      case "run.settled":
        return String(d.status);
      case "effect.redispatched":
        return `${short(d.idempotencyKey)} · recovery ${d.recovery}`;
      default:
        return clip(json(d), 100);
    }
  }

  // What the rows' payloads read besides their record (timeline.js).
  const context = { failures: new Map(), asked: new Map(), children: new Set() };
  let failuresSeen = "";

  function addRecord(record) {
    if (typeof record.index !== "number" || record.index <= lastIndex) return;
    lastIndex = record.index;
    const d = record.data || {};
    if (record.type === "effect.emitted" && d.kind === "ask-human" && typeof d.idempotencyKey === "string") {
      context.asked.set(d.idempotencyKey, d);
    }
    timeline.append(flowcoreTimeline.row(record, summary(record), context));
  }

  // The run's handler failures and children, for the rows; open rows they change are drawn again.
  function updateContext(view) {
    const failures = view.failures || [];
    context.children = new Set(view.children || []);
    const seen = JSON.stringify(failures);
    if (seen === failuresSeen) return;
    failuresSeen = seen;
    context.failures = new Map(failures.map((f) => [f.key, f]));
    for (const node of timeline.querySelectorAll("tr.rec")) if (node.refresh) node.refresh();
  }

  // Records the stream skipped (a type this page does not listen for) are read
  // from the NDJSON endpoint, so the timeline has no holes.
  let chain = Promise.resolve();
  function receive(record) {
    chain = chain.then(async () => {
      if (record.index > lastIndex + 1) {
        const response = await fetch(`${base}/events?start=${lastIndex + 1}`, { credentials: "same-origin" });
        if (response.ok) {
          for (const line of (await response.text()).split("\n")) {
            if (!line.trim()) continue;
            const earlier = JSON.parse(line);
            if (earlier.index < record.index) addRecord(earlier);
          }
        }
      }
      addRecord(record);
      soon();
    }).catch((error) => refused(error));
  }

  function follow() {
    const source = new EventSource(`${base}/events/stream`);
    for (const type of RECORD_TYPES) {
      source.addEventListener(type, (event) => receive(JSON.parse(event.data)));
    }
    source.addEventListener("end", () => { source.close(); soon(); });
    source.onerror = () => {
      // The browser reconnects by itself (resuming after the last id); a
      // refusal closes the stream for good.
      if (source.readyState === EventSource.CLOSED) notice("The live event stream stopped: reload the page.");
    };
  }

  // --- the progress stream -----------------------------------------------------------
  //
  // What the run's handlers publish, from GET .../progress/stream: one block per
  // piece of work (its key), headed by its step, marked while the step runs. In a
  // block, consecutive text chunks are joined; a structured item is one compact
  // line. Bounded: a block keeps its last PROGRESS_PARTS parts and PROGRESS_CHARS
  // characters of text, the page its last PROGRESS_BLOCKS blocks.

  const PROGRESS_PARTS = 200;
  const PROGRESS_CHARS = 20000;
  const PROGRESS_BLOCKS = 20;
  let progressIndex = -1;
  let runningKeys = new Set();
  const blocks = new Map(); // key -> {node, body}

  function progressBlock(key, step) {
    let block = blocks.get(key);
    if (block) return block;
    const body = el("div", { class: "progress-body" });
    const node = el(
      "div",
      { class: "progress", "data-key": key, "data-step": step || "", "data-running": runningKeys.has(key) ? "yes" : "no" },
      el("h3", {}, step || short(key), " ", el("span", { class: "muted small" }, short(key))),
      body,
    );
    block = { node, body };
    blocks.set(key, block);
    $("progress").append(node);
    while (blocks.size > PROGRESS_BLOCKS) {
      const [oldest] = blocks.keys();
      blocks.get(oldest).node.remove();
      blocks.delete(oldest);
    }
    $("progress-section").hidden = false;
    return block;
  }

  function eventLine(data) {
    if (data && typeof data === "object" && !Array.isArray(data) && typeof data.kind === "string") {
      const { kind, ...rest } = data;
      const name = typeof rest.tool === "string" ? rest.tool : null;
      if (name !== null) delete rest.tool;
      return el("p", { class: "progress-event", "data-kind": kind },
        el("b", {}, kind), name === null ? "" : ` ${name}`, ` ${clip(json(rest), 200)}`);
    }
    return el("p", { class: "progress-event" }, clip(json(data), 200));
  }

  function addProgress(envelope) {
    if (typeof envelope.index !== "number" || envelope.index <= progressIndex) return;
    progressIndex = envelope.index;
    if (envelope.type === "progress.dropped") {
      const gap = $("progress-dropped");
      const d = envelope.data || {};
      gap.textContent = `${d.count} earlier item(s) were dropped (indexes ${d.from} to ${envelope.index}): the run keeps its newest.`;
      gap.hidden = false;
      $("progress-section").hidden = false;
      return;
    }
    const d = envelope.data || {};
    const block = progressBlock(String(d.key), d.step);
    const last = block.body.lastElementChild;
    if (typeof d.data === "string") {
      if (last && last.tagName === "PRE") {
        last.textContent += d.data;
      } else {
        block.body.append(el("pre", { class: "progress-text" }, d.data));
      }
    } else {
      block.body.append(eventLine(d.data));
    }
    while (block.body.childElementCount > PROGRESS_PARTS) block.body.firstElementChild.remove();
    // At most PROGRESS_CHARS characters of text: the oldest go first.
    const texts = [...block.body.querySelectorAll("pre.progress-text")];
    let over = texts.reduce((n, node) => n + node.textContent.length, 0) - PROGRESS_CHARS;
    for (const node of texts) {
      if (over <= 0) break;
      const text = node.textContent;
      if (text.length <= over + 1) {
        node.remove();
        over -= text.length;
      } else {
        node.textContent = "…" + text.slice(over + 1);
        over = 0;
      }
    }
  }

  function markRunning(keys) {
    runningKeys = new Set(keys);
    for (const [key, block] of blocks) block.node.dataset.running = runningKeys.has(key) ? "yes" : "no";
  }

  // After a dropped connection the page opens the stream again itself, from the
  // index after the last item it has (the server also honours Last-Event-ID),
  // waiting longer after each failure in a row; it stops at the stream's `end`.
  let progressFailures = 0;
  function followProgress() {
    const source = new EventSource(`${base}/progress/stream?start=${progressIndex + 1}`);
    const take = (event) => { progressFailures = 0; addProgress(JSON.parse(event.data)); };
    source.addEventListener("progress", take);
    source.addEventListener("progress.dropped", take);
    source.addEventListener("end", () => source.close());
    source.onerror = () => {
      source.close();
      progressFailures += 1;
      if (progressFailures > 8) {
        notice("The live progress stream stopped: reload the page.");
        return;
      }
      setTimeout(followProgress, Math.min(250 * 2 ** (progressFailures - 1), 10000));
    };
  }

  // --- the state ---------------------------------------------------------------------

  let pending = null;
  function soon() {
    if (pending !== null) return;
    pending = setTimeout(() => {
      pending = null;
      refreshView().then(refreshGraph).catch(refused);
    }, 150);
  }

  function budgetText(view) {
    const b = view.budget || {};
    const left = (view.waits && view.waits.budget) || {};
    const parts = [];
    if (b.stepsLeft !== undefined && b.stepsLeft !== null) parts.push(`${b.stepsLeft} steps (${b.stepsUsed} used)`);
    if (b.costLeft !== undefined && b.costLeft !== null) parts.push(`${b.costLeft} cost units (${b.costUsed} used)`);
    if (typeof left.wallClockMs === "number" && view.run.status === "running") parts.push(`${duration(left.wallClockMs)} of wall clock`);
    return parts.length ? parts.join(" · ") : "unlimited";
  }

  // The run's figures (flowcore.usage_figures, the API's `budget`) in the words
  // `flowcore show` and `flowcore replay` print them.
  // Replaces a node's contents only when what they show has changed: a live
  // update must not re-create a link or a button under the pointer (the click
  // in progress would be lost).
  function same(node, data, build) {
    const key = JSON.stringify(data);
    if (node.dataset.shown === key) return;
    node.dataset.shown = key;
    node.replaceChildren(...build());
  }

  function usageText(view) {
    const b = view.budget || {};
    const left = (key) => (b[`${key}Left`] === null || b[`${key}Left`] === undefined ? "unlimited" : String(b[`${key}Left`]));
    const parts = [`${b.stepsUsed} steps used, ${left("steps")} left`, `cost ${b.costUsed} used, ${left("cost")} left`];
    for (const [key, words] of [["tokens", "tokens"], ["toolCalls", "tool calls"], ["turns", "turns"]]) {
      if (!b[`${key}Used`] && (b[`${key}Left`] === null || b[`${key}Left`] === undefined)) continue;
      let split = "";
      if (key === "tokens" && (b.inputTokensUsed || b.outputTokensUsed || b.cacheReadTokensUsed)) {
        split = ` (${b.inputTokensUsed} input, ${b.outputTokensUsed} output, ${b.cacheReadTokensUsed} cache reads)`;
      }
      parts.push(`${b[`${key}Used`]} ${words} used${split}, ${left(key)} left`);
    }
    return parts.join("; ");
  }

  async function answer(question, value, buttons) {
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await api("POST", `${base}/answers`, { key: question.key, answer: value });
      notice("");
      soon();
    } catch (error) {
      refused(error);
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  function questionBlock(q, running) {
    const box = el("div", { class: "question", "data-key": q.key, "data-step": q.step });
    box.append(el("p", { class: "text" }, q.question));
    const meta = [];
    if (q.default !== null && q.default !== undefined) meta.push(`default: ${q.default}`);
    if (q.deadlineMs !== null && q.deadlineMs !== undefined) meta.push(`deadline: ${localTime(q.deadlineMs)}`);
    meta.push(`step ${q.step}`);
    box.append(el("p", { class: "muted small" }, meta.join(" · ")));
    if (!writes || !running) return box;
    if (Array.isArray(q.options)) {
      const row = el("div", { class: "options" });
      const buttons = q.options.map((option) => el(
        "button",
        { type: "button", class: option === q.default ? "option default" : "option", "data-answer": option },
        option,
      ));
      buttons.forEach((b, i) => b.addEventListener("click", () => answer(q, q.options[i], buttons)));
      row.append(...buttons);
      box.append(row);
    } else {
      const input = el("input", { type: "text", class: "free", "aria-label": "answer", required: true });
      const send = el("button", { type: "submit" }, "Answer");
      const form = el("form", { class: "free-answer" }, input, send);
      form.addEventListener("submit", (event) => { event.preventDefault(); answer(q, input.value, [send]); });
      box.append(form);
    }
    return box;
  }

  function waitingItems(waits) {
    const items = [];
    for (const w of waits.work || []) {
      const e = w.effect || {};
      const target = e.tool || e.agentId || e.teamId || e.flowId || "";
      items.push(`${e.kind} ${target} · ${short(w.key)}${w.held ? " (held back by max_concurrency)" : ""}`);
    }
    for (const s of waits.signals || []) {
      items.push(`signal “${s.signal}” (step ${s.step})` + (s.deadlineMs ? ` until ${localTime(s.deadlineMs)}` : ""));
    }
    for (const t of waits.timers || []) {
      if (t.role === "ask-timeout" || t.role === "signal-timeout" || t.role === "deadline") continue;
      items.push(`timer ${t.role} ${short(t.key)} at ${localTime(t.dueMs)}`);
    }
    for (const [name, payloads] of Object.entries(waits.buffered || {})) {
      items.push(`buffered signal “${name}” ×${payloads.length}`);
    }
    return items;
  }

  function resultBlock(view) {
    const out = [];
    if (view.run.status === "completed") {
      out.push(el("h3", {}, "Output"), el("pre", { id: "output" }, JSON.stringify(view.output, null, 2)));
    }
    if (view.error !== null && view.error !== undefined) {
      out.push(el("h3", {}, "Error"), el("pre", { id: "error", class: "error" }, JSON.stringify(view.error, null, 2)));
    }
    if (view.exhausted) out.push(el("p", {}, `Budget exhausted: ${view.exhausted}`));
    if (Array.isArray(view.report) && view.report.length) {
      const rows = view.report.map((r) => el(
        "tr", {},
        el("td", {}, short(r.idempotencyKey)), el("td", {}, r.effect), el("td", {}, r.target || ""),
        el("td", { "data-status": r.status }, r.status),
      ));
      out.push(el("h3", {}, "Report"), el("table", { class: "report", id: "report" },
        el("thead", {}, el("tr", {}, el("th", {}, "Key"), el("th", {}, "Effect"), el("th", {}, "Target"), el("th", {}, "Status"))),
        el("tbody", {}, ...rows)));
    }
    if (Array.isArray(view.deadLetters) && view.deadLetters.length) {
      out.push(el("h3", {}, "Dead letters"), el("pre", {}, JSON.stringify(view.deadLetters, null, 2)));
    }
    return out;
  }

  // Usage by team member and by child run (GET /api/runs/{id} ``usageByMember``,
  // ``usageByChild``), under the run's own total: one row each, tokens split.
  function usageRows(view) {
    const rows = [];
    for (const [member, u] of Object.entries(view.usageByMember || {})) rows.push({ kind: "member", name: member, u });
    for (const [child, u] of Object.entries(view.usageByChild || {})) rows.push({ kind: "child", name: child, u });
    if (!rows.length) return rows;
    const b = view.budget || {};
    rows.unshift({ kind: "run", name: "this run (all)", u: {
      tokens: b.tokensUsed, inputTokens: b.inputTokensUsed, outputTokens: b.outputTokensUsed,
      cacheReadTokens: b.cacheReadTokensUsed, costMinorUnits: b.costUsed, turns: b.turnsUsed,
      toolCalls: b.toolCallsUsed, steps: b.stepsUsed,
    } });
    return rows;
  }

  function usageTable(rows) {
    if (!rows.length) return [];
    const n = (x) => (typeof x === "number" ? String(x) : "0");
    const head = ["Who", "Tokens", "Input", "Output", "Cache reads", "Cost", "Turns", "Tool calls", "Steps"];
    const body = rows.map((r) => el(
      "tr", { "data-kind": r.kind, "data-name": r.name },
      el("th", { scope: "row" }, r.kind === "child" ? el("a", { href: `/runs/${encodeURIComponent(r.name)}` }, r.name)
        : r.kind === "member" ? `member ${r.name}` : r.name),
      ...[r.u.tokens, r.u.inputTokens, r.u.outputTokens, r.u.cacheReadTokens, r.u.costMinorUnits, r.u.turns, r.u.toolCalls, r.u.steps]
        .map((x) => el("td", { class: "num" }, n(x))),
    ));
    return [el("table", { class: "usage-split", id: "usage-table" },
      el("caption", { class: "muted small" }, "Usage by team member and by child run"),
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ...body))];
  }

  async function refreshView() {
    const view = await api("GET", base);
    const run = view.run;
    const running = run.status === "running";
    statusBadge($("status"), run.status);
    $("started").replaceChildren(flowcore.when(run.createdAt));
    $("duration").textContent = duration(run.durationMs);
    $("principal").textContent = run.principal === null ? "—" : run.principal;
    $("budget").textContent = budgetText(view);
    $("usage").textContent = usageText(view);
    if (view.forkedFrom) {  // a fork: compare it with its source
      const link = $("compare-link");
      link.href = `/compare?a=${encodeURIComponent(runId)}&b=${encodeURIComponent(view.forkedFrom)}`;
      link.textContent = `Compare with its source, ${view.forkedFrom}`;
    }
    if (run.parent) {
      same($("crumb-parent"), run.parent, () => [el("a", { href: `/runs/${encodeURIComponent(run.parent)}` }, run.parent), " / "]);
      same($("parent"), run.parent, () => [el("a", { href: `/runs/${encodeURIComponent(run.parent)}` }, run.parent)]);
    }
    $("parent-row").hidden = !run.parent;
    updateContext(view);
    const split = usageRows(view);
    same($("usage-split"), split, () => usageTable(split));
    $("usage-section").hidden = split.length === 0;
    const childIds = view.children || [];
    same($("children"), childIds, () => {
      const children = childIds.map((id) => el("li", {}, el("a", { href: `/runs/${encodeURIComponent(id)}` }, id)));
      return children.length ? [el("h3", {}, "Child runs"), el("ul", {}, ...children)] : [];
    });

    const questions = view.waits.questions || [];
    same($("questions"), [questions, running], () =>
      questions.length ? questions.map((q) => questionBlock(q, running)) : [el("p", { class: "muted" }, "None open.")]);
    markRunning(running ? (view.waits.work || []).map((w) => w.key) : []);
    const waiting = running ? waitingItems(view.waits) : [];
    same($("waiting"), waiting, () => waiting.map((text) => el("li", {}, text)));
    $("waiting-section").hidden = waiting.length === 0;

    const result = resultBlock(view);
    $("result").replaceChildren(...result);
    $("result-section").hidden = result.length === 0;
  }

  // Keep the duration and remaining wall clock moving while nothing is logged.
  setInterval(() => { if ($("status").dataset.status === "running" && !document.hidden) soon(); }, 5000);

  refreshView().then(refreshGraph).catch(refused);
  follow();
  followProgress();
})();
