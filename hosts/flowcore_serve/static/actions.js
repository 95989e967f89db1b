// The run page's actions: each an operation of the catalogue, called on its
// HTTP route, shown only where the principal's access (GET /api/whoami) allows
// it and the run's status makes sense of it. Signal and cancel while running;
// resume once failed; fork from a step or a record; upgrade (admin, running)
// after the dry run's verdict; delete (admin). Whatever destroys or re-runs
// something is confirmed in a <dialog> first; a refusal is shown as typed.
"use strict";

(() => {
  const { api, el } = flowcore;
  const { access, allows, invalid, show, perform } = flowcoreConsole;
  const $ = (id) => document.getElementById(id);
  const section = $("run-actions");
  if (!section) return;
  const runId = document.body.dataset.runId;
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  const prefix = runId + "/";
  const box = $("actions-error");
  // A form the page was not given (the principal's access does not reach it) is
  // skipped: its listeners too.
  const on = (id, type, listener) => { const node = $(id); if (node) node.addEventListener(type, listener); };
  const runLink = (id) => el("a", { href: `/runs/${encodeURIComponent(id)}` }, id);

  // Which form shows for which access and status.
  const FORMS = {
    "act-signal": { access: "write", when: (s) => s === "running" },
    "act-cancel": { access: "write", when: (s) => s === "running" },
    "act-resume": { access: "write", when: (s) => s === "failed" },
    "act-fork": { access: "write", when: () => true },
    "act-upgrade": { access: "admin", when: (s) => s === "running" },
    "act-delete": { access: "admin", when: () => true },
  };

  let who = null;
  let view = null;

  function done(...parts) {
    $("actions-done").replaceChildren(...parts);
    $("actions-done").hidden = parts.length === 0;
  }

  // --- the fork picker: the run's steps (where each first ran) and records -------------

  function stepOf(key) {
    if (typeof key !== "string") return null;
    const rel = key.startsWith(prefix) ? key.slice(prefix.length) : key;
    const step = rel.split("#")[0];
    return step && !step.startsWith("~") ? step : null;
  }

  async function forkPoints() {
    const response = await fetch(`${base}/events`, { credentials: "same-origin", headers: { Accept: "application/x-ndjson" } });
    if (!response.ok) throw new flowcore.Problem(response.status, await response.json().catch(() => null));
    const steps = [];
    const records = [];
    for (const line of (await response.text()).split("\n")) {
      if (!line.trim()) continue;
      const record = JSON.parse(line);
      const d = record.data || {};
      if (record.type === "effect.emitted") {
        const step = stepOf(d.idempotencyKey);
        if (step && !steps.includes(step)) steps.push(step);
      }
      if (record.index > 0) {
        const what = [record.type, d.kind, d.idempotencyKey ? String(d.idempotencyKey).replace(prefix, "") : null].filter(Boolean).join(" · ");
        records.push(el("option", { value: `at:${record.index}` }, `before #${record.index} (${what})`));
      }
    }
    const select = $("fork-point");
    const chosen = select.value;
    select.replaceChildren(
      el("optgroup", { label: "From a step (it and all after it run again)" },
        ...steps.map((s) => el("option", { value: `step:${s}` }, `step ${s}`))),
      el("optgroup", { label: "From a record (the records before it are kept)" }, ...records),
    );
    if (chosen && [...select.options].some((o) => o.value === chosen)) select.value = chosen;
  }

  // --- upgrade: the registry's versions of this run's flow --------------------------

  async function upgradeChoices() {
    const list = await api("GET", "/api/flows");
    const flowId = view.run.flowId;
    const mine = list.flows.filter((f) => f.flowId === flowId);
    $("upgrade-flow").replaceChildren(...mine.map((f) => el("option", { value: f.flowId }, `${f.flowId} v${f.version} (${String(f.source).split("/").pop()})`)));
    $("upgrade-none").hidden = mine.length > 0;
    $("upgrade-check").disabled = mine.length === 0;
  }

  // --- resume: where the server has several handler modules for the flow (GET
  // /api/flows lists them in `modules`), a choice of one; none sends the run's own.

  async function resumeChoices() {
    const list = await api("GET", "/api/flows");
    const entry = list.flows.find((f) => f.flowId === view.run.flowId);
    const modules = entry && Array.isArray(entry.modules) ? entry.modules : [];
    const select = $("resume-tools");
    const chosen = select.value;
    select.replaceChildren(
      el("option", { value: "" }, "the run's own"),
      ...modules.map((m) => el("option", { value: m }, m)),
    );
    if (modules.includes(chosen)) select.value = chosen;
    $("resume-modules").hidden = modules.length < 2;
  }

  // --- state ------------------------------------------------------------------------

  async function refresh() {
    try {
      if (who === null) who = await access();
      view = await api("GET", base);
    } catch (error) {
      show(box, error);
      return;
    }
    const status = view.run.status;
    let any = false;
    for (const [id, rule] of Object.entries(FORMS)) {
      if (!$(id)) continue;
      const shown = allows(who, rule.access) && rule.when(status);
      $(id).hidden = !shown;
      any = any || shown;
    }
    section.hidden = !any;
    // Cancelling the source along with the fork means something only while it runs.
    const cancelSource = $("fork-cancel-source");
    if (cancelSource) {
      cancelSource.closest("label").hidden = status !== "running";
      if (status !== "running") cancelSource.checked = false;
    }
    if ($("act-fork") && !$("act-fork").hidden) forkPoints().catch((error) => show(box, error));
    if ($("act-resume") && !$("act-resume").hidden) resumeChoices().catch((error) => show(box, error));
    if ($("act-upgrade") && !$("act-upgrade").hidden) upgradeChoices().catch((error) => show(box, error));
    const names = $("signal-names");
    if (names) names.replaceChildren(...(view.waits.signals || []).map((s) => el("option", { value: s.signal })));
  }

  let pending = null;
  function soon() {
    if (pending !== null) return;
    pending = setTimeout(() => { pending = null; refresh(); }, 150);
  }
  // run.js redraws the status badge (often with the same status): follow it
  // when the status changes.
  let seenStatus = $("status").dataset.status;
  new MutationObserver(() => {
    if ($("status").dataset.status === seenStatus) return;
    seenStatus = $("status").dataset.status;
    soon();
  }).observe($("status"), { attributes: true, childList: true, characterData: true, subtree: true });
  // New records are new fork points; the list is left alone while it is in use.
  let pickerTimer = null;
  const timeline = $("timeline-body");
  if (timeline) {
    new MutationObserver(() => {
      const picker = $("fork-point");
      if (!picker || $("act-fork").hidden || pickerTimer !== null) return;
      pickerTimer = setTimeout(() => {
        pickerTimer = null;
        if (document.activeElement !== picker) forkPoints().catch((error) => show(box, error));
      }, 500);
    }).observe(timeline, { childList: true });
  }

  // --- the actions ------------------------------------------------------------------

  on("act-signal", "submit", async (event) => {
    event.preventDefault();
    const text = $("signal-payload").value.trim();
    let payload = null;
    if (text) {
      try { payload = JSON.parse(text); } catch (e) { show(box, invalid(`the payload is not JSON: ${e.message}`)); return; }
    }
    const name = $("signal-name").value.trim();
    const r = await perform(box, null, () => api("POST", `${base}/signals`, { name, payload }));
    if (r.ok) { $("signal-payload").value = ""; done(`Signal “${name}” sent.`); soon(); }
  });

  on("act-cancel", "submit", async (event) => {
    event.preventDefault();
    const reason = $("cancel-reason").value;
    const r = await perform(box, [
      `Cancel ${runId}?`,
      "The run stops: its open work is abandoned, its compensations run, and it settles as cancelled. This cannot be undone.",
      "Cancel run",
    ], () => api("POST", `${base}/cancel`, { reason }));
    if (r.ok) { done("Cancel requested."); soon(); }
  });

  on("act-resume", "submit", async (event) => {
    event.preventDefault();
    const tools = $("resume-modules").hidden ? "" : $("resume-tools").value;
    const r = await perform(box, [
      `Resume ${runId}?`,
      "The failed step runs again (its tool is called again, with the same input), and the run goes on from there"
        + (tools ? `, with the handlers of ${tools}.` : "."),
      "Resume run",
    ], () => api("POST", `${base}/resume`, tools ? { tools } : {}));
    // The page's streams closed when the run settled: open them again.
    if (r.ok) window.location.reload();
  });

  on("act-fork", "submit", async (event) => {
    event.preventDefault();
    const point = $("fork-point").value;
    if (!point) return;
    const body = point.startsWith("step:") ? { fromStep: point.slice(5) } : { at: Number(point.slice(3)) };
    const cancelSource = $("fork-cancel-source").checked;
    if (cancelSource) body.cancelSource = true;
    const where = body.fromStep !== undefined ? `from step ${body.fromStep} (it and every step after it run again)` : `with the records before #${body.at}`;
    const r = await perform(box, [
      `Fork ${runId}?`,
      `A new run starts ${where}; work after that point is done again.` + (cancelSource ? " This run is cancelled." : ""),
      "Fork run",
    ], () => api("POST", `${base}/fork`, body));
    if (r.ok) { done("Forked as ", runLink(r.value.runId), "."); soon(); }
  });

  on("upgrade-flow", "change", () => { $("upgrade-go").disabled = true; $("upgrade-verdict").textContent = ""; });
  on("upgrade-check", "click", async () => {
    $("upgrade-go").disabled = true;
    const verdict = $("upgrade-verdict");
    verdict.textContent = "Checking…";
    const flow = $("upgrade-flow").value;
    const r = await perform(box, null, () => api("POST", `${base}/upgrade`, { flow, dryRun: true }));
    if (!r.ok) { verdict.textContent = "The log does not replay against that version: see the error above."; return; }
    const v = r.value;
    verdict.dataset.verdict = v.changed ? "replays" : "same";
    verdict.textContent = v.changed
      ? `The log replays against v${v.to.version}: the run would move from v${v.from.version} to v${v.to.version} at record #${v.at}, then wait for ${v.pending.length} effect(s).`
      : `The run is on that version already (v${v.to.version}): nothing to do.`;
    $("upgrade-go").disabled = !v.changed;
  });
  on("act-upgrade", "submit", async (event) => {
    event.preventDefault();
    const flow = $("upgrade-flow").value;
    const r = await perform(box, [
      `Upgrade ${runId}?`,
      `The run moves to the registry's version of ${flow}: its log is replayed against it and the steps still to run follow the new version.`,
      "Upgrade run",
    ], () => api("POST", `${base}/upgrade`, { flow }));
    if (r.ok) { $("upgrade-go").disabled = true; done(`Upgraded to v${r.value.to.version}.`); soon(); }
  });

  on("act-delete", "submit", async (event) => {
    event.preventDefault();
    const running = view && view.run.status === "running";
    const children = view ? (view.children || []).length : 0;
    const r = await perform(box, [
      `Delete ${runId}?`,
      `The run, its log` + (children ? ` and its ${children} child run(s)` : "") + " are deleted for good."
        + (running ? " It is running: it is cancelled first." : ""),
      "Delete run",
    ], () => api("DELETE", `${base}${running ? "?force=true" : ""}`));
    if (r.ok) window.location.href = "/";
  });

  refresh();
})();
