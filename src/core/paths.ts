/**
 * @module
 * Path globs for rules, and the normalised path they are matched against.
 */

/** A compiled path glob: `*` matches any run of characters, `/` included. */
export type PathGlob = { source: string; test: (path: string) => boolean };

const regexSpecials = /[.+?^${}()|[\]\\]/g;

/** Compiles a glob such as `/api/*`; the glob must start with `/`. */
export function compileGlob(source: string): PathGlob {
  const body = source
    .split("*")
    .map((part) => part.replace(regexSpecials, "\\$&"))
    .join(".*");
  const regex = new RegExp(`^${body}$`, "s");
  return { source, test: (path) => regex.test(path) };
}

const unreserved = /%(2[dDeE]|3[0-9]|[46][1-9a-fA-F]|[57][0-9aA]|5[fF]|7[eE])/g;

/**
 * The path of a serialised absolute URL such as `request.url`, as
 * `new URL(url).pathname` gives it, without parsing the rest.
 */
export function pathnameOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  let end = url.length;
  for (const stop of ["?", "#"]) {
    const at = url.indexOf(stop, start);
    if (at >= 0 && at < end) end = at;
  }
  return url.slice(start, end);
}

/**
 * The path a rule is matched against. Percent-encoded unreserved characters
 * are decoded (`/%61pi` is `/api`, RFC 3986 §6.2.2.2) and runs of slashes are
 * collapsed, so that spelling a path differently is not a way around a rule.
 * The request itself is forwarded unchanged.
 */
export function normalizePath(pathname: string): string {
  return pathname
    .replace(unreserved, (encoded) => String.fromCharCode(Number.parseInt(encoded.slice(1), 16)))
    .replace(/\/{2,}/g, "/");
}
