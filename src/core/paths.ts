/**
 * @module
 * Path globs for rules, and the paths they are matched against: the path as
 * written (normalised) and the matching path, which every spelling of a path
 * that an origin routes to the same handler shares. All of it runs in time
 * linear in the path's length.
 */

/** A compiled path glob: `*` matches any run of characters, `/` included. */
export type PathGlob = { source: string; test: (path: string) => boolean };

/**
 * Compiles a glob such as `/api/*`; the glob must start with `/`. The glob
 * is split on `*` into literal parts: the first must begin the path, the
 * last must end it (not overlapping the first), and each part between is
 * searched for once, leftmost, after the one before. Taking the leftmost
 * occurrence leaves the most room for the parts after it, so a glob of only
 * `*`s never needs to go back: the time is linear in the path's length, where
 * a backtracking regular expression takes seconds on a few KB of `/a/a/a…`.
 */
export function compileGlob(source: string): PathGlob {
  const parts = source.split("*");
  if (parts.length === 1) return { source, test: (path) => path === source };
  const first = parts[0]!;
  const last = parts.at(-1)!;
  const middle = parts.slice(1, -1).filter((part) => part !== "");
  const fixed = first.length + last.length;
  return {
    source,
    test: (path) => {
      if (path.length < fixed || !path.startsWith(first) || !path.endsWith(last)) return false;
      const end = path.length - last.length;
      let at = first.length;
      for (const part of middle) {
        const found = path.indexOf(part, at);
        if (found < 0 || found + part.length > end) return false;
        at = found + part.length;
      }
      return true;
    },
  };
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
 * A `.` or `..` segment (or its `%2e` spellings), or a backslash: what the
 * URL standard resolves in an `http:` URL's path, as the Worker's forwarding
 * does, so that the origin receives another path than the one written.
 */
const resolvable = /(?:^|[/\\])(?:\.|%2e)|\\/i;

/**
 * The path the origin receives for a path as a client sent it: `.` and `..`
 * segments (and their `%2e` spellings) resolved and a backslash read as a
 * slash, as the URL standard parses an `http:` URL, which the Worker's
 * forwarding does. A path with none of them is returned as it is.
 */
export function forwardedPath(pathname: string): string {
  if (!resolvable.test(pathname)) return pathname;
  // Parsed after a host of its own, so that a path that starts with two slashes is never read as one.
  return new URL(`http://h${pathname.startsWith("/") || pathname.startsWith("\\") ? "" : "/"}${pathname}`).pathname;
}

/**
 * The path as written, as rules see it: the path the origin receives
 * ({@link forwardedPath}: dot segments resolved, a backslash a slash), its
 * percent-encoded unreserved characters decoded (`/%61pi` is `/api`, RFC
 * 3986 §6.2.2.2) and runs of slashes collapsed, so that spelling a path
 * differently is not a way around a rule. `exclude` globs match this path.
 * The request itself is forwarded as it was sent, which its runtime resolves
 * as above.
 */
export function normalizePath(pathname: string): string {
  // Most paths have none of these: they are their own normal form, and no expression need run over them.
  if (!pathname.includes("%") && !pathname.includes("/.") && !pathname.includes("\\") && !pathname.includes("//")) {
    return pathname;
  }
  return forwardedPath(pathname)
    .replace(unreserved, (encoded) => String.fromCharCode(Number.parseInt(encoded.slice(1), 16)))
    .replace(/\/{2,}/g, "/");
}

const anyEscape = /%([0-9A-Fa-f]{2})/g;

/** How many times an escape is decoded: a proxy and an origin may each decode once more (`%255f` → `%5f` → `_`). */
const DECODINGS = 3;

/**
 * The path as the most lenient server in front of or behind the Worker
 * could read it: every escape decoded (`%2F` and `%5C` too), and again for
 * a path encoded twice; `\` read as `/`; `;parameters` dropped from every
 * segment; `.` and `..` segments resolved; lower-cased. A path reserved to
 * the Worker (the admin API's prefix, the client-limits endpoint) is
 * compared with this reading, so that no spelling of it reaches the origin.
 * Never used to match rules: it reads more paths as one than any origin does.
 */
export function looseReading(pathname: string): string {
  let path = pathname;
  for (let i = 0; i < DECODINGS && path.includes("%"); i++) {
    const decoded = path.replace(anyEscape, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
    if (decoded === path) break;
    path = decoded;
  }
  const kept: string[] = [];
  for (const segment of path.replaceAll("\\", "/").split("/")) {
    const semicolon = segment.indexOf(";");
    const name = semicolon < 0 ? segment : segment.slice(0, semicolon);
    if (name === "..") kept.pop();
    else if (name !== "" && name !== ".") kept.push(name);
  }
  return `/${kept.join("/")}`.toLowerCase();
}

const encodedSlash = /%2f/i;
const encodedSlashes = /%2f/gi;

/**
 * The path a rule's `path` globs count, from {@link normalizePath}'s result:
 * an encoded slash (`%2F`) read as a slash, as nginx reads it before routing;
 * without `;parameters` in any segment (Tomcat and Spring strip them, so
 * `/a;x=1/b;y` is `/a/b`; a `.` or `..` segment that leaves is resolved, as
 * they do, so `/x/..;/login` is `/login`), without a trailing slash (Express
 * and Spring route `/login/` to `/login`), and lower-cased unless the rule is
 * case-sensitive (Express routes `/LOGIN` to `/login`). An empty path (an
 * operator's absent value) stays empty.
 */
export function matchingPath(written: string, caseSensitive: boolean): string {
  let path = written;
  // An encoded slash: nginx decodes it before routing, so `/api%2Fx` is served as `/api/x`. Counted as that.
  const slashes = path.includes("%") && encodedSlash.test(path);
  if (slashes) path = path.replace(encodedSlashes, "/");
  if (slashes || path.includes(";")) {
    const kept: string[] = [];
    for (const segment of path.split("/")) {
      const semicolon = segment.indexOf(";");
      const name = semicolon < 0 ? segment : segment.slice(0, semicolon);
      if (name === "..") kept.pop();
      else if (name !== "" && name !== ".") kept.push(name);
    }
    path = `/${kept.join("/")}`;
  } else if (path.length > 1 && path.endsWith("/")) {
    path = path.slice(0, -1);
  }
  return caseSensitive ? path : path.toLowerCase();
}

/**
 * A path glob as the matching path is spelled: its `;parameters` removed and
 * a trailing slash dropped, as {@link matchingPath} does to a path, and
 * lower-cased for a case-insensitive rule. A glob that can never match (one
 * with `//`) is left so.
 */
export function canonicalGlob(source: string, caseSensitive: boolean): string {
  let glob = source;
  if (glob.includes("//")) return caseSensitive ? glob : glob.toLowerCase();
  if (glob.includes(";")) {
    const kept: string[] = [];
    source.split("/").forEach((segment, i) => {
      const semicolon = segment.indexOf(";");
      // A segment that was only parameters goes, as in matchingPath.
      if (semicolon < 0 || i === 0) kept.push(segment);
      else if (semicolon > 0) kept.push(segment.slice(0, semicolon));
    });
    glob = kept.length === 1 ? "/" : kept.join("/");
  }
  if (glob.length > 1 && glob.endsWith("/") && !glob.endsWith("//")) glob = glob.slice(0, -1);
  return caseSensitive ? glob : glob.toLowerCase();
}

/** A rule's `path` glob: as written, and as the matching path is spelled (see {@link canonicalGlob}). */
export type RuleGlob = PathGlob & { canonical: PathGlob };

/** Whether a URL's path never holds `char` as it is: the URL standard's path percent-encode set (`?` and `#` aside). */
const encodedInPaths = (char: string): boolean => {
  const code = char.codePointAt(0)!;
  return code <= 0x20 || code >= 0x7f || '"<>`{}'.includes(char);
};

/**
 * A glob written with characters a request's path arrives percent-encoded
 * in (a space, `é`, `{`), as the URL standard encodes them: `/café/*` is
 * `/caf%C3%A9/*`, which is what the runtime's URL gives a request for
 * `/café/menu`. As written, such a glob would never match. `?` and `#` stay
 * (check-config says why such a glob never matches); a tab or a line break,
 * which the URL standard drops, is encoded too and never matches.
 */
export function encodedGlob(source: string): string {
  let out = "";
  for (const char of source) {
    if (!encodedInPaths(char)) out += char;
    else if (char.length === 1 && char.charCodeAt(0) >= 0xd800 && char.charCodeAt(0) <= 0xdfff) out += "%EF%BF%BD";
    else out += encodeURIComponent(char);
  }
  return out;
}

/** Compiles a rule's `path` glob, for a rule with this case sensitivity (written as a request's path arrives). */
export function compileRuleGlob(glob: string, caseSensitive: boolean): RuleGlob {
  const source = encodedGlob(glob);
  const written = compileGlob(source);
  const canonical = canonicalGlob(source, caseSensitive);
  return { ...written, canonical: canonical === source ? written : compileGlob(canonical) };
}

/**
 * Whether a rule's `path` glob counts a request: when it matches the path as
 * written, so counting never narrows from what the glob matched before, or
 * the matching path with or without a trailing slash (`/api/*` counts `/api`
 * as it counts `/api/`). The matching path is asked for only when the path
 * as written does not match.
 */
export function globCounts(glob: RuleGlob, path: RequestPath, caseSensitive: boolean): boolean {
  const written = path.written;
  if (glob.test(written)) return true;
  const matching = path.matching(caseSensitive);
  // The same glob on the same path has just failed; only the trailing slash is left to try.
  const tried = matching === written && glob.canonical.source === glob.source;
  return (!tried && glob.canonical.test(matching)) || glob.canonical.test(`${matching}/`);
}

/** Whether a glob matches a path with or without a trailing slash (`/api/*` matches `/api`). */
export const matchesBare = (glob: PathGlob, path: string): boolean => glob.test(path) || glob.test(`${path}/`);

/** Whether a rule's glob matches a request's matching path, with or without a trailing slash: the path as origins route it. */
export function matchedIn(glob: RuleGlob, path: RequestPath, caseSensitive: boolean): boolean {
  return matchesBare(glob.canonical, path.matching(caseSensitive));
}

/** A request's path, as rules read it: as written, and the matching path for either case sensitivity, made once. */
export type RequestPath = {
  /** {@link normalizePath}'s result: what `exclude` globs match. */
  written: string;
  /** {@link matchingPath} for a rule's case sensitivity; worked out on first use. */
  matching: (caseSensitive: boolean) => string;
};

/** The path of a request, from its raw pathname (see {@link pathnameOf}). */
export const requestPath = (pathname: string): RequestPath => pathAsWritten(normalizePath(pathname));

/** The path of a request, from a path {@link normalizePath} has already normalised. */
export function pathAsWritten(written: string): RequestPath {
  let sensitive: string | undefined;
  let insensitive: string | undefined;
  return {
    written,
    matching: (caseSensitive) => {
      if (caseSensitive) {
        sensitive ??= matchingPath(written, true);
        return sensitive;
      }
      insensitive ??= sensitive?.toLowerCase() ?? matchingPath(written, false);
      return insensitive;
    },
  };
}
