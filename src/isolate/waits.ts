/**
 * @module
 * What a request does while it waits at a gate, for a turn, a call or a
 * place: it sleeps on a promise and a timer of its own, and listens for
 * its client hanging up, once per gate. Shared by settling a key group
 * (settle.ts) and a place (settle-place.ts).
 */
import { type Effects, giveBack, keepGoing } from "./effects.ts";
import type { Gate, Visit } from "./gate.ts";

/**
 * A visit's client hanging up while it is at the gate: the gate gives back
 * what the visit held (a booking, a ticket), and the call it is making, if
 * any, goes on for the others (`calling`). Stopped when the visit ends.
 */
export class HangUpWatch {
  /** The call this request is making, while it makes one: it goes on if the client hangs up. */
  calling: Promise<unknown> | null = null;
  private readonly gate: Gate;
  private readonly visit: Visit;
  private readonly ctx: Effects;
  private readonly gone: AbortSignal | undefined;
  // An event listener returns nothing: the runtime warns of any value returned.
  private readonly hungUp = (): void => {
    const cancel = this.gate.hangUp(this.visit);
    if (this.calling !== null) keepGoing(this.calling, this.ctx);
    if (cancel !== null) giveBack(cancel, this.ctx);
  };

  constructor(gate: Gate, visit: Visit, ctx: Effects, gone: AbortSignal | undefined) {
    this.gate = gate;
    this.visit = visit;
    this.ctx = ctx;
    this.gone = gone;
    if (this.gone?.aborted) gate.hangUp(visit);
    else this.gone?.addEventListener("abort", this.hungUp);
  }

  stop(): void {
    this.gone?.removeEventListener("abort", this.hungUp);
  }
}

/**
 * Sleeps until the gate's landing wakes the request, or `ms` have passed:
 * on a promise and a timer of the request's own.
 */
export async function sleep(visit: Visit, ms: number): Promise<void> {
  let wake!: () => void;
  const woken = new Promise<void>((resolve) => {
    wake = resolve;
  });
  visit.wake = wake;
  const timer = setTimeout(wake, ms);
  try {
    await woken;
  } finally {
    clearTimeout(timer);
    visit.wake = noop;
  }
}

const noop = () => {};
