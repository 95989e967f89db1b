// The run page's diagram: the flow as Mermaid text (GET /api/runs/{id}/graph),
// each node coloured by how the run stands there (the graph's ``outcomes``:
// running, waiting, done, failed, cancelled, skipped; the legend in run.html
// names the same), fitted to its box but never drawn smaller than MIN_SCALE
// (the box scrolls instead), shown at full size by a click or Enter.
"use strict";

const flowcoreDiagram = (() => {
  const { el } = flowcore;

  let drawn = 0; // diagrams rendered: each render needs an id of its own
  if (window.mermaid) {
    window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "neutral", flowchart: { useMaxWidth: true } });
  }

  // How the run stands at a node (GET .../graph ``outcomes``), drawn as a class;
  // the legend in run.html names the same words.
  const OUTCOMES = {
    running: "fill:#dbe4ff,stroke:#364fc7,stroke-width:3px",
    waiting: "fill:#ffe8a3,stroke:#d9480f,stroke-width:3px",
    done: "fill:#d3f9d8,stroke:#2b8a3e",
    failed: "fill:#ffc9c9,stroke:#c92a2a,stroke-width:2px",
    cancelled: "fill:#fff3bf,stroke:#8f5b00,stroke-dasharray:4 3",
    skipped: "fill:#f1f3f5,stroke:#adb5bd,color:#868e96,stroke-dasharray:2 3",
  };
  const SETTLED_END = { completed: "done", failed: "failed", cancelled: "cancelled", "budget-exhausted": "failed" };

  function marked(graph, status) {
    // Only ids of nodes the text declares: a class line naming an unknown id
    // would make Mermaid draw a new node.
    const declared = new Set();
    for (const line of graph.mermaid.split("\n")) {
      const m = /^\s+([A-Za-z0-9_]+)[[({>]/.exec(line);
      if (m) declared.add(m[1]);
    }
    const current = graph.current.filter((id) => declared.has(id));
    const done = graph.done.filter((id) => declared.has(id));
    if (declared.has("flow_start")) done.unshift("flow_start");
    if (status === "completed" && declared.has("flow_end")) done.push("flow_end");
    // From the outcomes; where a server gives none, from current and done.
    const given = graph.outcomes || {};
    const outcome = new Map();
    for (const id of done) outcome.set(id, "done");
    for (const id of current) outcome.set(id, "waiting");
    for (const [id, how] of Object.entries(given)) if (declared.has(id) && OUTCOMES[how]) outcome.set(id, how);
    if (declared.has("flow_end") && SETTLED_END[status]) outcome.set("flow_end", SETTLED_END[status]);
    for (const id of declared) {
      // A parallel's join node stands as its parallel step does.
      if (id.startsWith("j_") && !outcome.has(id) && outcome.has("s_" + id.slice(2))) {
        outcome.set(id, outcome.get("s_" + id.slice(2)));
      }
    }
    // ``current`` marks where the run is now, whatever it waits for there.
    const lines = [graph.mermaid.trimEnd(), "    classDef current stroke-width:3px;"];
    if (current.length) lines.push(`    class ${current.join(",")} current;`);
    for (const [how, style] of Object.entries(OUTCOMES)) {
      lines.push(`    classDef ${how} ${style};`);
      const ids = [...outcome].filter(([, h]) => h === how).map(([id]) => id);
      if (ids.length) lines.push(`    class ${ids.join(",")} ${how};`);
    }
    const outcomes = [...outcome].map(([id, how]) => `${id}:${how}`).sort().join(" ");
    return { text: lines.join("\n") + "\n", current, done, outcomes };
  }

  // Fitted to the box unless that would draw its text smaller than MIN_SCALE of
  // its size (Mermaid's 16px: 12px): then at MIN_SCALE, and the box scrolls.
  const MIN_SCALE = 0.75;
  function fit(box) {
    const svg = box.querySelector("svg");
    if (!svg || !svg.viewBox || !svg.viewBox.baseVal || !svg.viewBox.baseVal.width) return;
    const { width, height } = svg.viewBox.baseVal;
    svg.style.width = "";
    svg.style.maxWidth = "";
    svg.style.maxHeight = "";
    box.classList.remove("scrolls");
    if (box.classList.contains("full")) return;
    const shown = svg.getBoundingClientRect();
    const scale = Math.min(shown.width / width, shown.height / height);
    if (scale < MIN_SCALE) {
      svg.style.width = `${Math.round(width * MIN_SCALE)}px`;
      svg.style.maxWidth = "none";
      svg.style.maxHeight = "none";
      box.classList.add("scrolls");
    }
  }

  function zoom(box) {
    box.classList.toggle("full");
    box.setAttribute("aria-pressed", box.classList.contains("full") ? "true" : "false");
    fit(box);
  }
  // The diagram in ``box``: ``draw(graph, status)`` draws it again when what it shows changed.
  function attach(box) {
    let key = null;
    box.addEventListener("click", () => zoom(box));
    box.addEventListener("keydown", (event) => {
      if (event.target === box && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); zoom(box); }
    });
    window.addEventListener("resize", () => fit(box));
    async function draw(graph, status) {
      const { text, current, done, outcomes } = marked(graph, status);
      if (text === key) return;
      key = text;
      box.dataset.current = current.join(" ");
      box.dataset.done = done.join(" ");
      box.dataset.outcomes = outcomes;
      if (!window.mermaid) {
        box.replaceChildren(el("pre", {}, graph.mermaid));
        return;
      }
      try {
        drawn += 1;
        const { svg } = await window.mermaid.render(`fc-diagram-${drawn}`, text);
        box.innerHTML = svg; // Mermaid's own output, sanitized by it (securityLevel strict)
        fit(box);
      } catch (error) {
        box.replaceChildren(el("p", { class: "error" }, `The diagram could not be drawn: ${error.message || error}`), el("pre", {}, graph.mermaid));
      }
    }
    return { draw };
  }

  return { attach, marked, fit, OUTCOMES };
})();
