/**
 * @module
 * The one shape every parse and validation returns: the value, or every
 * problem found, each a message for a person. Several problems at once, so
 * a configuration is fixed in one pass rather than one error per deploy.
 */

/** A parse that succeeded. */
export type Ok<T> = { ok: true; value: T };

/** A parse that failed, with why: one message per problem, each naming what it is about. */
export type Failure = { ok: false; errors: string[] };

/** The value parsed, or the problems that kept it from being one. */
export type Result<T> = Ok<T> | Failure;

/** A success holding `value`. */
export const ok = <T>(value: T): Ok<T> => ({ ok: true, value });

/** A failure with these messages. */
export const fail = (...errors: string[]): Failure => ({ ok: false, errors });

/** What each result in a record holds when it succeeds. */
type Values<R> = { [K in keyof R]: R[K] extends Result<infer T> ? T : never };

/**
 * Every result of a record, combined: the record of their values when all
 * succeeded, else the errors of every one that failed, in the record's order.
 */
export function all<R extends Record<string, Result<unknown>>>(results: R): Result<Values<R>> {
  const errors = Object.values(results).flatMap((result) => (result.ok ? [] : result.errors));
  if (errors.length > 0) return fail(...errors);
  const values = Object.entries(results).map(([name, result]) => [name, (result as Ok<unknown>).value]);
  return ok(Object.fromEntries(values) as Values<R>);
}

/** Every item parsed, in order; or the errors of every item that failed, in order. */
export function mapAll<T, U>(items: readonly T[], parse: (item: T) => Result<U>): Result<U[]> {
  const values: U[] = [];
  const errors: string[] = [];
  for (const item of items) {
    const result = parse(item);
    if (result.ok) values.push(result.value);
    else errors.push(...result.errors);
  }
  return errors.length > 0 ? fail(...errors) : ok(values);
}
