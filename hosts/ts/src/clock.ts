/**
 * Time for the host: a clock it reads and timers it arms, always as an
 * argument, so a test drives time by hand and a service uses the real one.
 */

export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
  /** Call `fire` once the clock reaches `atMs`; returns a function that disarms it. */
  at(atMs: number, fire: () => void): () => void;
}

/** The real clock: `Date.now()` and `setTimeout`, re-armed for deadlines past the timer limit. */
export const realClock: Clock = {
  now: () => Date.now(),
  at(atMs: number, fire: () => void): () => void {
    let handle: NodeJS.Timeout | undefined;
    const arm = (): void => {
      const wait = atMs - Date.now();
      if (wait <= 0) {
        handle = setTimeout(fire, 0);
        return;
      }
      // setTimeout holds at most 2^31-1 ms; a longer sleep re-arms on the way.
      handle = setTimeout(wait > 2_147_483_647 ? arm : fire, Math.min(wait, 2_147_483_647));
    };
    arm();
    return () => clearTimeout(handle);
  },
};

/**
 * A clock moved by hand: `set(ms)` moves it forward and fires every timer due,
 * earliest deadline first (in arming order for equal deadlines).
 */
export class ManualClock implements Clock {
  private timers: { atMs: number; seq: number; fire: () => void }[] = [];
  private seq = 0;
  constructor(private ms: number = 0) {}

  now(): number {
    return this.ms;
  }

  at(atMs: number, fire: () => void): () => void {
    const timer = { atMs, seq: this.seq++, fire };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((t) => t !== timer);
    };
  }

  /** The earliest deadline armed, if any. */
  next(): number | undefined {
    return this.timers.reduce<number | undefined>((m, t) => (m === undefined || t.atMs < m ? t.atMs : m), undefined);
  }

  /** Move to `ms` (never back) and fire what is due. */
  set(ms: number): void {
    this.ms = Math.max(this.ms, ms);
    const due = this.timers.filter((t) => t.atMs <= this.ms).sort((a, b) => a.atMs - b.atMs || a.seq - b.seq);
    this.timers = this.timers.filter((t) => t.atMs > this.ms);
    for (const t of due) {
      t.fire();
    }
  }
}
