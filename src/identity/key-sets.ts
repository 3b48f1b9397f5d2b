/**
 * @module
 * The keys tokens are verified with, as one isolate holds them: the set in
 * `JWT_JWKS` as given, or the set at `JWT_JWKS_URL`, fetched on first use,
 * kept for its TTL and then refreshed in the background (the old keys go on
 * working meanwhile, and when the endpoint is down), and fetched again at
 * most once a minute for a key it does not have. No request waits on a
 * fetch longer than it is told to.
 */
import { importJWK } from "jose";
import { parseKeySet } from "../config/jwt.ts";
import { logEvent } from "../observe/log.ts";

/** The algorithms this limiter verifies, and the key each needs. */
const KEY_SHAPES: Record<string, { kty: string; crv?: string }> = {
  RS256: { kty: "RSA" },
  ES256: { kty: "EC", crv: "P-256" },
  EdDSA: { kty: "OKP", crv: "Ed25519" },
  HS256: { kty: "oct" },
};

/** Keys tried at most for one token that names no `kid`: a token cannot make the isolate try a whole set. */
const MAX_CANDIDATES = 4;

/** A key as jose verifies with it: a public key, or an HS256 secret's bytes. */
export type VerifyingKey = CryptoKey | Uint8Array;

/** A set of keys, ready to pick from, with each key imported once per algorithm. */
export class KeyRing {
  private readonly imported = new WeakMap<JsonWebKey, Promise<VerifyingKey | null>>();

  /**
   * @param keys the set's keys
   * @param generation which fetch of the set this is (1 for the first): a
   *   verdict against one generation is not reused against another
   */
  readonly keys: readonly JsonWebKey[];
  readonly generation: number;

  constructor(keys: readonly JsonWebKey[], generation: number) {
    this.keys = keys;
    this.generation = generation;
  }

  /** The keys a token signed with `alg` and naming `kid` may be verified with, in the set's order. */
  candidates(alg: string, kid: string | undefined): JsonWebKey[] {
    const shape = KEY_SHAPES[alg];
    if (shape === undefined) return [];
    const fits = (key: JsonWebKey & { kid?: string; use?: string }) =>
      key.kty === shape.kty &&
      (shape.crv === undefined || key.crv === shape.crv) &&
      (key.alg === undefined || key.alg === alg) &&
      (key.use === undefined || key.use === "sig") &&
      (kid === undefined || key.kid === kid);
    return this.keys.filter(fits).slice(0, MAX_CANDIDATES);
  }

  /** The key, imported for `alg`; null when its material is unusable (which is logged once). */
  cryptoKey(jwk: JsonWebKey, alg: string): Promise<VerifyingKey | null> {
    let key = this.imported.get(jwk);
    if (key === undefined) {
      key = importJWK(jwk as Parameters<typeof importJWK>[0], alg)
        // jose gives an HS256 secret as bytes, and would import them again on every verification.
        .then((imported) =>
          imported instanceof Uint8Array
            ? crypto.subtle.importKey("raw", imported, { name: "HMAC", hash: "SHA-256" }, false, ["verify"])
            : imported,
        )
        .catch((error: Error) => {
          const kid = (jwk as { kid?: string }).kid;
          logEvent({ event: "jwks_key_unusable", kid: kid ?? null, alg, error: error.message }, "warn");
          return null;
        });
      this.imported.set(jwk, key);
    }
    return key;
  }
}

export type KeySetOptions = {
  clock: () => number;
  /** Fetches the key set; the global `fetch` by default. */
  fetcher?: (url: string, init: RequestInit) => Promise<Response>;
};

/** What a fetched key set reports about itself, for the admin API and the tests. */
export type KeySetStats = {
  /** Fetches started, successful or not. */
  fetches: number;
  /** Fetches that failed: no answer in time, a status other than 200, or not a key set. */
  failures: number;
  /** The generation of the keys in use; 0 before the first good fetch. */
  generation: number;
};

/** After a failed fetch, the next is not started sooner than this. */
export const RETRY_FAILED_MS = 5_000;
/** A key the set lacks starts a fetch at most this often. */
export const UNKNOWN_KID_REFETCH_MS = 60_000;
/** One fetch of a key set takes at most this long, whoever waits for it. */
export const FETCH_TIMEOUT_MS = 10_000;
/** The largest key set read. */
export const MAX_JWKS_BYTES = 256 * 1024;

