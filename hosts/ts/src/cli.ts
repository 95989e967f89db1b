#!/usr/bin/env node
/**
 * The host's command: `flowcore-ts-host serve` runs a host over HTTP on a
 * store; `runs` and `show` read a store's files (no process needs to run).
 *
 *   flowcore-ts-host serve --store DIR --handlers FILE.js [--port N] [--listen ADDR] [--flowcore CMD]
 *   flowcore-ts-host runs --store DIR
 *   flowcore-ts-host show RUN --store DIR
 *
 * The handlers module exports `register(registry)`, which registers the
 * flows, tools, agents and teams (see the README). `serve` resumes every run
 * of the store before it listens, and prints `listening on http://ADDR:PORT`.
 * Bad arguments: a message and exit status 2.
 */

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { resolve } from "node:path";

import { HostError } from "./errors";
import { Host } from "./host";
import { createHandler } from "./http";
import { Registry } from "./registry";
import { FileStore } from "./store";

class Usage extends Error {}

const USAGE = `usage:
  flowcore-ts-host serve --store DIR --handlers FILE.js [--port N] [--listen ADDR] [--flowcore CMD]
  flowcore-ts-host runs --store DIR
  flowcore-ts-host show RUN --store DIR`;

function options(args: readonly string[], known: readonly string[]): { flags: Map<string, string>; rest: string[] } {
  const flags = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? "";
    if (arg.startsWith("--")) {
      const name = arg.slice(2);
      const value = args[i + 1];
      if (!known.includes(name)) {
        throw new Usage(`unknown option ${arg}`);
      }
      if (value === undefined) {
        throw new Usage(`${arg} needs a value`);
      }
      flags.set(name, value);
      i++;
    } else {
      rest.push(arg);
    }
  }
  return { flags, rest };
}

function required(flags: Map<string, string>, name: string): string {
  const value = flags.get(name);
  if (value === undefined) {
    throw new Usage(`--${name} is required`);
  }
  return value;
}

async function serve(args: readonly string[]): Promise<void> {
  const { flags } = options(args, ["store", "handlers", "port", "listen", "flowcore"]);
  const store = required(flags, "store");
  const port = Number(flags.get("port") ?? "8080");
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Usage(`--port must be an integer from 0 to 65535, not ${flags.get("port")}`);
  }
  const registry = new Registry();
  const file = resolve(required(flags, "handlers"));
  const module = require(file) as { register?: (registry: Registry) => void };
  if (typeof module.register !== "function") {
    throw new Usage(`${file} exports no register(registry) function`);
  }
  module.register(registry);
  const host = new Host({
    store,
    registry,
    decide: {
      command: flags.get("flowcore") ?? "flowcore",
      onRestart: (cause) => console.error(`flowcore decide restarted: ${cause.message}`),
    },
  });
  await host.open();
  const server = createServer(createHandler(host));
  const listen = flags.get("listen") ?? "127.0.0.1";
  await new Promise<void>((done) => server.listen(port, listen, done));
  const address = server.address() as AddressInfo;
  console.log(`listening on http://${listen}:${address.port}`);
  const stop = (): void => {
    server.close();
    void host.close().then(() => process.exit(0));
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

function runs(args: readonly string[]): void {
  const { flags } = options(args, ["store"]);
  const store = new FileStore(required(flags, "store"));
  for (const id of store.runIds()) {
    const meta = store.meta(id);
    const snapshot = store.snapshot(id);
    console.log(`${id}\t${meta.flowId}\t${snapshot?.status ?? "starting"}`);
  }
}

function show(args: readonly string[]): void {
  const { flags, rest } = options(args, ["store"]);
  const runId = rest[0];
  if (runId === undefined) {
    throw new Usage("show needs a run id");
  }
  const store = new FileStore(required(flags, "store"));
  if (!store.has(runId)) {
    throw new HostError(`no run ${JSON.stringify(runId)} in ${store.root}`);
  }
  const meta = store.meta(runId);
  const log = store.readLog(runId);
  console.log(`${runId}  flow ${meta.flowId}  ${store.snapshot(runId)?.status ?? "starting"}`);
  console.log(`log: ${store.logPath(runId)} (${log.records.length} records)`);
  for (const record of log.records) {
    const data = record.data as { kind?: string; idempotencyKey?: string };
    console.log(`  ${record.index} ${record.type} ${data.kind ?? ""} ${data.idempotencyKey ?? ""}`.trimEnd());
  }
}

async function main(argv: readonly string[]): Promise<void> {
  const [command, ...args] = argv;
  switch (command) {
    case "serve":
      return serve(args);
    case "runs":
      return runs(args);
    case "show":
      return show(args);
    default:
      throw new Usage(command === undefined ? "a command is needed" : `unknown command ${command}`);
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof Usage) {
    console.error(`${error.message}\n${USAGE}`);
    process.exit(2);
  }
  console.error(`error: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
