/**
 * Induced Durable Object failures. `hangObject` makes a real object busy, so
 * calls to it really time out; `flakyNamespace` wraps the real namespace so
 * that its stubs fail the way the runtime's do (thrown, retryable, overloaded,
 * hanging), and records every attempt and the stub it went through.
 */
import { runInDurableObject } from "cloudflare:test";
import type { LimiterNamespace } from "../../src/object/client.ts";
import type { CheckOptions, Refund, WindowCheck as RuleCheck } from "../../src/object/protocol.ts";
import { env } from "./env.ts";
import { objectForIp } from "./objects.ts";

export { objectForIp };

/**
 * Keeps the real object of this client busy for `ms`: every call to it waits.
 * Resolves once the object is busy; `over` resolves when it is free again
 * (or when the object is aborted meanwhile).
 */
export async function hangObject(ip: string, ms: number): Promise<{ over: Promise<void> }> {
  const stub = await objectForIp(ip);
  let busy!: () => void;
  const started = new Promise<void>((resolve) => {
    busy = resolve;
  });
  const over = runInDurableObject(stub, async (_instance, state) => {
    await state.blockConcurrencyWhile(async () => {
      busy();
      await new Promise((resolve) => setTimeout(resolve, ms));
    });
  }).catch(() => {});
  await started;
  return { over };
}

/**
 * How one call fails, as the runtime reports it:
 * - `throw`: an exception with no flags (a bug, a bad argument, a reset object);
 * - `retryable`: `retryable: true`, such as a dropped connection to the object;
 * - `overloaded`: `overloaded: true` and `retryable: true`, as the runtime marks a
 *   full queue; a caller must not retry it, though it looks retryable;
 * - `hang`: the call never settles.
 */
export type Failure = "throw" | "retryable" | "overloaded" | "hang";

/** What a flaky namespace saw: one entry per attempt, in order. */
export type Calls = {
  attempts: number;
  /** For each attempt, the serial number of the stub it went through (1, 2, …). */
  stubs: number[];
  /** For each attempt, how it ended: a failure kind, or "real" when the real object answered. */
  outcomes: (Failure | "real")[];
};

/**
 * A namespace whose calls fail by plan, then reach the real object. `plan` is
 * one kind for the first `failures` attempts (every attempt by default), or a
 * list of kinds, one per attempt, the rest reaching the real object.
 */
export function flakyNamespace(plan: Failure | Failure[], failures = Number.POSITIVE_INFINITY) {
  const kindOf = (attempt: number): Failure | "real" =>
    Array.isArray(plan) ? (plan[attempt - 1] ?? "real") : attempt <= failures ? plan : "real";
  const calls: Calls = { attempts: 0, stubs: [], outcomes: [] };
  let stubs = 0;
  const ns: LimiterNamespace = {
    idFromName: (name) => env.RATE_LIMITER.idFromName(name),
    get: (id) => {
      const real = env.RATE_LIMITER.get(id);
      const serial = ++stubs;
      return {
        check: async (rules: RuleCheck[], options?: CheckOptions) => {
          const attempt = ++calls.attempts;
          const kind = kindOf(attempt);
          calls.stubs.push(serial);
          calls.outcomes.push(kind);
          if (kind === "real") return real.check(rules, options);
          if (kind === "hang") return new Promise(() => {});
          throw Object.assign(new Error(`induced ${kind} failure`), {
            retryable: kind === "retryable" || kind === "overloaded",
            overloaded: kind === "overloaded",
          });
        },
        peek: (rules: RuleCheck[]) => real.peek(rules),
        refund: (refunds: Parameters<typeof real.refund>[0]) => real.refund(refunds),
      } as unknown as ReturnType<LimiterNamespace["get"]>;
    },
  };
  return { ns, calls };
}

/**
 * How one scripted call goes: it admits, refuses (for a minute) or throws
 * after `afterMs`, or never answers. An admission grants a lease of
 * `leaseUnits` when the call asks for one.
 */
export type Script = { afterMs: number; ends: "admit" | "refuse" | "throw"; leaseUnits?: number } | { ends: "hang" };