/** The key set at a URL, as one isolate holds it. */
export class RemoteKeySet {
  private ring: KeyRing | null = null;
  private fetchedAtMs = Number.NEGATIVE_INFINITY;
  private attemptedAtMs = Number.NEGATIVE_INFINITY;
  private inFlight: Promise<void> | null = null;
  readonly stats: KeySetStats = { fetches: 0, failures: 0, generation: 0 };

  private readonly source: { url: string; ttlMs: number };
  private readonly options: KeySetOptions;

  constructor(source: { url: string; ttlMs: number }, options: KeySetOptions) {
    this.source = source;
    this.options = options;
  }

  /**
   * The keys now. Stale keys start a refresh in the background and are
   * returned at once; with no keys yet, waits at most `waitMs` for a fetch.
   */
  async current(waitMs: number, background: (task: Promise<unknown>) => void): Promise<KeyRing | null> {
    const nowMs = this.options.clock();
    const due = this.ring === null || nowMs - this.fetchedAtMs >= this.source.ttlMs;
    if (due && nowMs - this.attemptedAtMs >= RETRY_FAILED_MS) this.refresh(background);
    if (this.ring === null && this.inFlight !== null) await within(this.inFlight, waitMs);
    return this.ring;
  }

  /**
   * The keys, once more, for a token that names a key they lack: fetched
   * again unless a fetch started less than a minute ago, and waited for at
   * most `waitMs`.
   */
  async lacking(waitMs: number, background: (task: Promise<unknown>) => void): Promise<KeyRing | null> {
    if (this.inFlight === null && this.options.clock() - this.attemptedAtMs >= UNKNOWN_KID_REFETCH_MS) {
      this.refresh(background);
    }
    if (this.inFlight !== null) await within(this.inFlight, waitMs);
    return this.ring;
  }

  private refresh(background: (task: Promise<unknown>) => void): void {
    if (this.inFlight !== null) return;
    this.attemptedAtMs = this.options.clock();
    this.stats.fetches++;
    const fetching = this.load().then(
      (keys) => {
        this.stats.generation++;
        this.ring = new KeyRing(keys, this.stats.generation);
        this.fetchedAtMs = this.options.clock();
      },
      (error: Error) => {
        this.stats.failures++;
        const keeping = this.ring === null ? "no keys yet" : `keeping generation ${this.ring.generation}`;
        logEvent({ event: "jwks_fetch_failed", url: this.source.url, error: error.message, keeping }, "warn");
      },
    );
    this.inFlight = fetching.finally(() => {
      this.inFlight = null;
    });
    background(this.inFlight);
  }

  /** Fetches and reads the set. HS256 keys are secrets, never published: a set at a URL has none used. */
  private async load(): Promise<JsonWebKey[]> {
    const fetcher = this.options.fetcher ?? ((url, init) => fetch(url, init));
    const response = await fetcher(this.source.url, {
      headers: { accept: "application/json" },
      signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
    });
    if (response.status !== 200) {
      await response.body?.cancel();
      throw new Error(`answered ${response.status}`);
    }
    const set = parseKeySet(await cappedText(response, MAX_JWKS_BYTES), this.source.url);
    if (!set.ok) throw new Error(set.errors.join("; "));
    return set.value.keys.filter((key) => key.kty !== "oct");
  }
}

/** Resolves when `task` does, or after `ms`, whichever is first. */
async function within(task: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, ms));
  });
  try {
    await Promise.race([task, timeout]);
  } finally {
    if (timer !== null) clearTimeout(timer);
  }
}

/** The response's body as text, or an error past `maxBytes`. */
async function cappedText(response: Response, maxBytes: number): Promise<string> {
  const declared = Number(response.headers.get("content-length") ?? 0);
  if (declared > maxBytes) {
    await response.body?.cancel();
    throw new Error(`is ${declared} bytes, over ${maxBytes}`);
  }
  const reader = response.body?.getReader();
  if (reader === undefined) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw new Error(`is over ${maxBytes} bytes`);
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return new TextDecoder().decode(bytes);
}
