/**
 * A worked example: an expense service on the flowcore TypeScript host.
 *
 * It registers the `expense` flow and its two tools, resumes whatever runs
 * its store holds (a killed service picks up where it was), and serves the
 * host's HTTP API beside a small page: start a claim, answer its question,
 * see its result.
 *
 *   PORT (8080), STORE (./data), FLOWCORE (the `flowcore` command)
 */

import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { join } from "node:path";

import { Host, Registry, createHandler, type RunView } from "flowcore-ts-host";

const registry = new Registry()
  .flow("expense", readFileSync(join(__dirname, "..", "expense.yaml"), "utf8"))
  // expense.yaml declares it readonly: safe to run again after a crash, with the same idempotency key.
  .tool("policy.limit", (input) => ({ employee: (input as { employee: string }).employee, limit: 500 }))
  // expense.yaml declares it idempotent: the payment provider dedupes by the key, so a retry never pays twice.
  .tool("payments.pay", (input, context) => ({
    paid: (input as { amount: number }).amount,
    reference: context.idempotencyKey,
  }));

const host = new Host({
  store: process.env["STORE"] ?? "data",
  registry,
  decide: { command: process.env["FLOWCORE"] ?? "flowcore" },
});

const escape = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(runs: readonly RunView[]): string {
  const rows = runs.map((run) => {
    const questions = run.questions
      .map(
        (q) =>
          `<form method="post" action="/ui/answer">${escape(q.question)}
           <input type="hidden" name="run" value="${escape(run.runId)}">
           <input type="hidden" name="key" value="${escape(q.key)}">
           ${(q.options ?? []).map((o) => `<button name="answer" value="${escape(o)}">${escape(o)}</button>`).join(" ")}
           </form>`,
      )
      .join("");
    const result = run.output !== undefined ? `<code>${escape(JSON.stringify(run.output))}</code>` : "";
    return `<tr><td>${escape(run.runId)}</td><td>${run.status}</td><td>${questions}${result}</td></tr>`;
  });
  return `<!doctype html><title>Expenses</title><h1>Expenses</h1>
<form method="post" action="/ui/start">Employee <input name="employee" value="ada">
Amount <input name="amount" value="120"> <button>Claim</button></form>
<table><tr><th>run</th><th>status</th><th>question or result</th></tr>${rows.join("")}</table>`;
}

async function form(req: IncomingMessage): Promise<URLSearchParams> {
  let body = "";
  for await (const chunk of req as AsyncIterable<Buffer>) {
    body += chunk.toString("utf8");
  }
  return new URLSearchParams(body);
}

async function ui(req: IncomingMessage, res: ServerResponse): Promise<boolean> {
  if (req.method === "GET" && req.url === "/") {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(page(host.runs()));
    return true;
  }
  if (req.method === "POST" && req.url === "/ui/start") {
    const fields = await form(req);
    await host.start("expense", { employee: fields.get("employee") ?? "", amount: Number(fields.get("amount")) });
  } else if (req.method === "POST" && req.url === "/ui/answer") {
    const fields = await form(req);
    await host.answer(fields.get("run") ?? "", fields.get("key") ?? "", fields.get("answer") ?? "");
  } else {
    return false;
  }
  res.writeHead(303, { location: "/" });
  res.end();
  return true;
}

async function main(): Promise<void> {
  await host.open();
  const api = createHandler(host);
  const server = createServer((req, res) => {
    ui(req, res)
      .then((served) => {
        if (!served) {
          api(req, res);
        }
      })
      .catch((error: unknown) => {
        res.writeHead(400, { "content-type": "text/plain" });
        res.end(error instanceof Error ? error.message : String(error));
      });
  });
  const port = Number(process.env["PORT"] ?? "8080");
  server.listen(port, "127.0.0.1", () => {
    const address = server.address();
    const bound = typeof address === "object" && address !== null ? address.port : port;
    console.log(`expense service on http://127.0.0.1:${bound}`);
  });
  process.on("SIGTERM", () => {
    server.close();
    void host.close().then(() => process.exit(0));
  });
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : String(error));
  process.exit(1);
});
