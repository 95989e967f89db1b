/**
 * The host over HTTP (plain `node:http`): start runs, read them, answer their
 * questions, send them signals, cancel them, read their logs.
 *
 *   POST /runs                      {flow, input?, runId?}          -> 201 {runId}
 *   GET  /runs                                                       -> 200 [RunView]
 *   GET  /runs/{id}[?wait=settled]                                   -> 200 RunView
 *   POST /runs/{id}/answers         {key, answer}                   -> 200 RunView
 *   POST /runs/{id}/signals/{name}  {payload?}                      -> 200 RunView
 *   POST /runs/{id}/cancel          {reason?}                       -> 200 RunView
 *   GET  /runs/{id}/log                                              -> 200 NDJSON (flowcore's log)
 *
 * Run ids are percent-encoded in paths (a child's id holds `/` and `#`).
 * Errors are `{error: {type, message}}`: 400 a body that is not what the
 * route takes, 404 an unknown run, flow or route, 409 a refusal by the run, 422 an
 * input or spec the interpreter refuses, 500 anything else.
 */

import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";

import { DecideRefused, HostError, RegistryError, RunRefused, UnknownRun } from "./errors";
import type { JsonValue } from "./flowEffect";
import type { Host } from "./host";

export interface HttpOptions {
  /** The largest request body read, in bytes (default 1 MiB). */
  readonly maxBodyBytes?: number;
}

class BadRequest extends HostError {
  override readonly name = "BadRequest";
}

type Body = { readonly [key: string]: JsonValue };

async function bodyOf(req: IncomingMessage, limit: number): Promise<Body> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      throw new BadRequest(`the body is over ${limit} bytes`);
    }
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") {
    return {};
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new BadRequest(`the body is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new BadRequest("the body must be a JSON object");
  }
  return value as Body;
}

function text(body: Body, field: string, required: boolean): string | undefined {
  const value = body[field];
  if (value === undefined && !required) {
    return undefined;
  }
  if (typeof value !== "string" || value === "") {
    throw new BadRequest(`${field} must be a non-empty string`);
  }
  return value;
}

function send(res: ServerResponse, status: number, value: unknown): void {
  const data = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

function failure(error: unknown): [number, { error: { type: string; message: string } }] {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof BadRequest) {
    return [400, { error: { type: "bad-request", message } }];
  }
  if (error instanceof UnknownRun) {
    return [404, { error: { type: "unknown-run", message } }];
  }
  if (error instanceof RegistryError) {
    return [404, { error: { type: "unknown-flow", message } }];
  }
  if (error instanceof RunRefused) {
    return [409, { error: { type: "refused", message } }];
  }
  if (error instanceof DecideRefused) {
    const status = error.type === "bad-input" || error.type === "bad-spec" ? 422 : 409;
    return [status, { error: { type: error.type, message } }];
  }
  if (error instanceof HostError) {
    return [409, { error: { type: "refused", message } }];
  }
  return [500, { error: { type: "internal", message } }];
}

/** A request listener for `http.createServer` serving `host`. */
export function createHandler(host: Host, options: HttpOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const limit = options.maxBodyBytes ?? 1024 * 1024;
  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://host");
    const parts = url.pathname.split("/").filter((p) => p !== "").map((p) => decodeURIComponent(p));
    const method = req.method ?? "GET";
    if (parts[0] !== "runs") {
      send(res, 404, { error: { type: "not-found", message: `no route ${method} ${url.pathname}` } });
      return;
    }
    const [, runId, action, name] = parts;
    if (runId === undefined) {
      if (method === "GET") {
        send(res, 200, host.runs());
        return;
      }
      if (method === "POST") {
        const body = await bodyOf(req, limit);
        const flow = text(body, "flow", true) ?? "";
        const given = text(body, "runId", false);
        const id = await host.start(flow, body["input"] ?? null, given !== undefined ? { runId: given } : {});
        send(res, 201, { runId: id });
        return;
      }
    } else if (action === undefined && method === "GET") {
      if (url.searchParams.get("wait") === "settled") {
        send(res, 200, await host.settled(runId));
        return;
      }
      send(res, 200, host.view(runId));
      return;
    } else if (action === "log" && method === "GET") {
      host.view(runId); // an unknown run is a 404
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.end(readFileSync(host.store.logPath(runId)));
      return;
    } else if (method === "POST" && (action === "answers" || action === "signals" || action === "cancel")) {
      const body = await bodyOf(req, limit);
      if (action === "answers") {
        if (!("answer" in body)) {
          throw new BadRequest("answer is missing");
        }
        await host.answer(runId, text(body, "key", true) ?? "", body["answer"] ?? null);
      } else if (action === "signals") {
        if (name === undefined) {
          throw new BadRequest("the signal's name is missing: POST /runs/{id}/signals/{name}");
        }
        await host.signal(runId, name, body["payload"] ?? null);
      } else {
        await host.cancel(runId, text(body, "reason", false));
      }
      send(res, 200, host.view(runId));
      return;
    }
    send(res, 404, { error: { type: "not-found", message: `no route ${method} ${url.pathname}` } });
  };
  return (req, res) => {
    route(req, res).catch((error: unknown) => {
      const [status, body] = failure(error);
      if (!res.headersSent) {
        send(res, status, body);
      } else {
        res.end();
      }
    });
  };
}
