// What the console's action modules share (actions.js, scheduled.js,
// schedules.js): who the principal is (GET /api/whoami, read once), a
// confirmation in a real <dialog> for whatever destroys or re-runs something,
// and a refusal shown in the page as the API typed it ("code: detail").
"use strict";

const flowcoreConsole = (() => {
  const { api, el, Problem } = flowcore;
  const RANK = { read: 0, write: 1, admin: 2 };
  let whoami = null;

  // The principal's access: "read", "write" or "admin".
  function access() {
    if (whoami === null) whoami = api("GET", "/api/whoami");
    return whoami;
  }

  function allows(who, needed) {
    return (RANK[who.access] ?? -1) >= RANK[needed];
  }

  // A refusal by the page itself, before anything is sent (input that is not JSON).
  class Invalid extends Error {}
  const invalid = (message) => new Invalid(message);

  // The problem's type (its last path segment, e.g. "not-pending") and detail.
  function problemText(error) {
    if (error instanceof Problem) {
      const type = typeof error.body.type === "string" ? error.body.type.split("/").pop() : "";
      let text = `${type || "error"} (${error.status}): ${error.message}`;
      if (Array.isArray(error.body.options)) text += ` (options: ${error.body.options.join(", ")})`;
      if (typeof error.body.index === "number") text += ` (first difference at record #${error.body.index})`;
      return text;
    }
    if (error instanceof Invalid) return `invalid-input: ${error.message}`;
    return `request-failed: ${error && error.message ? error.message : error}`;
  }

  // Shows (or with no error, clears) a refusal in an alert box of the page.
  function show(box, error) {
    if (!box) return;
    box.textContent = error ? problemText(error) : "";
    box.hidden = !error;
  }

  // Resolves true once the person confirms in a modal <dialog>; false when they
  // go back (the button, Escape or closing it). `consequence` says what happens.
  function confirm(title, consequence, verb) {
    const old = document.getElementById("confirm-dialog");
    if (old) old.remove();
    const back = el("button", { type: "submit", value: "back", autofocus: true }, "Go back");
    const go = el("button", { type: "submit", value: "confirm", class: "danger", id: "confirm-go" }, verb);
    const dialog = el(
      "dialog",
      { id: "confirm-dialog", class: "confirm", "aria-labelledby": "confirm-title", "aria-describedby": "confirm-text" },
      el("h2", { id: "confirm-title" }, title),
      el("p", { id: "confirm-text" }, consequence),
      el("form", { method: "dialog", class: "buttons" }, back, go),
    );
    document.body.append(dialog);
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        const yes = dialog.returnValue === "confirm";
        dialog.remove();
        resolve(yes);
      });
      dialog.showModal();
    });
  }

  // Runs `act` after confirming (when `ask` is [title, consequence, verb]),
  // showing a refusal in `box`: {ok, value}, ok false when dismissed or refused.
  async function perform(box, ask, act) {
    if (ask && !(await confirm(...ask))) return { ok: false };
    try {
      const value = await act();
      show(box, null);
      return { ok: true, value };
    } catch (error) {
      show(box, error);
      return { ok: false, error };
    }
  }

  return { access, allows, invalid, problemText, show, confirm, perform };
})();
