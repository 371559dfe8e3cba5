// A read of the hub repeated on a timer, for the views that follow something live (a rollout, the
// shared bans, the storm breaker's pauses). The next read is scheduled when one ends, so a slow hub
// never has two at once; only the latest read schedules it, so a read asked for in between (after a
// button) does not start a second round; a read that finds it is no longer the latest leaves its
// answer unshown; nothing runs once stopped.

export interface Poller {
  /** Reads at once (cancelling the read scheduled) and goes on from there. */
  now(): Promise<void>;
  /** No more reads; an answer still on its way is not shown. */
  stop(): void;
}

/**
 * Polls with `read`, which gets `latest()` to ask, once its answer is in, whether it is still the
 * newest read (and so may show it). After each read the next is scheduled `everyMs` later while
 * `again()` says so.
 */
export function poll(read: (latest: () => boolean) => Promise<void>, everyMs: number, again: () => boolean = () => true): Poller {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let reads = 0;
  let stopped = false;

  async function run(): Promise<void> {
    clearTimeout(timer);
    if (stopped) return;
    const mine = ++reads;
    const latest = () => !stopped && mine === reads;
    await read(latest);
    if (latest() && again()) timer = setTimeout(run, everyMs);
  }

  return {
    now: run,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
