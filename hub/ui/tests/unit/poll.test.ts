import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { poll } from '../../src/lib/poll';

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

describe('poll', () => {
  it('reads again after each read while asked to, and not once stopped', async () => {
    let reads = 0;
    const poller = poll(async () => void reads++, 1000, () => reads < 3);
    await poller.now();
    expect(reads).toBe(1);
    await vi.advanceTimersByTimeAsync(1000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(reads).toBe(3);
    await vi.advanceTimersByTimeAsync(5000);
    expect(reads).toBe(3);

    let more = 0;
    const endless = poll(async () => void more++, 1000);
    await endless.now();
    endless.stop();
    await vi.advanceTimersByTimeAsync(5000);
    expect(more).toBe(1);
  });

  it('lets only the latest read show its answer and schedule the next', async () => {
    const shown: number[] = [];
    const answers: (() => void)[] = [];
    let started = 0;
    const poller = poll(async (latest) => {
      const n = ++started;
      await new Promise<void>((resolve) => answers.push(resolve));
      if (latest()) shown.push(n);
    }, 1000);
    const first = poller.now();
    const second = poller.now();
    answers[1]();
    answers[0]();
    await Promise.all([first, second]);
    expect(shown).toEqual([2]);
    // One round goes on, not two.
    await vi.advanceTimersByTimeAsync(1000);
    expect(started).toBe(3);
    poller.stop();
  });
});