/**
 * A namespace with no objects behind it: call n goes as `script[n - 1]` says,
 * on the (possibly faked) timers, so a test can place every answer in time.
 */
export function scriptedNamespace(script: Script[]) {
  const calls = {
    checks: 0,
    options: [] as (CheckOptions | undefined)[],
    /** What each refund and charge sent, in order. */
    refunds: [] as Refund[][],
    charges: [] as Refund[][],
  };
  const refuse = (nowMs: number, rules: RuleCheck[]) => ({
    nowMs,
    allowed: false,
    verdicts: rules.map((rule) => ({
      allowed: false,
      ruleAllows: false,
      weighted: rule.limit,
      remaining: 0,
      retryAfterMs: 60_000,
      resetMs: 60_000,
      counted: null,
      holdsForMs: 60_000,
    })),
  });
  const admit = (nowMs: number, rules: RuleCheck[], leaseUnits: number) => {
    const receipt = (rule: RuleCheck) => ({
      row: `${rule.id}|${rule.periodMs}|${rule.precision}`,
      epoch: 1,
      bucket: 0,
    });
    return {
      nowMs,
      allowed: true,
      verdicts: rules.map((rule) => ({
        allowed: true,
        ruleAllows: true,
        weighted: 0,
        remaining: rule.limit - 1,
        retryAfterMs: 0,
        resetMs: rule.periodMs,
        counted: receipt(rule),
        holdsForMs: 0,
      })),
      ...(leaseUnits > 0 ? { lease: { units: leaseUnits, receipts: rules.map(receipt), expiresInMs: 60_000 } } : {}),
    };
  };
  // A batch is admitted or refused whole, as the script says.
  const batched = <T extends object>(result: T, options: CheckOptions | undefined, admits: boolean) =>
    (options?.batch ?? 1) > 1 ? { ...result, admitted: admits ? options!.batch! : 0 } : result;
  const ns: LimiterNamespace = {
    idFromName: (name) => env.RATE_LIMITER.idFromName(name),
    get: () =>
      ({
        check: (rules: RuleCheck[], options?: CheckOptions) => {
          const step = script[calls.checks++] ?? { afterMs: 0, ends: "admit" };
          calls.options.push(options);
          if (step.ends === "hang") return new Promise(() => {});
          const leaseUnits = options?.lease ? (step.leaseUnits ?? 0) : 0;
          return new Promise((resolve, reject) =>
            setTimeout(
              () =>
                step.ends === "admit"
                  ? resolve(batched(admit(Date.now(), rules, leaseUnits), options, true))
                  : step.ends === "refuse"
                    ? resolve(batched(refuse(Date.now(), rules), options, false))
                    : reject(new Error("scripted failure")),
              step.afterMs,
            ),
          );
        },
        refund: async (refunds: Refund[]) => {
          calls.refunds.push(refunds);
        },
        charge: async (charges: Refund[]) => {
          calls.charges.push(charges);
        },
      }) as unknown as ReturnType<LimiterNamespace["get"]>,
  };
  return { ns, calls };
}

/**
 * A namespace whose calls reach the real object late: by `ms`, or by `ms(n)` for the n-th call (1, 2, …): an
 * object slower than the decision's timeout.
 */
export function slowNamespace(ms: number | ((call: number) => number)) {
  let calls = 0;
  const ns: LimiterNamespace = {
    idFromName: (name) => env.RATE_LIMITER.idFromName(name),
    get: (id) => {
      const real = env.RATE_LIMITER.get(id);
      return {
        check: async (rules: RuleCheck[], options?: CheckOptions) => {
          const delayMs = typeof ms === "number" ? ms : ms(++calls);
          await new Promise((resolve) => setTimeout(resolve, delayMs));
          return real.check(rules, options);
        },
        peek: (rules: RuleCheck[]) => real.peek(rules),
        refund: (refunds: Parameters<typeof real.refund>[0]) => real.refund(refunds),
      } as unknown as ReturnType<LimiterNamespace["get"]>;
    },
  };
  return { ns };
}
