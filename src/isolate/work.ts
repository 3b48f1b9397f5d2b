/**
 * @module
 * Work a request leaves to run past its answer (refunds, hand-backs, a late
 * answer watched, a report sent), handed to one sink. A decision collects
 * its own in a {@link Work}, which it returns as one `pending` promise for
 * the caller's `waitUntil`; what happens once the answer is out (a place
 * released when the response ends, a charge the response's header says)
 * goes to the sink the caller gives the answer (see after-answer.ts). A
 * leaf: it imports nothing.
 */

/** Where work past the answer goes. */
export interface Sink {
  add(task: Promise<unknown>): void;
}

/**
 * A decision's work: each task counted while it runs, tasks it hands on
 * (added while it runs) included, so that {@link pending} settles once all
 * of them have.
 */
export class Work implements Sink {
  private open = 0;
  private done: { promise: Promise<void>; resolve: () => void; reject: (error: unknown) => void } | null = null;
  private failed: { error: unknown } | null = null;

  add(task: Promise<unknown>): void {
    this.open++;
    task.then(
      () => this.settled(),
      (error: unknown) => {
        this.failed ??= { error };
        this.settled();
      },
    );
  }

  /**
   * Everything handed over so far, and whatever it hands on while it runs,
   * as one promise (rejected with the first failure, as `waitUntil` reports
   * it); undefined when nothing is running.
   */
  pending(): Promise<void> | undefined {
    if (this.open === 0) return undefined;
    if (this.done === null) {
      let resolve!: () => void;
      let reject!: (error: unknown) => void;
      const promise = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      this.done = { promise, resolve, reject };
    }
    return this.done.promise;
  }

  private settled(): void {
    if (--this.open > 0 || this.done === null) return;
    const { resolve, reject } = this.done;
    this.done = null;
    const failed = this.failed;
    this.failed = null;
    if (failed === null) resolve();
    else reject(failed.error);
  }
}

/** A sink that runs each task loose: for work nobody waits for (a benchmark's, a test's). */
export const LOOSE: Sink = Object.freeze({ add: (task: Promise<unknown>) => void task.catch(() => {}) });
