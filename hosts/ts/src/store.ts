/**
 * The durable store: one directory per run, plain files, fsync'd.
 *
 *   run.json        what the run was started with (spec, input, budget, parent);
 *                   written once, before anything else of the run
 *   log.ndjson      the run's log in flowcore's format (specs/log.md), append-only:
 *                   a decision's records in one write, then fsync
 *   snapshot.json   the state string after the last decision and the index the
 *                   next record takes; replaced atomically (write, fsync, rename)
 *   dispatch.ndjson one line per attempt at a piece of work, fsync'd before its
 *                   handler runs: what recovery reads to tell lost attempts
 *
 * The log is written before the snapshot, so after a crash the snapshot is
 * never ahead of the log; records past the snapshot's index (a decision whose
 * snapshot was not written, perhaps torn) are cut off and the decision taken
 * again from its event (decisions are deterministic). Nothing here needs a
 * native module: `node:fs` with fsync is the whole of it.
 */

import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  renameSync,
  writeSync,
  ftruncateSync,
} from "node:fs";
import { join } from "node:path";

import { StoreError } from "./errors";
import type { BudgetCaps, ExecutionClass, JsonValue, LogRecord, RunStatus, Usage } from "./flowEffect";

/** What a run was started with. */
export interface RunMeta {
  readonly runId: string;
  readonly flowId: string;
  readonly spec: string;
  readonly input: JsonValue;
  readonly nowMs: number;
  readonly budget: BudgetCaps | null;
  readonly depth: number;
  readonly metadata: { readonly [field: string]: string | number | boolean } | null;
  /** A child run: its parent and the run-subflow key it answers. */
  readonly parent: { readonly runId: string; readonly key: string; readonly detached: boolean } | null;
  /**
   * The execution class of each tool the flow declares, from decide's `start`
   * reply (`toolClasses`); a tool not in it is `uncertain`.
   */
  readonly toolClasses?: { readonly [tool: string]: ExecutionClass };
}

/** The run after its last decision. */
export interface Snapshot {
  readonly state: string;
  readonly status: RunStatus;
  /** The index the next log record takes. */
  readonly nextIndex: number;
  /** Once the run has settled: what it used (what a parent's subflow-settled reports). */
  readonly usage?: Usage;
}

/** One attempt at a piece of work: its key and the index of the effect.emitted it answers. */
export interface Dispatch {
  readonly key: string;
  readonly emitted: number;
  readonly at: number;
}

/** A run's log as read back: its complete records, where each begins, and a torn tail. */
export interface ReadLog {
  readonly records: readonly LogRecord[];
  readonly offsets: readonly number[];
  /** The byte offset of an unterminated last line, or null. */
  readonly tornOffset: number | null;
  readonly size: number;
}

function fsyncDir(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function appendDurably(path: string, text: string): void {
  const fd = openSync(path, "a");
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function writeAtomically(path: string, text: string): void {
  const temp = `${path}.tmp`;
  const fd = openSync(temp, "w");
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temp, path);
}

export class FileStore {
  readonly root: string;

  constructor(root: string) {
    this.root = root;
    mkdirSync(join(root, "runs"), { recursive: true });
  }

  /** The directory of a run (its id, percent-encoded: ids hold `/` and `#`). */
  dirOf(runId: string): string {
    return join(this.root, "runs", encodeURIComponent(runId));
  }

  /** The path of a run's log: what `flowcore replay` reads. */
  logPath(runId: string): string {
    return join(this.dirOf(runId), "log.ndjson");
  }

  has(runId: string): boolean {
    return existsSync(join(this.dirOf(runId), "run.json"));
  }

  /** Every run id in the store. */
  runIds(): string[] {
    return readdirSync(join(this.root, "runs"))
      .map((name) => decodeURIComponent(name))
      .filter((id) => this.has(id))
      .sort();
  }

  create(meta: RunMeta): void {
    const dir = this.dirOf(meta.runId);
    mkdirSync(dir, { recursive: true });
    writeAtomically(join(dir, "run.json"), JSON.stringify(meta));
    fsyncDir(dir);
    fsyncDir(join(this.root, "runs"));
  }

  meta(runId: string): RunMeta {
    const path = join(this.dirOf(runId), "run.json");
    try {
      return JSON.parse(readFileSync(path, "utf8")) as RunMeta;
    } catch (error) {
      throw new StoreError(path, `cannot read the run's start: ${(error as Error).message}`);
    }
  }

  snapshot(runId: string): Snapshot | null {
    const path = join(this.dirOf(runId), "snapshot.json");
    if (!existsSync(path)) {
      return null;
    }
    try {
      return JSON.parse(readFileSync(path, "utf8")) as Snapshot;
    } catch (error) {
      throw new StoreError(path, `the snapshot does not read: ${(error as Error).message}`);
    }
  }

  writeSnapshot(runId: string, snapshot: Snapshot): void {
    writeAtomically(join(this.dirOf(runId), "snapshot.json"), JSON.stringify(snapshot));
  }

  /** Append one decision's records in one write, then fsync. */
  append(runId: string, records: readonly LogRecord[]): void {
    if (records.length > 0) {
      appendDurably(this.logPath(runId), records.map((r) => JSON.stringify(r) + "\n").join(""));
    }
  }

  readLog(runId: string): ReadLog {
    const path = this.logPath(runId);
    const data = existsSync(path) ? readFileSync(path) : Buffer.alloc(0);
    const records: LogRecord[] = [];
    const offsets: number[] = [];
    let at = 0;
    while (at < data.length) {
      const end = data.indexOf(0x0a, at);
      if (end < 0) {
        return { records, offsets, tornOffset: at, size: data.length };
      }
      const line = data.subarray(at, end).toString("utf8");
      try {
        records.push(JSON.parse(line) as LogRecord);
      } catch {
        throw new StoreError(path, `line ${records.length + 1} (byte ${at}) is not JSON, and it is not the last one`);
      }
      if (records[records.length - 1]?.index !== records.length - 1) {
        throw new StoreError(path, `record ${records.length - 1} has index ${records[records.length - 1]?.index}`);
      }
      offsets.push(at);
      at = end + 1;
    }
    return { records, offsets, tornOffset: null, size: data.length };
  }

  /** Cut the log at `offset` bytes (a torn tail, or a decision its snapshot never recorded). */
  truncateLog(runId: string, offset: number): void {
    const path = this.logPath(runId);
    if (!existsSync(path)) {
      return;
    }
    const fd = openSync(path, "r+");
    try {
      ftruncateSync(fd, offset);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  /** Record that an attempt at `key` starts now: durable before its handler runs. */
  dispatched(runId: string, dispatch: Dispatch): void {
    appendDurably(join(this.dirOf(runId), "dispatch.ndjson"), JSON.stringify(dispatch) + "\n");
  }

  dispatches(runId: string): Dispatch[] {
    const path = join(this.dirOf(runId), "dispatch.ndjson");
    if (!existsSync(path)) {
      return [];
    }
    const out: Dispatch[] = [];
    for (const line of readFileSync(path, "utf8").split("\n")) {
      try {
        out.push(JSON.parse(line) as Dispatch);
      } catch {
        // an empty line, or the torn last one of a crash: that attempt never began
      }
    }
    return out;
  }
}
