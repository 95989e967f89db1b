// Shared helpers of the web view's pages: calling the JSON API with the
// page's cookie, building elements (always as text, never as HTML), and
// formatting times and durations.
"use strict";

const flowcore = (() => {
  class Problem extends Error {
    constructor(status, body) {
      const detail = body && typeof body.detail === "string" ? body.detail : `HTTP ${status}`;
      super(detail);
      this.status = status;
      this.body = body || {};
    }
  }

  async function api(method, path, body) {
    const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = { detail: text.slice(0, 300) }; }
    }
    if (!response.ok) {
      if (response.status === 401) { window.location.reload(); }
      throw new Problem(response.status, data);
    }
    return data;
  }

  // el("td", {class: "x", href: "/"}, "text", child, ...): text is never parsed as HTML.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Times for people: ISO-8601 with the date, in the viewer's time zone (with its
  // offset), to the millisecond; `when` is that text in a <time> element with the
  // UTC instant on hover. `at`: epoch milliseconds or an RFC 3339 text.
  function instant(at) {
    if (at === null || at === undefined || at === "") return null;
    const d = typeof at === "number" ? new Date(at) : new Date(String(at));
    return isNaN(d.getTime()) ? null : d;
  }

  function isoTime(at) {
    const d = instant(at);
    if (!d) return "";
    const pad = (n, width = 2) => String(Math.abs(n)).padStart(width, "0");
    const offset = -d.getTimezoneOffset();
    const zone = offset === 0 ? "Z"
      : `${offset < 0 ? "-" : "+"}${pad(Math.trunc(offset / 60))}:${pad(offset % 60)}`;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`
      + `T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
      + `.${pad(d.getMilliseconds(), 3)}${zone}`;
  }

  function utcTime(at) {
    const d = instant(at);
    return d ? d.toISOString() : "";
  }

  function when(at) {
    const utc = utcTime(at);
    if (!utc) return el("time", {}, "");
    return el("time", { datetime: utc, title: `${utc} (UTC)` }, isoTime(at));
  }

  // The names the pages used before `isoTime`: the same text.
  const localTime = isoTime;
  const clockTime = isoTime;

  function duration(ms) {
    if (typeof ms !== "number" || !isFinite(ms)) return "";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${m % 60} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  function notice(text) {
    const box = document.getElementById("notice");
    if (!box) return;
    box.textContent = text || "";
    box.hidden = !text;
  }

  function refused(error) {
    if (error instanceof Problem) {
      let text = error.message;
      if (Array.isArray(error.body.options)) text += ` (options: ${error.body.options.join(", ")})`;
      notice(text);
    } else {
      notice(`The request failed: ${error && error.message ? error.message : error}`);
    }
  }

  function statusBadge(node, status) {
    node.textContent = status;
    node.dataset.status = status;
    node.className = "status";
  }

  return { api, el, isoTime, utcTime, when, localTime, clockTime, duration, notice, refused, statusBadge, Problem };
})();
